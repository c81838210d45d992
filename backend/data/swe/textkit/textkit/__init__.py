"""Small text utilities."""

from .slug import is_slug, slugify
from .stats import char_frequency, longest_word, word_count
from .wrap import truncate, wrap

__all__ = ["slugify", "is_slug", "wrap", "truncate", "word_count", "char_frequency", "longest_word"]
