from matrixlite import add, dot, norm_sq, scale


def raises(fn, *args):
    try:
        fn(*args)
    except ValueError:
        return True
    return False


def test_dot_cases():
    assert dot([], []) == 0
    assert dot([2], [5]) == 10
    assert dot([1, -1], [1, 1]) == 0
    assert raises(dot, [1], [1, 2])


def test_add_cases():
    assert add([1, 2, 3], [10, 20, 30]) == [11, 22, 33]
    assert raises(add, [1, 2], [1])


def test_scale_norm():
    assert scale([], 5) == []
    assert scale([2, 0], -1) == [-2, 0]
    assert norm_sq([1, 2, 2]) == 9
    assert norm_sq([0]) == 0
