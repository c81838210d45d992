"""Checkout: bulk discount, then the coupon, then tax."""

from .pricing import apply_discount, bulk_discount, tax

COUPONS = {"SAVE10": 10, "HALF": 50}


def total(cart, coupon=None, tax_rate=0):
    """What the customer pays, in cents."""
    amount = apply_discount(cart.subtotal(), bulk_discount(cart.count()))
    if coupon is not None:
        if coupon not in COUPONS:
            raise KeyError(f"unknown coupon {coupon}")
        amount = apply_discount(amount, COUPONS[coupon])
    return amount + tax(amount, tax_rate)
