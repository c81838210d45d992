from matrixlite import det, identity, matmul, shape, transpose


def test_shape_cases():
    assert shape([]) == (0, 0)
    assert shape([[1]]) == (1, 1)
    assert shape([[1, 2, 3], [4, 5, 6]]) == (2, 3)


def test_transpose_cases():
    assert transpose([[1, 2, 3]]) == [[1], [2], [3]]
    assert transpose([[1, 2], [3, 4]]) == [[1, 3], [2, 4]]


def test_matmul_cases():
    assert matmul([[1, 2, 3]], [[1], [2], [3]]) == [[14]]
    assert matmul([[1], [2]], [[3, 4]]) == [[3, 4], [6, 8]]
    assert matmul(identity(2), [[5, 6], [7, 8]]) == [[5, 6], [7, 8]]
    try:
        matmul([[1, 2]], [[1, 2]])
    except ValueError:
        pass
    else:
        raise AssertionError("mismatched shapes should raise ValueError")


def test_identity_cases():
    assert identity(1) == [[1]]
    assert identity(2) == [[1, 0], [0, 1]]


def test_det_cases():
    assert det([[7]]) == 7
    assert det([[1, 2], [3, 4]]) == -2
    assert det([[2, 0, 0], [0, 3, 0], [0, 0, 4]]) == 24
    assert det([[1, 2, 3], [4, 5, 6], [7, 8, 10]]) == -3
    assert det([[0, 1], [1, 0]]) == -1
    try:
        det([[1, 2]])
    except ValueError:
        pass
    else:
        raise AssertionError("det of a non-square matrix should raise ValueError")
