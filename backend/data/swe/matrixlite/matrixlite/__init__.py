"""Vectors and matrices as lists."""

from .matrix import det, identity, matmul, shape, transpose
from .vector import add, dot, norm_sq, scale

__all__ = ["dot", "add", "scale", "norm_sq", "shape", "transpose", "matmul", "identity", "det"]
