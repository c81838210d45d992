from textkit import is_slug, slugify


def test_slugify_basic():
    assert slugify("Hello World") == "hello-world"


def test_slugify_punctuation():
    assert slugify("  Rock & Roll!  ") == "rock-roll"


def test_is_slug():
    assert is_slug("hello-world")
    assert not is_slug("Hello World")
