from shop import Cart, apply_discount, bulk_discount, tax, total


def test_apply_discount_cases():
    assert apply_discount(1000, 0) == 1000
    assert apply_discount(1000, 100) == 0
    assert apply_discount(999, 50) == 500
    assert apply_discount(1001, 10) == 901
    for bad in (-1, 101):
        try:
            apply_discount(100, bad)
        except ValueError:
            continue
        raise AssertionError(f"percent {bad} should raise ValueError")


def test_bulk_discount_edges():
    assert bulk_discount(9) == 0
    assert bulk_discount(10) == 5
    assert bulk_discount(49) == 5
    assert bulk_discount(50) == 10
    assert bulk_discount(200) == 10


def test_tax_cases():
    assert tax(1000, 8) == 80
    assert tax(1005, 10) == 101
    assert tax(0, 20) == 0


def test_total_cases():
    cart = Cart()
    cart.add("book", 1000, 2)
    assert total(cart) == 2000
    assert total(cart, tax_rate=10) == 2200
    assert total(cart, coupon="HALF") == 1000
    assert total(cart, coupon="SAVE10", tax_rate=10) == 1980
    bulk = Cart()
    bulk.add("pen", 100, 10)
    assert total(bulk) == 950
    assert total(bulk, coupon="SAVE10") == 855


def test_unknown_coupon():
    cart = Cart()
    cart.add("a", 10)
    try:
        total(cart, coupon="FREE")
    except KeyError:
        return
    raise AssertionError("an unknown coupon should raise KeyError")
