"""Greedy line wrapping and truncation."""


def wrap(text, width):
    """Split `text` into lines of at most `width` characters, breaking between words.
    A word longer than `width` gets a line of its own."""
    lines = []
    line = ""
    for word in text.split():
        if not line:
            line = word
        elif len(line) + 1 + len(word) <= width:
            line = line + " " + word
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    return lines


def truncate(text, limit, suffix="..."):
    """Shorten `text` to at most `limit` characters, ending with `suffix` when cut."""
    if len(text) <= limit:
        return text
    keep = limit - len(suffix)
    if keep < 0:
        return suffix[:limit]
    return text[:keep] + suffix
