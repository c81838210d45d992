"""Operations on lists of intervals."""

from .core import Interval


def merge(intervals):
    """Merge overlapping intervals; the result is sorted by start."""
    ordered = sorted(intervals, key=lambda iv: iv.start)
    merged = []
    for iv in ordered:
        if merged and merged[-1].overlaps(iv):
            last = merged[-1]
            merged[-1] = Interval(last.start, max(last.end, iv.end))
        else:
            merged.append(iv)
    return merged


def total_length(intervals):
    """Length covered by the union of the intervals."""
    return sum(iv.length() for iv in merge(intervals))


def gaps(intervals):
    """The uncovered stretches between the merged intervals."""
    merged = merge(intervals)
    out = []
    for i in range(1, len(merged)):
        out.append(Interval(merged[i - 1].end, merged[i].start))
    return out
