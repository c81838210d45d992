"""Which rows of a GRPO step go into which training pass.

A pass pads every row to its longest one, and the padding costs as much as real
tokens (projections, MLP, attention). In the rollouts' order a step's passes
each hold some long rows, so most rows are padded to near the step's longest.
Sorted by length, each pass holds rows of like length and pads little, and a
pass of short rows can hold more of them in the same memory
(`memory.rows_at_length`).

The loss is unchanged: the trainer sums every pass's masked token terms and
divides by one count for the whole step (`grpo.grpo_terms` with `denom`), so
only the order of the additions moves. The partition depends on the rows'
lengths and the memory plan alone (ties keep the rollouts' order), so two runs
of one config still run the same passes.

    >>> by_length([5, 9, 2, 9, 4], lambda T: 2)
    [[1, 3], [0, 4], [2]]
    >>> in_order(5, 2)
    [[0, 1], [2, 3], [4]]
    >>> no_single_row_pass([[0, 1, 2], [3, 4], [5]])
    [[0, 1], [3, 4], [2, 5]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def in_order(n: int, rows: int) -> list[list[int]]:
    """Passes of `rows` consecutive rows (the last may be shorter): the trainer's order without buckets."""
    rows = max(1, int(rows))
    return [list(range(i, min(i + rows, n))) for i in range(0, n, rows)]


def by_length(lengths: Sequence[int], rows_at: Callable[[int], int]) -> list[list[int]]:
    """Row indices per pass, longest rows first; a pass whose longest row has T tokens holds at most
    `rows_at(T)` rows (at least 1). Ties in length keep their order, so the plan is a function of
    the lengths and `rows_at` alone."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    passes: list[list[int]] = []
    k = 0
    while k < len(order):
        cap = max(1, int(rows_at(lengths[order[k]])))
        passes.append(order[k:k + cap])
        k += cap
    return passes


def no_single_row_pass(passes: list[list[int]]) -> list[list[int]]:
    """The passes with a one-row pass given the last row of the nearest earlier pass that holds
    at least three (so that one keeps two); without such a pass it stays as it is.

    Under `train.compile` a layer compiled for dynamic shapes still specializes a size of 1, so
    a pass of one row compiles every layer again (twice: with and without gradients). The lent
    row is at least as long as the one it joins when the passes run longest first, and the
    lender held at least three rows at that length, so two fit."""
    out = [list(p) for p in passes]
    for k, p in enumerate(out):
        if len(p) == 1:
            lender = next((j for j in range(k - 1, -1, -1) if len(out[j]) >= 3), None)
            if lender is not None:
                out[k] = [out[lender].pop()] + p
    return out


def padded_tokens(lengths: Sequence[int], passes: list[list[int]]) -> int:
    """Tokens the passes compute: each pass's rows times its longest row."""
    return sum(len(p) * max(lengths[i] for i in p) for p in passes if p)
