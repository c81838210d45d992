from intervals import Interval


def test_construct():
    try:
        Interval(3, 1)
    except ValueError:
        pass
    else:
        raise AssertionError("Interval(3, 1) should raise ValueError")
    assert Interval(2, 2).length() == 0


def test_length_cases():
    assert Interval(2, 7).length() == 5
    assert Interval(-3, 4).length() == 7


def test_contains_cases():
    iv = Interval(0, 10)
    assert iv.contains(0) and iv.contains(10) and iv.contains(5)
    assert not iv.contains(-1) and not iv.contains(11)


def test_overlaps_cases():
    assert Interval(0, 5).overlaps(Interval(5, 8))
    assert Interval(5, 8).overlaps(Interval(0, 5))
    assert Interval(0, 10).overlaps(Interval(2, 3))
    assert not Interval(0, 5).overlaps(Interval(6, 8))
    assert not Interval(6, 8).overlaps(Interval(0, 5))


def test_intersection_cases():
    assert Interval(0, 5).intersection(Interval(3, 9)) == Interval(3, 5)
    assert Interval(3, 9).intersection(Interval(0, 5)) == Interval(3, 5)
    assert Interval(0, 10).intersection(Interval(2, 3)) == Interval(2, 3)
    assert Interval(0, 1).intersection(Interval(2, 3)) is None
