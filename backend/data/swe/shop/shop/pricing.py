"""Discounts and tax. Amounts are integer cents, rounded half up."""


def round_half_up(x):
    return int(x + 0.5)


def apply_discount(amount, percent):
    """`amount` reduced by `percent` percent."""
    if percent < 0 or percent > 100:
        raise ValueError("percent must be within 0..100")
    return round_half_up(amount * (100 - percent) / 100)


def bulk_discount(units):
    """Percent off for buying many units: 10+ units 5%, 50+ units 10%."""
    if units >= 50:
        return 10
    if units >= 10:
        return 5
    return 0


def tax(amount, rate_percent):
    """Tax due on `amount` at `rate_percent` percent."""
    return round_half_up(amount * rate_percent / 100)
