from matrixlite import add, dot, norm_sq, scale


def test_dot():
    assert dot([1, 2, 3], [4, 5, 6]) == 32


def test_add_scale():
    assert add([1, 2], [3, 4]) == [4, 6]
    assert scale([1, -2], 3) == [3, -6]


def test_norm_sq():
    assert norm_sq([3, 4]) == 25
