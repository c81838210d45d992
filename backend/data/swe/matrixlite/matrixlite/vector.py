"""Vectors as lists of numbers."""


def dot(u, v):
    if len(u) != len(v):
        raise ValueError("vectors differ in length")
    return sum(a * b for a, b in zip(u, v))


def add(u, v):
    if len(u) != len(v):
        raise ValueError("vectors differ in length")
    return [a + b for a, b in zip(u, v)]


def scale(u, k):
    return [k * a for a in u]


def norm_sq(u):
    """Squared Euclidean length."""
    return dot(u, u)
