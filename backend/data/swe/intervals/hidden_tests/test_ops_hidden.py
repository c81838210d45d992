from intervals import Interval, gaps, merge, total_length


def test_merge_cases():
    assert merge([]) == []
    assert merge([Interval(5, 8), Interval(0, 3), Interval(2, 4)]) == [Interval(0, 4), Interval(5, 8)]
    assert merge([Interval(0, 10), Interval(2, 3)]) == [Interval(0, 10)]
    assert merge([Interval(0, 1), Interval(1, 2)]) == [Interval(0, 2)]
    assert merge([Interval(3, 4), Interval(0, 1)]) == [Interval(0, 1), Interval(3, 4)]


def test_total_length_cases():
    assert total_length([]) == 0
    assert total_length([Interval(0, 3), Interval(2, 5), Interval(10, 11)]) == 6
    assert total_length([Interval(0, 10), Interval(1, 2)]) == 10


def test_gaps_cases():
    assert gaps([Interval(0, 2), Interval(5, 6)]) == [Interval(2, 5)]
    assert gaps([Interval(0, 2), Interval(1, 3)]) == []
    assert gaps([Interval(8, 9), Interval(0, 1), Interval(4, 5)]) == [Interval(1, 4), Interval(5, 8)]
