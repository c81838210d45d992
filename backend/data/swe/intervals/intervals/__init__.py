"""Closed numeric intervals."""

from .core import Interval
from .ops import gaps, merge, total_length

__all__ = ["Interval", "merge", "total_length", "gaps"]
