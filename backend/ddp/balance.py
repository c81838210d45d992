"""Which rank trains which rollout: equal work per rank, each rank keeping its own rollouts where it can.

Every rank generates the same number of rollouts, but the harness keeps a different number
of them for training on each (dead groups, filters) and their lengths differ, and the
gradient all-reduce waits for the slowest rank. So the trained rollouts are dealt out again
by their token count before the update: a rank keeps the rollouts it generated (their tokens
are already there) up to its share of the work, and the surplus goes to the ranks below it,
whose messages then carry the moved rollouts' token ids. Which rank computes a rollout's
gradient does not change the update: the gradients are summed over every rank.
"""

from __future__ import annotations


def balance(costs: list[list[float]]) -> list[list[tuple[int, int]]]:
    """`costs[r][k]`: the work of rank r's k-th trained rollout. Returns, per rank, the
    (generating rank, k) pairs it trains: its own first, in order, then those moved to it.

    >>> balance([[5, 5, 5, 5], [5]])
    [[(0, 0), (0, 1), (0, 2)], [(1, 0), (0, 3)]]
    >>> balance([[1, 1], [1, 1]])
    [[(0, 0), (0, 1)], [(1, 0), (1, 1)]]
    """
    world = len(costs)
    target = sum(map(sum, costs)) / max(world, 1)
    plan: list[list[tuple[int, int]]] = [[] for _ in range(world)]
    load = [0.0] * world
    surplus: list[tuple[float, int, int]] = []
    for r, own in enumerate(costs):
        for k, c in enumerate(own):
            if load[r] + c / 2 <= target:  # kept while the rank stays nearer its share with it than without
                plan[r].append((r, k))
                load[r] += c
            else:
                surplus.append((c, r, k))
    for c, r, k in sorted(surplus, key=lambda x: (-x[0], x[1], x[2])):  # largest first, to the least loaded
        dest = min(range(world), key=lambda d: (load[d], d))
        plan[dest].append((r, k))
        load[dest] += c
    return plan
