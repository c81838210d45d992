"""URL slugs."""

ALLOWED = "abcdefghijklmnopqrstuvwxyz0123456789"


def slugify(text, sep="-", max_len=40):
    """Lower-case words of letters and digits joined by `sep`, at most max_len chars."""
    words = []
    current = ""
    for ch in text.lower():
        if ch in ALLOWED:
            current += ch
        elif current:
            words.append(current)
            current = ""
    if current:
        words.append(current)
    slug = sep.join(words)
    if len(slug) > max_len:
        slug = slug[:max_len].rstrip(sep)
    return slug


def is_slug(text, sep="-"):
    """True when `text` is non-empty and already a slug."""
    if len(text) == 0:
        return False
    if text.startswith(sep) or text.endswith(sep):
        return False
    return all(ch in ALLOWED or ch == sep for ch in text)
