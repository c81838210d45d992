from intervals import Interval


def test_length():
    assert Interval(2, 7).length() == 5


def test_contains():
    assert Interval(0, 10).contains(10)
    assert not Interval(0, 10).contains(11)


def test_overlaps():
    assert Interval(0, 5).overlaps(Interval(5, 8))
    assert not Interval(0, 5).overlaps(Interval(6, 8))


def test_intersection():
    assert Interval(0, 5).intersection(Interval(3, 9)) == Interval(3, 5)
