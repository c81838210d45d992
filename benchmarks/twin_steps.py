"""Do two runs train identically? Their per-step training records compared exactly.

    python benchmarks/twin_steps.py RUN_DIR_A RUN_DIR_B [...more pairs]

For each pair: the steps both have, the first step whose loss, gradient norm,
mean reward or entropy differ (`backend/tools/report_invariance.py`), and the
largest absolute loss difference over the steps after it. Used on the GPU to
tell numeric nondeterminism (two static runs of one seed) from an effect of
evolution (a coevolve run against its static twin).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.store import Store  # noqa: E402
from backend.tools.report_invariance import first_divergence  # noqa: E402


def steps(run_dir: str) -> list[dict]:
    s = Store.open(Path(run_dir), readonly=True)
    try:
        return [dict(r) for r in s.step_series()]
    finally:
        s.close()


def main(argv: list[str]) -> int:
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    for a, b in zip(argv[::2], argv[1::2]):
        sa, sb = steps(a), steps(b)
        d = first_divergence(sa, sb)
        lb = {r["step"]: r["loss"] for r in sb}
        gap = max((abs(r["loss"] - lb[r["step"]]) for r in sa
                   if d is not None and r["step"] >= d and r["step"] in lb
                   and r["loss"] is not None and lb[r["step"]] is not None), default=0.0)
        same = "identical" if d is None else f"identical through step {d - 1}, max |loss diff| after: {gap:.3g}"
        print(f"{Path(a).name} vs {Path(b).name}: {min(len(sa), len(sb))} steps, {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
