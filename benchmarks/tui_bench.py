"""TUI speed on a million-rollout run: start-up, the rollouts screen's first page, every filter.

    python benchmarks/tui_bench.py                 # builds a 1M-rollout run in a temp dir
    python benchmarks/tui_bench.py --db /tmp/big   # keep (and reuse) the big run there
    python benchmarks/tui_bench.py --rollouts 200000

Each TUI measure runs the real app (run_test, headless) from the key or the
filter change to the page painted, starting from an idle app, as its wall time
and this process's CPU time. Against it, in the same run: the same page query
on a fresh plain sqlite3 connection (the floor: SQL without the UI) and the
obvious query a user would write in plain sqlite3 (LIKE for text). Timings are
medians; none of this is asserted anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import os
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

from backend.store.reader import PAGE, ROLLOUT_COLS, RolloutFilter  # noqa: E402

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
    """A run with `n` rollouts (and ~0.8 diagnoses each), written with executemany in big transactions."""
    from backend.store import Store
    from tui_fixtures import build_run

    if (run_dir / "run.db").exists():
        Store.open(run_dir / "run.db").close()  # a kept run from an older release: migrate it (indexes, FTS)
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


def cold_start() -> list[tuple]:
    def spawn(code: str) -> float:
        return median_ms(lambda: subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT), n=5)

    python = spawn("pass")
    return [
        ("cold start: python -c 'import evotui.app'", spawn("import evotui.app"), None, python, None),
        ("  (for scale: import textual.app)", spawn("import textual.app"), None, python, None),
    ]


FILTERS = {  # name: (the obvious WHERE a user would write in plain sqlite3, the TUI's filter)
    "verdict = wrong": ("verdict = 'wrong'", RolloutFilter(verdict="wrong")),
    "label = truncated": ("id IN (SELECT rollout_id FROM diagnoses WHERE label = 'truncated')",
                          RolloutFilter(label="truncated")),
    "domain = code": ("domain = 'code'", RolloutFilter(domain="code")),
    "reward 0.2..0.3": ("reward BETWEEN 0.2 AND 0.3", RolloutFilter(reward_min=0.2, reward_max=0.3)),
    "label + domain + reward": ("domain = 'swe' AND reward >= 0.9 AND id IN (SELECT rollout_id FROM diagnoses "
                                "WHERE label = 'tests_edited')",
                                RolloutFilter(label="tests_edited", domain="swe", reward_min=0.9)),
    "text 'step by step' (every row)": ("completion LIKE '%step by step%' OR prompt LIKE '%step by step%'",
                                        RolloutFilter(text="step by step")),
    "text 'needle' (1 row in 10^4)": ("completion LIKE '%needle%' OR prompt LIKE '%needle%'",
                                      RolloutFilter(text="needle")),
    "text 'needle' + label + domain": ("domain = 'math' AND (completion LIKE '%needle%' OR prompt LIKE '%needle%') "
                                       "AND id IN (SELECT rollout_id FROM diagnoses WHERE label = 'repetition')",
                                       RolloutFilter(text="needle", label="repetition", domain="math")),
}


def plain_ms(db: Path, sql: str, params=()) -> float:
    """One page read on a fresh plain sqlite3 connection (median of 5)."""
    def read():
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        conn.execute(sql, params).fetchall()
        conn.close()
    return median_ms(read, n=5)


def naive_ms(db: Path, where: str, extra: str = "") -> float:
    return plain_ms(db, f"SELECT * FROM rollouts WHERE {where} ORDER BY id DESC LIMIT {PAGE} {extra}")


def same_sql_ms(db: Path, flt: RolloutFilter) -> float:
    """The page query the TUI runs (backend/store/reader.py), on plain sqlite3: the floor, without the UI."""
    source, where, params = flt.sql()
    key = flt.key_col()
    return plain_ms(db, f"SELECT {ROLLOUT_COLS} FROM {source} WHERE {where} ORDER BY {key} DESC LIMIT {PAGE}",
                    params)


class Clock:
    """Wall and CPU time of this process (the UI is one thread: its CPU time is what an idle machine
    would wait; the wall time also holds whatever else the shared cores were doing)."""

    def __enter__(self):
        self.w0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = (time.perf_counter() - self.w0) * 1000
        self.cpu = (time.process_time() - self.c0) * 1000


async def tui_measures(run_dir: Path, reps: int) -> dict[str, tuple[float, float]]:
    """{measure: (median wall ms, median cpu ms)}: from the action to the page painted on screen."""
    from evotui.app import EvoApp
    from tui_fixtures import FakeProbe

    out: dict[str, tuple[float, float]] = {}
    start = Clock().__enter__()  # stopped at the first frame with data (the app keeps running)
    app = EvoApp(run_dir, watch=False, probe=FakeProbe(), warm_start=True)  # as `evotui open` runs it
    first_frame = FrameWatch(app, start, lambda: app.state.loaded)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(lambda: first_frame.seen)
        out["app start: dashboard painted with data"] = first_frame.seen
        await until(lambda: app.prebuilt)
        start.__exit__()
        out["app start: rollouts screen built in the background"] = (start.wall, start.cpu)
        await pilot.pause(IDLE_S)
        with Clock() as c:
            await app.switch_mode("rollouts")
            screen = app.screen
            await until(lambda: len(screen.rows) >= PAGE)
            await pilot.pause()
        out["rollouts: first page, first visit"] = (c.wall, c.cpu)
        out["rollouts: first page, coming back"] = await median_pair(reps, pilot, lambda: revisit(app, pilot))
        for name, (_, flt) in FILTERS.items():
            out[name] = await median_pair(reps, pilot, lambda flt=flt: set_filter(screen, pilot, flt))
    return out


class FrameWatch:
    """(wall, cpu) ms on `clock` at the first frame the app renders once `cond()` holds. Headless,
    the frame is composed as on a terminal and then not written; the app runs on meanwhile (its
    idle work after the first data, building screens ahead, is not part of this time)."""

    def __init__(self, app, clock: Clock, cond) -> None:
        self.seen: tuple[float, float] | None = None
        display = app._display  # every frame passes here (Textual's private hook, kept as it is)

        def watched(screen, renderable) -> None:
            display(screen, renderable)
            if self.seen is None and renderable is not None and cond():
                clock.__exit__()
                self.seen = (clock.wall, clock.cpu)

        app._display = watched


IDLE_S = 0.3  # an operator does not press keys every millisecond: each measure starts from an idle app


async def median_pair(reps: int, pilot, action) -> tuple[float, float]:
    """Median (wall, cpu) of `action()`, which returns the (wall, cpu) ms of the part it times."""
    walls, cpus = [], []
    for _ in range(reps):
        await pilot.pause(IDLE_S)
        wall, cpu = await action()
        walls.append(wall)
        cpus.append(cpu)
    return statistics.median(walls), statistics.median(cpus)


async def revisit(app, pilot) -> tuple[float, float]:
    """Leave for the dashboard, then time only the way back to the rollouts page."""
    await app.switch_mode("dashboard")
    await pilot.pause(IDLE_S)
    with Clock() as c:
        await app.switch_mode("rollouts")
        await pilot.pause()
    return c.wall, c.cpu


async def set_filter(screen, pilot, flt: RolloutFilter) -> tuple[float, float]:
    """Time one filter change, from the message to the new page painted (from another filter)."""
    from evotui.components.rollout_filters import RolloutFilterBar

    if screen.filter == flt:  # start from another filter, so the page really changes
        screen.post_message(RolloutFilterBar.Changed(RolloutFilter()))
        await until(lambda: screen.filter == RolloutFilter() and screen.rows)
        await pilot.pause(IDLE_S)
    with Clock() as c:
        screen.post_message(RolloutFilterBar.Changed(flt))
        await until(lambda: screen.filter == flt and screen.fetched)
        await pilot.pause()
    return c.wall, c.cpu


async def until(cond, timeout: float = 120.0) -> None:
    deadline = time.perf_counter() + timeout
    while not cond():
        if time.perf_counter() > deadline:
            raise TimeoutError("the app never got there")
        await asyncio.sleep(0.0005)


def deep_page_ms(db: Path) -> tuple[float, float]:
    """(keyset page 10 000 rows deep as the TUI reads it, the same rows by OFFSET)."""
    from backend.store.reader import RunDB, rollout_page

    store = RunDB(db)
    before = rollout_page(store, RolloutFilter(), limit=10_000)[-1]["id"]
    ours = median_ms(lambda: rollout_page(store, RolloutFilter(), before=before))
    store.close()
    return ours, naive_ms(db, "1", "OFFSET 10000")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", help="folder for the big run (kept and reused)")
    p.add_argument("--rollouts", type=int, default=1_000_000)
    p.add_argument("--reps", type=int, default=5, help="repetitions of each TUI measure (median)")
    args = p.parse_args(argv)
    tmp = tempfile.TemporaryDirectory() if not args.db else None
    run_dir = build_big_run(Path(args.db or tmp.name) / "big", args.rollouts)
    db = run_dir / "run.db"
    rows: list[tuple] = cold_start()
    tui = asyncio.run(tui_measures(run_dir, args.reps))
    for name in ("app start: dashboard painted with data", "app start: rollouts screen built in the background"):
        rows.append((name, *tui.pop(name), None, None))
    first = same_sql_ms(db, RolloutFilter())
    for name in ("rollouts: first page, first visit", "rollouts: first page, coming back"):
        rows.append((name, *tui.pop(name), first, naive_ms(db, "1")))
    for name, (where, flt) in FILTERS.items():
        rows.append((f"rollouts: filter {name}", *tui[name], same_sql_ms(db, flt), naive_ms(db, where)))
    deep, offset = deep_page_ms(db)
    rows.append(("rollouts: page 10 000 rows deep (keyset vs OFFSET)", None, None, deep, offset))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nTUI benchmark: {args.rollouts:,} rollouts, page = {PAGE} rows, median ms "
          f"({os.cpu_count()} cores, load average {load})\n")
    print(f"{'measure':<58} {'evotui':>8} {'(cpu)':>7} {'same SQL':>9} {'naive SQL':>10}")
    print("-" * 96)
    for name, wall, cpu, same, naive in rows:
        cells = [f"{v:.1f}" if v is not None else "" for v in (wall, cpu, same, naive)]
        print(f"{name:<58} {cells[0]:>8} {cells[1]:>7} {cells[2]:>9} {cells[3]:>10}")
    print("\nevotui: from the key (or the filter) to the page painted, in the real app (run_test); (cpu): the same,"
          "\nthis process's CPU time. same SQL: the TUI's page query on a fresh plain sqlite3 connection."
          "\nnaive SQL: SELECT * ... WHERE <the obvious condition> ORDER BY id DESC LIMIT 50 (LIKE for text)."
          "\ncold start rows: the baseline is `python -c pass`.")
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
