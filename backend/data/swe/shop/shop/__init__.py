"""A shopping cart priced in integer cents."""

from .cart import Cart
from .checkout import total
from .pricing import apply_discount, bulk_discount, tax

__all__ = ["Cart", "total", "apply_discount", "bulk_discount", "tax"]
