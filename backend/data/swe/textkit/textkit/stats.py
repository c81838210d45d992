"""Word statistics."""


def word_count(text):
    """Number of whitespace-separated words."""
    return len(text.split())


def char_frequency(text, ignore_spaces=True):
    """Count of each character, optionally skipping whitespace."""
    counts = {}
    for ch in text:
        if ignore_spaces and ch.isspace():
            continue
        counts[ch] = counts.get(ch, 0) + 1
    return counts


def longest_word(text):
    """The longest word (the first one on ties), or "" for no words."""
    best = ""
    for word in text.split():
        if len(word) > len(best):
            best = word
    return best
