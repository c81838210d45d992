from textkit import truncate, wrap


def test_wrap_simple():
    assert wrap("the quick brown fox", 10) == ["the quick", "brown fox"]


def test_truncate():
    assert truncate("hello world", 8) == "hello..."
    assert truncate("short", 10) == "short"
