from shop import Cart


def test_add_merges_quantities():
    cart = Cart()
    cart.add("apple", 50, 3)
    cart.add("apple", 50, 2)
    assert cart.items["apple"] == (50, 5)
    assert cart.count() == 5
    assert cart.subtotal() == 250


def test_add_rejects_bad_quantity():
    cart = Cart()
    for bad in (0, -1):
        try:
            cart.add("x", 10, bad)
        except ValueError:
            continue
        raise AssertionError(f"add with qty={bad} should raise ValueError")
    cart.add("x", 10, 1)
    assert cart.count() == 1


def test_remove_cases():
    cart = Cart()
    cart.add("apple", 50, 3)
    cart.remove("apple")
    assert cart.items["apple"] == (50, 2)
    cart.remove("apple", 2)
    assert "apple" not in cart.items
    cart.add("pear", 80, 1)
    cart.remove("pear", 5)
    assert cart.count() == 0


def test_subtotal_mixed():
    cart = Cart()
    cart.add("a", 199, 2)
    cart.add("b", 1, 7)
    assert cart.subtotal() == 405
