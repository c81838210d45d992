"""The cart: item name -> (unit price in cents, quantity)."""


class Cart:
    def __init__(self):
        self.items = {}

    def add(self, name, price, qty=1):
        if qty <= 0:
            raise ValueError("quantity must be positive")
        old_price, old_qty = self.items.get(name, (price, 0))
        self.items[name] = (price, old_qty + qty)

    def remove(self, name, qty=1):
        """Remove qty units; the item disappears when none are left."""
        price, have = self.items[name]
        left = have - qty
        if left > 0:
            self.items[name] = (price, left)
        else:
            del self.items[name]

    def count(self):
        """Total number of units."""
        return sum(qty for _, qty in self.items.values())

    def subtotal(self):
        """Sum of price * quantity, in cents."""
        return sum(price * qty for price, qty in self.items.values())
