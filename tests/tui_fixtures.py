"""Frozen fixture runs for the TUI tests, built through the real store and migrations.

`build_run(dir)` writes a realistic run directory: 12 steps of math, code and
multi-turn swe rollouts with diagnoses, two evolution rounds, interventions in
every state (one passed and waiting for approval, with its diff), backtests,
skills, events, harness versions, `harness.py` and `engine.log`. Everything is
seeded and every timestamp is fixed, so screenshots are byte-identical.

    >>> run_dir = build_run(tmp_path / "run")
"""

from __future__ import annotations

import difflib
import os
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

from backend.config import RunConfig, to_dict
from backend.harness.loader import sha
from backend.store import Store, dumps

T0 = datetime(2025, 3, 14, 9, 30, 0, tzinfo=timezone.utc)
DEFAULT_HARNESS = Path(__file__).resolve().parents[1] / "backend" / "harness" / "defaults" / "math.py"
LABELS = {
    "math": ["no_answer_tag", "truncated", "wrong_value", "repetition", "answer_copied_from_prompt"],
    "code": ["syntax_error", "truncated", "tests_failed"],
    "swe": ["tests_edited", "no_submit", "tests_failed"],
}
CODE_OK = 'def add(a, b):\n    """Return the sum."""\n    return a + b\n'
CODE_BAD = "def add(a, b)\n    return a +\n"


def ts(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def edit(code: str, old: str, new: str) -> tuple[str, str]:
    """Apply one textual change to a harness; returns (new code, unified diff)."""
    assert old in code, old
    changed = code.replace(old, new, 1)
    diff = "".join(difflib.unified_diff(code.splitlines(True), changed.splitlines(True),
                                        "a/harness.py", "b/harness.py"))
    return changed, diff


def build_run(run_dir: Path, status: str = "running", pid: int | None = None, steps: int = 12,
              error: str | None = None) -> Path:
    """Write a frozen run into `run_dir` and return it. `pid` defaults to this process (alive)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    store = Store.open(run_dir / "run.db")
    cfg = to_dict(RunConfig(domain="math,code,swe", steps=20, name="demo"))
    store.create_run("demo", cfg, seed=0, steps=20)
    rng = random.Random(0)
    for step in range(1, steps + 1):
        _add_step(store, rng, step)
    v1, v2, v3 = _add_versions(store)
    _add_rounds_and_interventions(store, v1, v2, v3)
    _add_skills(store)
    _add_evals_and_events(store, steps)
    with store.tx():
        store.update("runs", 1, {
            "status": status, "step": steps, "heldout_acc": 0.40625, "val_acc": 0.4375, "test_acc": 0.40625,
            "harness_version": 2,
            "policy_version": steps, "auto_promote": 0, "pid": os.getpid() if pid is None else pid,
            "error": error, "created_at": ts(0), "updated_at": ts(steps * 30)})
    store.close()
    (run_dir / "harness.py").write_text(v2)
    (run_dir / "engine.log").write_text(
        "evotui engine 0.1.0, run demo\nloading smollm2-135m (cpu, fp32)\n"
        + "".join(f"step {s:>3}  reward 0.4{s % 10}  acc 0.3{s % 10}\n" for s in range(1, steps + 1))
        + (f"Traceback (most recent call last):\n  ...\n{error}\n" if error else ""))
    return run_dir


def build_empty_run(run_dir: Path) -> Path:
    """A run the engine has just started: its config and harness v1, no step, eval, round or skill yet."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    store = Store.open(run_dir / "run.db")
    store.create_run("fresh", to_dict(RunConfig(domain="math", steps=20, name="fresh")), seed=0, steps=20)
    code = DEFAULT_HARNESS.read_text()
    with store.tx():
        store.insert("harness_versions", {"id": 1, "parent": None, "created_at": ts(0), "code": code,
                                          "sha": sha(code), "diff": "", "status": "active", "intervention_id": None,
                                          "note": "default math harness"})
        store.update("runs", 1, {"status": "running", "harness_version": 1, "policy_version": 0,
                                 "pid": os.getpid(), "created_at": ts(0), "updated_at": ts(0)})
    store.close()
    (run_dir / "harness.py").write_text(code)
    (run_dir / "engine.log").write_text("evotui engine 0.1.0, run fresh\nloading smollm2-135m (cpu, fp32)\n")
    return run_dir


def _add_step(store: Store, rng: random.Random, step: int) -> None:
    rollouts, diags, turns = [], [], []
    for g in range(4):
        domain = ("math", "math", "code", "swe")[g]
        task_id = f"{domain}-{step:03d}-{g}"
        for i in range(4):
            correct = rng.random() < 0.25 + step * 0.03
            labels = [] if correct else rng.sample(LABELS[domain], k=rng.choice([1, 1, 2]))
            rollouts.append(_rollout(rng, step, domain, task_id, g, i, correct, labels))
            diags.append([{"step": step, "label": lbl, "evidence": _evidence(lbl), "validity": int(
                lbl in ("tests_edited", "answer_copied_from_prompt")), "harness_version": 1 + (step > 5)}
                for lbl in labels])
            turns.append(_turns(step, i) if domain == "swe" else [])
    store.commit_step(_step_row(rng, step), rollouts, diags, turns)


def _rollout(rng, step, domain, task_id, g, i, correct, labels) -> dict:
    if domain == "math":
        a, b = 12 + step, 7 * (g + 1)
        prompt = f"What is {a} + {b}? Give the answer in <answer></answer> tags."
        value = a + b if correct else a + b + rng.choice([-2, 1, 10])
        completion = f"First add the tens, then the units: {a} + {b}.\n<answer>{value}</answer>"
        if "no_answer_tag" in labels:
            completion = f"The sum of {a} and {b} is {value}."
    elif domain == "code":
        prompt = 'def add(a, b):\n    """Return the sum of a and b."""\n'
        completion = CODE_OK if correct else CODE_BAD
    else:
        prompt = "Repository `calc`: tests/test_ops.py::test_div fails. Fix the bug and submit."
        completion = "edit calc/ops.py: return a / b if b else 0.0\nsubmit"
    comps = {"correct": 1.0 if correct else 0.0, "format": 0.0 if "no_answer_tag" in labels else 1.0}
    reward = round(comps["correct"] + 0.1 * comps["format"], 3)
    verdict = ("correct" if correct else "wrong") if domain == "math" else ("passed" if correct else "failed")
    return {
        "step": step, "domain": domain, "task_id": task_id, "group_idx": g, "idx": i, "prompt": prompt,
        "completion": completion, "prompt_tokens": 40 + g, "completion_tokens": 30 + 5 * i,
        "reward": reward, "rewards_json": dumps(comps), "verdict": verdict, "correct": int(correct),
        "verdict_score": float(correct), "verdict_json": dumps({"correct": correct, "status": verdict,
                                                                "detail": {"expected": "ok"}}),
        "finish": "length" if "truncated" in labels else "stop", "status": "ok", "error": None,
        "harness_version": 1 + (step > 5), "policy_version": step - 1, "gen_ms": 120.0 + i,
        "eval_ms": 3.0, "task_json": dumps({"id": task_id, "domain": domain}), "obs_json": "{}",
        "token_ids_json": "[]", "labels": ",".join(sorted(labels)),
    }


def _evidence(label: str) -> str:
    return {
        "no_answer_tag": "no <answer> tag; ends with: ...is 37.", "truncated": "stopped at max_new_tokens (128)",
        "wrong_value": "answered '40', expected '38'", "repetition": "42% of 4-grams repeat",
        "answer_copied_from_prompt": "answer '12' is copied from the prompt",
        "syntax_error": "SyntaxError: expected ':' (line 1)", "tests_failed": "1 of 3 tests failed",
        "tests_edited": "edited tests/test_ops.py", "no_submit": "episode ended without submit",
    }[label]


def _turns(step: int, i: int) -> list[dict]:
    return [
        {"turn": 0, "role": "assistant", "tool": "read", "args_json": dumps({"path": "calc/ops.py"}),
         "content": "def div(a, b):\n    return a / b\n", "tokens": 24, "ms": 80.0},
        {"turn": 1, "role": "assistant", "tool": "run_tests", "args_json": "{}",
         "content": "FAILED tests/test_ops.py::test_div - ZeroDivisionError", "tokens": 18, "ms": 900.0},
        {"turn": 2, "role": "assistant", "tool": "submit", "args_json": "{}", "content": "submitted",
         "tokens": 4, "ms": 5.0},
    ]


def _step_row(rng, step: int) -> dict:
    gen, score, diag, train, st = 4200 + 40 * step, 180.0, 35.0, 2600 - 30 * step, 22.0
    return {
        "step": step, "created_at": ts(step * 30), "harness_version": 1 + (step > 5),
        "policy_version": step - 1, "n_rollouts": 16, "n_groups": 4,
        "reward_mean": round(0.3 + 0.03 * step + rng.uniform(-0.03, 0.03), 3), "reward_std": 0.4,
        "verdict_acc": round(0.25 + 0.03 * step, 3), "agreement": round(0.6 + 0.025 * step, 3),
        "dead_group_frac": round(max(0.0, 0.5 - 0.035 * step), 3), "frac_reward_zero_std": 0.25,
        "kept_groups": 3, "mean_completion_tokens": 60.0 - step, "truncated_frac": 0.1, "entropy": 1.2,
        "loss": 0.05, "kl": 0.001, "clip_frac": 0.02, "grad_norm": 0.8, "tokens": 1500,
        "tokens_per_s": round(310.0 + 6 * step, 1), "gen_ms": gen, "score_ms": score, "diagnose_ms": diag,
        "train_ms": train, "store_ms": st, "total_ms": gen + score + diag + train + st, "metrics_json": "{}",
    }


def _add_versions(store: Store) -> tuple[str, str, str]:
    v1 = DEFAULT_HARNESS.read_text()
    v2, d2 = edit(v1, '"drop_truncated": False', '"drop_truncated": True')
    v3, d3 = edit(v2, 'REWARD_WEIGHTS = {"correct": 1.0, "format": 0.1}',
                  'REWARD_WEIGHTS = {"correct": 1.0, "format": 0.3}')
    with store.tx():
        for vid, code, parent, diff, status, iid, note in (
            (1, v1, None, "", "superseded", None, "default math harness"),
            (2, v2, 1, d2, "active", 1, "drop truncated rollouts"),
            (3, v3, 2, d3, "candidate", 3, "stronger format reward"),
        ):
            store.insert("harness_versions", {"id": vid, "parent": parent, "created_at": ts(vid * 100),
                                              "code": code, "sha": sha(code), "diff": diff, "status": status,
                                              "intervention_id": iid, "note": note})
    return v1, v2, v3


def _add_rounds_and_interventions(store: Store, v1: str, v2: str, v3: str) -> None:
    table1 = [{"label": "dead_groups", "count": 8, "share": 0.4, "trend": -0.1, "examples": [1, 2, 3, 4]},
              {"label": "truncated", "count": 21, "share": 0.26, "trend": 0.08, "examples": [3, 7, 12]},
              {"label": "no_answer_tag", "count": 14, "share": 0.18, "trend": -0.02, "examples": [5, 9]},
              {"label": "wrong_value", "count": 11, "share": 0.14, "trend": 0.0, "examples": [2]}]
    table2 = [{"label": "no_answer_tag", "count": 19, "share": 0.24, "trend": 0.06, "examples": [101, 117]},
              {"label": "syntax_error", "count": 9, "share": 0.11, "trend": -0.04, "examples": [99]},
              {"label": "tests_edited", "count": 3, "share": 0.04, "trend": 0.04, "examples": [112], "validity": 1},
              {"label": "truncated", "count": 2, "share": 0.03, "trend": -0.23, "examples": [130]}]
    _, d3 = edit(v2, 'REWARD_WEIGHTS = {"correct": 1.0, "format": 0.1}',
                 'REWARD_WEIGHTS = {"correct": 1.0, "format": 0.3}')
    _, d1 = edit(v1, '"drop_truncated": False', '"drop_truncated": True')
    _, d4 = edit(v2, '"rule": "group_std"', '"rule": "rank"')
    _, d2 = edit(v1, '"temperature": 1.0', '"temperature": 0.7')
    with store.tx():
        for rid, step, table, summary in ((1, 5, table1, "truncation dominates; 3 candidates"),
                                          (2, 10, table2, "missing answer tags rising; 3 candidates")):
            store.insert("rounds", {"id": rid, "step": step, "created_at": ts(step * 30 + 5),
                                    "harness_version": rid, "failure_table_json": dumps(table),
                                    "metrics_json": dumps({"dead_group_frac": 0.3}), "summary": summary})
        for iv in _interventions(d1, d2, d3, d4):
            store.insert("interventions", iv)
        for bt in _backtests():
            store.insert("backtests", bt)


def _history(*pairs) -> str:
    """Transitions as the engine writes them: {ts, from, to, reason}."""
    out, prev = [], None
    for status, t, note in pairs:
        out.append({"ts": ts(t), "from": prev, "to": status, "reason": note})
        prev = status
    return dumps(out)


def _interventions(d1, d2, d3, d4) -> list[dict]:
    base = {"proposer": "offline", "code": None, "params_json": "{}", "promoted_step": None, "reason": None}
    return [
        dict(base, id=1, round_id=1, created_at=ts(160), updated_at=ts(170), kind="filter", target="truncated",
             title="Drop truncated rollouts", hypothesis="Truncated rollouts get format credit for partial work; "
             "dropping them removes a misleading gradient.", expected="agreement +0.05, dead groups -0.1",
             diff=d1, parent_version=1, child_version=2, skills_json=dumps(["drop-truncated"]), status="promoted",
             score=0.07, promoted_step=6, history_json=_history(("proposed", 160, ""), ("backtesting", 161, ""),
                                                                ("passed", 165, "agreement +0.07"),
                                                                ("approved", 168, "operator"),
                                                                ("promoted", 170, "step 6"))),
        dict(base, id=2, round_id=1, created_at=ts(160), updated_at=ts(169), kind="sampling", target="truncated",
             title="Lower temperature to 0.7", hypothesis="Less sampling noise gives shorter answers.",
             expected="truncated share -0.1", diff=d2, parent_version=1, child_version=None, skills_json="[]",
             status="vetoed", score=0.02, reason="probe too small to trust",
             history_json=_history(("proposed", 160, ""), ("passed", 166, "probe"),
                                   ("vetoed", 169, "probe too small to trust"))),
        dict(base, id=3, round_id=2, created_at=ts(310), updated_at=ts(320), kind="reward", target="no_answer_tag",
             title="Raise the format reward to 0.3", hypothesis="Rollouts without an <answer> tag score almost "
             "the same as tagged wrong answers, so the policy does not learn the format.",
             expected="no_answer_tag share -0.1, agreement +0.04", diff=d3, parent_version=2, child_version=3,
             skills_json=dumps(["format-reward-bump", "answer-tag-first"]), status="passed", score=0.05,
             history_json=_history(("proposed", 310, ""), ("backtesting", 312, ""), ("passed", 320, "replay"))),
        dict(base, id=4, round_id=2, created_at=ts(310), updated_at=ts(318), kind="advantage",
             target="syntax_error", title="Rank-based advantages", hypothesis="Rank advantages are robust to the "
             "reward outliers from syntax errors.", expected="dead groups -0.05", diff=d4, parent_version=2,
             child_version=None, skills_json="[]", status="failed", score=-0.01,
             reason="regressed the truncated fix", history_json=_history(("proposed", 310, ""),
                                                                         ("failed", 318, "regression"))),
        dict(base, id=5, round_id=2, created_at=ts(311), updated_at=ts(311), kind="diagnostic", target="unlabelled",
             title="New diagnostic: answer_not_number", hypothesis="12 unexplained failures answer with words.",
             expected="unlabelled share -0.05", diff="", parent_version=2, child_version=None,
             skills_json="[]", status="backtesting", score=None,
             history_json=_history(("proposed", 311, ""), ("backtesting", 311, ""))),
        dict(base, id=6, round_id=2, created_at=ts(312), updated_at=ts(322), kind="prompt", target="no_answer_tag",
             title="Ask for the answer tag with an example", hypothesis="An example makes the tag habitual.",
             expected="no_answer_tag share -0.1", diff=d2, parent_version=2, child_version=None, skills_json="[]",
             status="inconclusive", score=None,
             reason="accuracy +0.031 [-0.019, +0.081], p 0.27, n 64: lower bound does not clear min_gain 0.02",
             history_json=_history(("proposed", 312, ""), ("backtesting", 313, ""),
                                   ("inconclusive", 322, "probe: interval misses min_gain"))),
    ]


def _backtests() -> list[dict]:
    def m(**pairs):  # the engine's flat x_old / x_new metrics
        flat = {"n_rollouts": 80}
        for name, v in pairs.items():
            flat[f"{name}_old"], flat[f"{name}_new"] = v["before"], v["after"]
        return dumps(flat)

    return [
        {"id": 1, "intervention_id": 1, "created_at": ts(165), "mode": "replay", "n_rollouts": 80,
         "metrics_json": m(agreement={"before": 0.66, "after": 0.73}, dead_group_frac={"before": 0.4, "after": 0.3},
                           invalid_low={"before": 1.0, "after": 1.0}), "verdict": "passed",
         "reason": "agreement +0.07", "ms": 412.0, **_decision("agreement", 0.07, 0.031, 0.109, 0.0007, 80)},
        {"id": 2, "intervention_id": 2, "created_at": ts(166), "mode": "probe", "n_rollouts": 8,
         "metrics_json": m(truncated_frac={"before": 0.25, "after": 0.12}), "verdict": "passed",
         "reason": "probe", "ms": 9100.0},
        {"id": 3, "intervention_id": 3, "created_at": ts(320), "mode": "replay", "n_rollouts": 80,
         "metrics_json": m(agreement={"before": 0.78, "after": 0.83},
                           dead_group_frac={"before": 0.22, "after": 0.16},
                           invalid_low={"before": 1.0, "after": 1.0},
                           regressions={"before": 0, "after": 0}), "verdict": "passed",
         "reason": "agreement +0.05, no regressions", "ms": 388.0,
         **_decision("agreement", 0.05, 0.022, 0.078, 0.0041, 80)},
        {"id": 4, "intervention_id": 4, "created_at": ts(318), "mode": "replay", "n_rollouts": 80,
         "metrics_json": m(agreement={"before": 0.78, "after": 0.77}, regressions={"before": 0, "after": 1}),
         "verdict": "failed", "reason": "regressed the truncated fix", "ms": 401.0},
        {"id": 5, "intervention_id": 6, "created_at": ts(322), "mode": "probe", "n_rollouts": 256,
         "metrics_json": m(accuracy={"before": 0.41, "after": 0.44}), "verdict": "inconclusive",
         "reason": "accuracy +0.031 [-0.019, +0.081], p 0.27, n 64: lower bound does not clear min_gain 0.02",
         "ms": 5200.0, **_decision("accuracy", 0.031, -0.019, 0.081, 0.27, 64)},
    ]


def _decision(metric, effect, lo, hi, p, n, underpowered=0) -> dict:
    """A backtest's statistics columns (schema m003_gate)."""
    return {"metric": metric, "effect": effect, "ci_low": lo, "ci_high": hi, "p_value": p, "n": n,
            "underpowered": underpowered}


def _add_skills(store: Store) -> None:
    cards = [
        ("drop-truncated", "math", {"label": "truncated", "min_share": 0.2},
         {"kind": "filter", "set": {"FILTERS.drop_truncated": True}},
         {"runs": 3, "heldout_gain": 0.06, "interventions": [1]}, 3, 2, "run:demo"),
        ("format-reward-bump", "math", {"label": "no_answer_tag", "min_share": 0.15},
         {"kind": "reward", "set": {"REWARD_WEIGHTS.format": 0.3}},
         {"runs": 2, "heldout_gain": 0.03}, 2, 1, "import:shared.json"),
        ("answer-tag-first", "math", {"label": "no_answer_tag"},
         {"kind": "prompt", "append": "Start your final line with <answer>."},
         {"runs": 1, "heldout_gain": 0.02}, 1, 1, "run:demo"),
        ("rank-advantage-code", "code", {"label": "syntax_error", "domain": "code"},
         {"kind": "advantage", "set": {"ADVANTAGE.rule": "rank"}}, {"runs": 1, "heldout_gain": 0.01}, 0, 0,
         "builtin"),
    ]
    with store.tx():
        for i, (name, dom, trig, change, ev, uses, helped, src) in enumerate(cards, 1):
            store.insert("skills", {"id": i, "name": name, "domain": dom, "created_at": ts(i * 50),
                                    "updated_at": ts(i * 50), "trigger_json": dumps(trig),
                                    "change_json": dumps(change), "evidence_json": dumps(ev), "uses": uses,
                                    "helped": helped, "source": src})


def _add_evals_and_events(store: Store, steps: int) -> None:
    with store.tx():
        for i, step in enumerate(s for s in (0, 5, 10) if s <= steps):
            for k, (split, accs) in enumerate((("validation", (0.28, 0.375, 0.4375)),
                                               ("test", (0.25, 0.34375, 0.40625)))):
                store.insert("evals", {"id": 2 * i + k + 1, "step": step, "created_at": ts(step * 30 + 10),
                                       "policy_version": step, "harness_version": 1 + (step > 5), "n": 32,
                                       "split": split, "accuracy": accs[i], "agreement": 0.7 + 0.05 * i,
                                       "results_json": "[]", "ms": 5000.0})
        events = [(0, "info", "run", "run demo started: math,code,swe, 20 steps"),
                  (0, "info", "eval", "held-out accuracy 0.280 (32 tasks)"),
                  (5, "info", "round", "round 1: truncation dominates; 3 candidates"),
                  (5, "warning", "backtest", "intervention 2 judged by probe only (8 rollouts)"),
                  (6, "info", "promote", "intervention 1 promoted: harness v2"),
                  (9, "error", "sandbox", "code rollout 141 timed out after 5.0s"),
                  (10, "info", "round", "round 2: missing answer tags rising; 3 candidates"),
                  (10, "info", "eval", "held-out accuracy 0.438 (32 tasks)")]
        for i, (step, level, kind, msg) in enumerate(events, 1):
            store.insert("events", {"id": i, "ts": ts(step * 30 + i), "step": step, "level": level,
                                    "kind": kind, "message": msg, "data_json": None})


def ack_pending(run_dir: Path, status: str = "applied", result: str = "ok") -> list[dict]:
    """Play the engine: acknowledge every pending command (acked_at fixed). Returns them."""
    store = Store.open(Path(run_dir) / "run.db")
    try:
        pending = store.pending_commands()
        with store.tx():
            for c in pending:
                store.update("commands", c["id"], {"status": status, "result": result, "acked_at": ts(999)})
        return pending
    finally:
        store.close()


# ---------------------------------------------------------------- driving the app in tests


class FakeProbe:
    """Engine liveness and memory, frozen: `alive` decides whether the pid counts as running."""

    def __init__(self, alive: bool = True, memory: str = "RSS 1.25 GiB") -> None:
        self._alive = alive
        self._memory = memory

    def alive(self, pid) -> bool:
        return self._alive and bool(pid)

    def memory(self, pid) -> str:
        return self._memory


class FakeSpawn:
    """Records resume requests instead of starting an engine."""

    pid = 4242

    def __init__(self) -> None:
        self.calls: list[Path] = []

    def __call__(self, run_dir: Path):
        self.calls.append(Path(run_dir))
        return self


def make_app(run_dir: Path, alive: bool = True, mode: str | None = None, **kwargs):
    """The real app over a fixture run, without watchfiles or timers (tests drive the polls).
    `mode`: the screen it opens on (as if its number key had been pressed; skips the dashboard)."""
    from evotui.app import EvoApp

    kwargs.setdefault("spawn", FakeSpawn())
    kwargs.setdefault("watch", False)
    if mode is not None:  # the same class, opening on another screen (CSS_PATH resolves beside evotui/app.py)
        EvoApp = type("EvoApp", (EvoApp,), {"DEFAULT_MODE": mode, "__module__": EvoApp.__module__})
    return EvoApp(Path(run_dir), probe=FakeProbe(alive), **kwargs)


async def settle(pilot, rounds: int = 30) -> None:
    """Wait until no worker runs and their messages are handled (no sleeps)."""
    from textual.worker import WorkerCancelled

    app = pilot.app
    quiet = 0
    for _ in range(rounds):
        busy = [w for w in app.workers if w.group != "watch"]  # the watchfiles loop never ends
        if busy:  # (an empty list would mean "all workers")
            try:
                await app.workers.wait_for_complete(busy)
            except WorkerCancelled:
                pass  # a newer request replaced it (exclusive workers): look again
        await pilot.pause()
        quiet = quiet + 1 if not any(w.is_running and w.group != "watch" for w in app.workers) else 0
        if quiet >= 3:
            return


async def press(pilot, *keys: str) -> None:
    """Press keys one by one, settling after each (a key often starts a worker)."""
    for key in keys:
        await pilot.press(key)
        await settle(pilot)


async def poll(pilot) -> None:
    """What watchfiles would trigger: read the database now."""
    pilot.app.request_poll()
    await settle(pilot)
