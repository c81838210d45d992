from textkit import char_frequency, longest_word, word_count


def test_word_count():
    assert word_count("one two  three") == 3


def test_char_frequency():
    assert char_frequency("aab b") == {"a": 2, "b": 2}


def test_longest_word():
    assert longest_word("a bb ccc dd") == "ccc"
