from matrixlite import det, identity, matmul, shape, transpose


def test_shape_transpose():
    m = [[1, 2, 3], [4, 5, 6]]
    assert shape(m) == (2, 3)
    assert transpose(m) == [[1, 4], [2, 5], [3, 6]]


def test_matmul():
    assert matmul([[1, 2], [3, 4]], [[5, 6], [7, 8]]) == [[19, 22], [43, 50]]


def test_det():
    assert det([[1, 2], [3, 4]]) == -2
    assert det(identity(3)) == 1
