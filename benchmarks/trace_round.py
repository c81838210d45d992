"""Count the modules whose code runs during one evolution round (issue 17's measure).

Builds a synthetic run (real migrations, real default harness, real evaluator),
then runs one round with a probe in auto-promote mode under `sys.setprofile`,
and prints the backend modules that executed any code, with their count.

    .venv/bin/python benchmarks/trace_round.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def _synthetic():
    try:
        import synthetic_run as syn  # today: a test helper
    except ImportError:
        from backend.evolve import synthetic as syn  # before issue 17
    return syn


def main() -> None:
    syn = _synthetic()
    from backend.evolve import run_round

    store = syn.build_run(Path(tempfile.mkdtemp()) / "run.db", steps=6)
    store.set_run(auto_promote=1)
    ctx = syn.context(store, probe=syn.make_probe())
    seen: set[str] = set()

    def prof(frame, event, arg):
        if event == "call":
            f = frame.f_code.co_filename
            if f.startswith(str(ROOT / "backend")):
                seen.add(str(Path(f).relative_to(ROOT)))

    sys.setprofile(prof)
    try:
        run_round(ctx)
    finally:
        sys.setprofile(None)
    for m in sorted(seen):
        print(m)
    print(f"modules run during one round: {len(seen)}")


if __name__ == "__main__":
    main()
