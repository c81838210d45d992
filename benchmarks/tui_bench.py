"""TUI speed: cold start, first screen, and rollout pages/filters on a million-rollout run.

    python benchmarks/tui_bench.py                 # builds a 1M-rollout run in a temp dir
    python benchmarks/tui_bench.py --db /tmp/big   # keep (and reuse) the big run there
    python benchmarks/tui_bench.py --rollouts 200000

Each rollout measure is the time from setting a filter in the real app
(run_test, headless) to the page being in the table, against reading the same
rows with plain sqlite3 on a fresh connection (the floor: SQL, no UI). Timings
are medians; none of this is asserted anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from backend.store.views import PAGE, RolloutFilter  # noqa: E402

LABELS = ["no_answer_tag", "truncated", "wrong_value", "repetition", "syntax_error", "tests_failed",
          "tests_edited", "answer_copied_from_prompt"]
GROUP = 16


def median_ms(fn, n: int = 7) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


# ---------------------------------------------------------------- the big run


def build_big_run(run_dir: Path, n: int) -> Path:
    """A run with `n` rollouts (and ~0.6 diagnoses each), written with executemany in big transactions."""
    from backend.store import Store
    from tui_fixtures import build_run

    if (run_dir / "run.db").exists():
        return run_dir
    build_run(run_dir, steps=1)  # the real schema and the small tables, then the bulk
    conn = sqlite3.connect(run_dir / "run.db")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = OFF")
    rng = random.Random(0)
    start = conn.execute("SELECT max(id) FROM rollouts").fetchone()[0] + 1
    cols = ("id, step, domain, task_id, group_idx, idx, prompt, completion, prompt_tokens, completion_tokens, "
            "reward, rewards_json, verdict, correct, finish, status, harness_version, policy_version, labels")
    t0 = time.perf_counter()
    for lo in range(start, start + n, 100_000):
        rollouts, diags = [], []
        for rid in range(lo, min(start + n, lo + 100_000)):
            step = 2 + (rid - start) // (GROUP * 4)
            domain = ("math", "math", "code", "swe")[(rid // GROUP) % 4]
            correct = rng.random() < 0.4
            labels = [] if correct else rng.sample(LABELS, k=rng.choice((1, 1, 2)))
            needle = " needle" if rng.random() < 1e-4 else ""
            rollouts.append((rid, step, domain, f"{domain}-{step}-{rid // GROUP % 4}", rid // GROUP % 4,
                             rid % GROUP, f"What is {rid % 97} + {rid % 89}? Answer in <answer> tags.",
                             f"Let me add the numbers step by step{needle}. <answer>{rid % 186}</answer>",
                             40, 30 + rid % 50, round(rng.random(), 3), '{"correct":0.0,"format":1.0}',
                             "correct" if correct else "wrong", int(correct), "stop", "ok", 1 + step // 500,
                             step, ",".join(sorted(labels))))
            diags += [(rid, step, lbl, "evidence", 0, 1) for lbl in labels]
        with conn:
            conn.executemany(f"INSERT INTO rollouts ({cols}) VALUES ({','.join('?' * 19)})", rollouts)
            conn.executemany("INSERT INTO diagnoses (rollout_id, step, label, evidence, validity, harness_version) "
                             "VALUES (?, ?, ?, ?, ?, ?)", diags)
    last = conn.execute("SELECT max(step) FROM rollouts").fetchone()[0]
    with conn:
        conn.executemany("INSERT INTO steps (step, n_rollouts, reward_mean, agreement, dead_group_frac, "
                         "tokens_per_s, gen_ms, train_ms, total_ms) VALUES (?, 64, 0.5, 0.8, 0.2, 300, 4, 2, 6)",
                         [(s,) for s in range(2, last + 1)])
        conn.execute("UPDATE runs SET step = ? WHERE id = 1", (last,))
    conn.close()
    Store.open(run_dir / "run.db").close()  # applies any pending migration (indexes) like the engine would
    print(f"built {n:,} rollouts in {time.perf_counter() - t0:.1f} s: {run_dir / 'run.db'}", file=sys.stderr)
    return run_dir


# ---------------------------------------------------------------- measures


def cold_start() -> list[tuple[str, float, float | None]]:
    def spawn(code: str) -> float:
        return median_ms(lambda: subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT), n=5)

    python = spawn("pass")
    return [
        ("cold start: python -c 'import evotui.app'", spawn("import evotui.app"), python),
        ("  (for scale: import textual.app)", spawn("import textual.app"), python),
    ]


BASELINE_SQL = {
    "verdict = wrong": ("verdict = 'wrong'", RolloutFilter(verdict="wrong")),
    "label = truncated": ("id IN (SELECT rollout_id FROM diagnoses WHERE label = 'truncated')",
                          RolloutFilter(label="truncated")),
    "domain = code": ("domain = 'code'", RolloutFilter(domain="code")),
    "reward 0.2..0.3": ("reward BETWEEN 0.2 AND 0.3", RolloutFilter(reward_min=0.2, reward_max=0.3)),
    "label + domain + reward": ("domain = 'swe' AND reward >= 0.9 AND id IN (SELECT rollout_id FROM diagnoses "
                                "WHERE label = 'tests_edited')",
                                RolloutFilter(label="tests_edited", domain="swe", reward_min=0.9)),
    "text 'step by step' (common)": ("completion LIKE '%step by step%'", RolloutFilter(text="step by step")),
    "text 'needle' (rare: 1 in 10^4)": ("completion LIKE '%needle%' OR prompt LIKE '%needle%'",
                                        RolloutFilter(text="needle")),
}


def baseline_ms(db: Path, where: str, extra: str = "") -> float:
    def read():
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        conn.execute(f"SELECT * FROM rollouts WHERE {where} ORDER BY id DESC LIMIT {PAGE} {extra}").fetchall()
        conn.close()
    return median_ms(read, n=5)


async def tui_measures(run_dir: Path) -> dict[str, float]:
    from evotui.app import EvoApp
    from tui_fixtures import FakeProbe

    out: dict[str, float] = {}
    t0 = time.perf_counter()
    app = EvoApp(run_dir, watch=False, probe=FakeProbe())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(lambda: app.state.loaded and app.screen.is_mounted)
        out["first screen (dashboard, data in)"] = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        await app.switch_mode("rollouts")
        screen = app.screen
        await until(lambda: len(screen.rows) >= PAGE)
        out["rollouts screen, first page"] = (time.perf_counter() - t0) * 1000
        for name, (_, flt) in BASELINE_SQL.items():
            out[name] = await time_filter(screen, flt)
        out["next page (keyset, 10 000 rows deep)"] = await time_deep_page(screen)
        await pilot.pause()
    return out


async def until(cond, timeout: float = 120.0) -> None:
    deadline = time.perf_counter() + timeout
    while not cond():
        if time.perf_counter() > deadline:
            raise TimeoutError("the app never got there")
        await asyncio.sleep(0.0005)


async def time_filter(screen, flt: RolloutFilter, n: int = 5) -> float:
    from evotui.components.rollout_filters import RolloutFilterBar

    times = []
    for _ in range(n):
        screen.filter, screen.rows = RolloutFilter(text="-reset-"), []
        t0 = time.perf_counter()
        screen.post_message(RolloutFilterBar.Changed(flt))
        await until(lambda: screen.filter == flt and screen.rows)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


async def time_deep_page(screen) -> float:
    from backend.store.views import rollout_page

    reader = screen.app.reader("bench")
    before = reader.call(rollout_page, RolloutFilter(), limit=10_000)[-1]["id"]
    return median_ms(lambda: reader.call(rollout_page, RolloutFilter(), before=before))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", help="folder for the big run (kept and reused)")
    p.add_argument("--rollouts", type=int, default=1_000_000)
    args = p.parse_args(argv)
    tmp = tempfile.TemporaryDirectory() if not args.db else None
    run_dir = build_big_run(Path(args.db or tmp.name) / "big", args.rollouts)
    db = run_dir / "run.db"
    rows: list[tuple[str, float, float | None]] = cold_start()
    tui = asyncio.run(tui_measures(run_dir))
    rows.append(("first screen in run_test (dashboard, data in)", tui.pop("first screen (dashboard, data in)"), None))
    rows.append(("rollouts: first page (newest 50)", tui.pop("rollouts screen, first page"), baseline_ms(db, "1")))
    for name, (where, _) in BASELINE_SQL.items():
        rows.append((f"rollouts: filter {name}", tui[name], baseline_ms(db, where)))
    rows.append(("rollouts: page 10 000 rows deep (keyset vs OFFSET)", tui["next page (keyset, 10 000 rows deep)"],
                 baseline_ms(db, "1", "OFFSET 10000")))
    print(f"\nTUI benchmark: {args.rollouts:,} rollouts, page = {PAGE} rows, median ms\n")
    print(f"{'measure':<58} {'evotui':>10} {'baseline':>10}")
    print("-" * 80)
    for name, ours, base in rows:
        print(f"{name:<58} {ours:>10.1f} {'' if base is None else f'{base:10.1f}':>10}")
    print("\nbaseline: cold start = `python -c pass`; rollouts = the same rows read with plain sqlite3")
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
