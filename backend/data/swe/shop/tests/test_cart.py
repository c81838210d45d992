from shop import Cart


def test_add_and_count():
    cart = Cart()
    cart.add("apple", 50, 3)
    cart.add("pear", 80)
    assert cart.count() == 4
    assert cart.subtotal() == 230


def test_remove():
    cart = Cart()
    cart.add("apple", 50, 3)
    cart.remove("apple", 2)
    assert cart.count() == 1
