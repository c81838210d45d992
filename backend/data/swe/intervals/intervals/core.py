"""The Interval type: a closed range [start, end]."""


class Interval:
    def __init__(self, start, end):
        if start > end:
            raise ValueError("start must not exceed end")
        self.start = start
        self.end = end

    def __eq__(self, other):
        return isinstance(other, Interval) and (self.start, self.end) == (other.start, other.end)

    def __repr__(self):
        return f"Interval({self.start}, {self.end})"

    def length(self):
        return self.end - self.start

    def contains(self, x):
        """True when x lies in the interval, ends included."""
        return self.start <= x <= self.end

    def overlaps(self, other):
        """True when the two intervals share at least one point."""
        return self.start <= other.end and other.start <= self.end

    def intersection(self, other):
        """The shared part, or None when they do not overlap."""
        if not self.overlaps(other):
            return None
        return Interval(max(self.start, other.start), min(self.end, other.end))
