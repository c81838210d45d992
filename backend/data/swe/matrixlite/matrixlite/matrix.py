"""Matrices as lists of rows."""

from .vector import dot


def shape(m):
    """(rows, columns)."""
    return (len(m), len(m[0]) if m else 0)


def transpose(m):
    rows, cols = shape(m)
    return [[m[r][c] for r in range(rows)] for c in range(cols)]


def matmul(a, b):
    """The product a @ b."""
    if shape(a)[1] != shape(b)[0]:
        raise ValueError("inner dimensions differ")
    bt = transpose(b)
    return [[dot(row, col) for col in bt] for row in a]


def identity(n):
    return [[1 if r == c else 0 for c in range(n)] for r in range(n)]


def minor(m, col):
    """m without its first row and column `col`."""
    return [row[:col] + row[col + 1:] for row in m[1:]]


def det(m):
    """Determinant by expansion along the first row."""
    n, cols = shape(m)
    if n != cols:
        raise ValueError("matrix is not square")
    if n == 1:
        return m[0][0]
    total = 0
    for c in range(n):
        sign = 1 if c % 2 == 0 else -1
        total += sign * m[0][c] * det(minor(m, c))
    return total
