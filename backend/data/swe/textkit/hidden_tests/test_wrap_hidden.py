from textkit import truncate, wrap


def test_wrap_cases():
    assert wrap("the quick brown fox", 10) == ["the quick", "brown fox"]
    assert wrap("aaa bbb", 7) == ["aaa bbb"]
    assert wrap("aaa bbb", 6) == ["aaa", "bbb"]
    assert wrap("averyveryverylongword x", 5) == ["averyveryverylongword", "x"]
    assert wrap("", 5) == []
    assert wrap("a b c d", 3) == ["a b", "c d"]


def test_truncate_cases():
    assert truncate("hello world", 8) == "hello..."
    assert truncate("hello", 5) == "hello"
    assert truncate("hello!", 5) == "he..."
    assert truncate("hello", 2) == ".."
    assert truncate("hello world", 6, suffix="~") == "hello~"
