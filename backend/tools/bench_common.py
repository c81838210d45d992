"""What several `evotui bench` sections share: the table's `Row`, the harness of the loop
sections, and the interval of repeated timings. Kept apart from bench.py so the section modules import it
without importing the command (no cycle)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Row:
    section: str
    what: str
    baseline: str = ""
    ours: str = ""
    ratio: str = ""
    note: str = ""
    data: dict = field(default_factory=dict)


def bench_harness(domain: str = "math") -> str:
    """The domain's default harness plus a small brevity reward, so no group is dead and every step trains.

    SWE: its CURRICULUM names no level, so a step draws from every level of the run's `swe.levels`
    (the default harness draws level 1 alone) and the bench's stated level mix is what it trains on.
    """
    from backend.evolve.edit import constant, set_constant
    from backend.harness.loader import default_harness_path

    code = default_harness_path(domain).read_text()
    code = set_constant(code, "REWARD_WEIGHTS", {**constant(code, "REWARD_WEIGHTS"), "brevity": 0.01})
    if domain == "swe":
        code = set_constant(code, "CURRICULUM", {})
    path = Path(tempfile.mkdtemp(prefix="evotui-bench-")) / "harness.py"
    path.write_text(code + "\n\ndef reward_brevity(r):\n    return -len(r.completion) / 1000\n")
    return str(path)


T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}


def interval(xs: list[float], fmt: str = "{:.2f}") -> str:
    """ "mean +- half-width of its 95% t-interval (n=N)" of repeated timings; n=1: the value alone."""
    n = len(xs)
    if n == 0:
        return "-"
    m = sum(xs) / n
    if n == 1:
        return f"{fmt.format(m)} (n=1)"
    sd = (sum((x - m) ** 2 for x in xs) / (n - 1)) ** 0.5
    half = T975.get(n - 1, 1.96) * sd / n ** 0.5
    return f"{fmt.format(m)} +- {fmt.format(half)} (n={n})"
