"""The harness worker's spare children (backend/harness/worker_main.py): forked ahead of a request
once requests in a row apply the same code, each serves one request as a child forked for it would.

The worker runs here as a plain subprocess speaking its frame protocol (the client runs the same
file in the sandbox, tests/test_harness.py and the hostile-harness tests go through it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import backend.harness.worker_main as wm
from backend.harness.loader import load_default
from backend.rollout import as_rollout

ROOT = Path(__file__).resolve().parents[1]
BASE = load_default("math")
COUNTING = "import functools\n" + BASE.code.replace("def reward_format(r):", '''@functools.cache
def _calls():
    return [0]


def reward_format(r):
    calls = _calls()
    calls[0] += 1
    return float(calls[0])


def _reward_format_before(r):''')
"""The default harness with `reward_format` counting its calls in state a process keeps: the k-th
rollout a child scores gets k."""


def views(n: int) -> list[dict]:
    from benchmarks.score_overlap import batch

    return [as_rollout(s, 128).view() for s in batch(1, n, seed=5)]


class Worker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "backend/harness/worker_main.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})

    def ask(self, req: dict) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        wm.write_frame(self.proc.stdin, req)
        out = wm.read_frame(self.proc.stdout)
        time.sleep(0.2)  # as in a step, the next request comes later: the worker readies its spares
        return out

    def apply(self, code: str, rows: list[dict], limit_s: float = 10.0) -> dict:
        return self.ask({"op": "apply", "code": code, "weights": {"format": 1.0}, "rollouts": rows,
                         "limit_s": limit_s})

    def children(self) -> list[int]:
        kids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid and fields[0] != "Z":
                kids.append(int(stat.parent.name))
        return kids

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=30)


def test_spares_answer_as_children_forked_for_the_request_and_keep_nothing_between_requests():
    w = Worker()
    try:
        rows = views(3)
        first = w.apply(COUNTING, rows)
        assert w.children() == []  # one request of this code: no spare yet
        answers = [w.apply(COUNTING, rows)]
        spares = w.children()
        assert len(spares) == 1  # the same code twice in a row: a spare waits for the next request
        answers += [w.apply(COUNTING, rows) for _ in range(3)]
        assert spares[0] not in w.children()  # it served one request and is gone; another waits
        assert len(w.children()) == 1
        counts = [[r[0]["format"] for r in a["results"]] for a in [first, *answers]]
        assert counts == [[1.0, 2.0, 3.0]] * 5  # every request starts from a fresh process
        assert all(a == first for a in answers)
        # a batch split over two children (one a core): as many spares after it, the same rows scored
        big = views(70)
        split = [w.apply(BASE.code, big) for _ in range(3)]
        assert len(w.children()) == min(2, os.cpu_count() or 1)
        assert split[0] == split[1] == split[2] and len(split[0]["results"]) == 70
    finally:
        assert w.close() == 0
    assert not [pid for pid in spares if Path(f"/proc/{pid}").exists()]


def test_other_code_drops_the_spares_and_a_failing_load_fails_alike():
    broken = BASE.code + "\n\ndef _boom(f):\n    return f\n\n\n@_boom\ndef diagnose_x(r):\n    return None\n"
    w = Worker()
    try:
        w.apply(BASE.code, views(2))
        w.apply(BASE.code, views(2))
        (spare,) = w.children()
        answers = [w.apply(broken, views(2)) for _ in range(4)]
        assert spare not in w.children()  # another code: the first code's spare was dropped
        assert answers[0]["ok"] is False and "decorator '_boom' is not allowed" in answers[0]["error"]
        assert all(a == answers[0] for a in answers)  # the last two came from spares
        assert len(w.children()) == 1
    finally:
        assert w.close() == 0
    assert w.children() == []


def test_a_spare_whose_load_runs_over_answers_with_the_requests_own_limit(monkeypatch):
    """The spare loads under the last request's limit; a load that ran over it is loaded again under
    the request's own limit, so the request fails as a child forked for it would, naming that limit."""
    from backend.harness import namespace as hns

    def spin(code):
        n = 0
        while n >= 0:
            n += 1

    monkeypatch.setattr(hns, "load", spin)  # the forked spare inherits it
    spare = wm.Spare(BASE.code, 0.2, [])
    started = spare.give({"op": "apply", "code": BASE.code, "weights": {"format": 1.0},
                          "rollouts": views(1), "limit_s": 0.5})
    assert started is not None
    t = time.monotonic()
    answer = wm.collect(*started, 0.5, time.monotonic() + 20)
    wm.reap_exited()
    assert answer == {"ok": False, "error": "harness ran over its 0.5s CPU limit"}
    assert time.monotonic() - t < 15
    json.dumps(answer)
