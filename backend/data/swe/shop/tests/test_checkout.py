from shop import Cart, apply_discount, bulk_discount, tax, total


def test_pricing():
    assert apply_discount(1000, 10) == 900
    assert bulk_discount(12) == 5
    assert tax(1000, 8) == 80


def test_total_with_coupon_and_tax():
    cart = Cart()
    cart.add("book", 1000, 2)
    assert total(cart, coupon="SAVE10", tax_rate=10) == 1980
