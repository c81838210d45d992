from textkit import is_slug, slugify


def test_slugify_cases():
    assert slugify("Hello World") == "hello-world"
    assert slugify("Python 3.12 release") == "python-3-12-release"
    assert slugify("a_b", sep="_") == "a_b"
    assert slugify("") == ""
    assert slugify("!!!") == ""
    assert slugify("x") == "x"


def test_slugify_max_len():
    assert slugify("aaaa bbbb cccc", max_len=9) == "aaaa-bbbb"
    assert slugify("aaaa bbbb cccc", max_len=10) == "aaaa-bbbb"
    assert slugify("abcdefgh", max_len=8) == "abcdefgh"
    assert slugify("abcdefghi", max_len=8) == "abcdefgh"


def test_is_slug_cases():
    assert is_slug("a")
    assert is_slug("a-b-c")
    assert not is_slug("")
    assert not is_slug("-a")
    assert not is_slug("a-")
    assert not is_slug("a b")
    assert is_slug("a_b", sep="_")
