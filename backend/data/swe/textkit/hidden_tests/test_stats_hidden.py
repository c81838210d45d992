from textkit import char_frequency, longest_word, word_count


def test_word_count_cases():
    assert word_count("") == 0
    assert word_count("one") == 1
    assert word_count(" a  b\tc\n") == 3


def test_char_frequency_cases():
    assert char_frequency("aab b") == {"a": 2, "b": 2}
    assert char_frequency("a a", ignore_spaces=False) == {"a": 2, " ": 1}
    assert char_frequency("") == {}


def test_longest_word_cases():
    assert longest_word("") == ""
    assert longest_word("ab cd") == "ab"
    assert longest_word("a bbb cc") == "bbb"
    assert longest_word("xy xyz") == "xyz"
