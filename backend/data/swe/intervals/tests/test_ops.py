from intervals import Interval, gaps, merge, total_length


def test_merge():
    assert merge([Interval(5, 8), Interval(0, 3), Interval(2, 4)]) == [Interval(0, 4), Interval(5, 8)]


def test_total_length():
    assert total_length([Interval(0, 3), Interval(2, 5), Interval(10, 11)]) == 6


def test_gaps():
    assert gaps([Interval(0, 2), Interval(5, 6)]) == [Interval(2, 5)]
