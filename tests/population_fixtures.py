"""Frozen populations and best-of-n folders for the population report, compare rows and TUI tests.

Built through the real stores and migrations: `POP/population.sqlite` with the
population store's API (`backend/population/store.py`), and each member a run
directory written by the run store, with steps, a harness version and held-out
evaluations whose per-problem results are set here (so paired differences are
known exactly).

    >>> pop = build_population(tmp_path / "pop")            # 3 members, explore, supervised
    >>> build_best_of_n(tmp_path / "cmp" / "best-of-n-s0", [0.3, 0.6, 0.5])
    >>> build_population_demo(tmp_path / "pop")  # mid-run, a move pending: snapshots, README shot
"""

from __future__ import annotations

import json
from pathlib import Path

from backend.config import RunConfig, to_dict
from backend.population.members import member_seed
from backend.population.store import Evidence, Member, MoveChange, Outcome, Planned, Population, PopulationStore, Score
from backend.store import Store

from tui_fixtures import DEFAULT_HARNESS, ts

N_VAL = 20
N_TEST = 40


def results(right: int, n: int) -> str:
    """Per-problem results: the first `right` of `n` problems correct."""
    return json.dumps([{"task_id": f"t{k}", "correct": k < right} for k in range(n)])


def build_member(run_dir: Path, name: str, seed: int, val: list[tuple[int, int]], test_right: int,
                 steps: int = 4, steps_total: int = 4, status: str = "finished", harness_version: int = 1) -> Path:
    """A finished member run: `steps` training steps, validation (step, right of N_VAL) at each of
    `val`, and a test evaluation at the last step with `test_right` of N_TEST correct."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    s = Store.open(run_dir / "run.db")
    cfg = to_dict(RunConfig(domain="math", steps=steps_total, name=name, seed=seed))
    s.create_run(name, cfg, seed=seed, steps=steps_total)
    code = DEFAULT_HARNESS.read_text()
    with s.tx():
        for v in range(1, harness_version + 1):
            s.insert("harness_versions", {"id": v, "parent": v - 1 or None, "created_at": ts(v), "code": code,
                                          "sha": f"{v}", "diff": "", "intervention_id": None, "note": "",
                                          "status": "active" if v == harness_version else "superseded"})
        for step in range(1, steps + 1):
            s.insert("steps", {"step": step, "created_at": ts(step * 30), "harness_version": 1, "policy_version": step,
                               "n_rollouts": 8, "n_groups": 2, "reward_mean": 0.1, "dead_group_frac": 0.5,
                               "agreement": 0.9, "total_ms": 1000.0, "train_ms": 500.0, "metrics_json": "{}"})
        for step, right in val:
            s.insert("evals", {"step": step, "created_at": ts(step * 30 + 5), "policy_version": step,
                               "harness_version": 1, "n": N_VAL, "split": "validation", "accuracy": right / N_VAL,
                               "agreement": 1.0, "results_json": results(right, N_VAL), "ms": 10.0})
        s.insert("evals", {"step": steps, "created_at": ts(steps * 30 + 6), "policy_version": steps,
                           "harness_version": 1, "n": N_TEST, "split": "test", "accuracy": test_right / N_TEST,
                           "agreement": 1.0, "results_json": results(test_right, N_TEST), "ms": 10.0})
        s.update("runs", 1, {"status": status, "step": steps, "harness_version": harness_version,
                             "policy_version": steps, "pid": None, "created_at": ts(0), "updated_at": ts(steps * 30)})
    s.close()
    return run_dir


def build_population(pop_dir: Path, *, seed: int = 0, mode: str = "explore", auto: bool = False,
                     status: str = "running", tests: tuple[int, ...] = (10, 30, 20)) -> Path:
    """Three members compared at steps 2 and 4 (m1 best at both). At step 2 m0 was clearly behind:
    it copied m1 (applied) and took a move (pending in a supervised population, else applied);
    at step 4 the copy's outcome is recorded (won). Members' final test: `tests` of N_TEST."""
    pop_dir = Path(pop_dir)
    pop_dir.mkdir(parents=True, exist_ok=True)
    vals = {0: [(2, 4), (4, 12)], 1: [(2, 14), (4, 15)], 2: [(2, 10), (4, 11)]}
    ps = PopulationStore.open(pop_dir, create=True)
    members = [Member(i, f"m{i}", f"m{i}", member_seed(seed, i)) for i in range(3)]
    ps.create(Population(size=3, every=2, mode=mode, steps_total=4, seed=seed, auto_promote=auto, step=4,
                         status=status, config_json=json.dumps(to_dict(RunConfig(steps=4, name="population")))),
              members)
    for m in members:
        build_member(pop_dir / m.run_dir, f"population-m{m.idx}", m.seed, vals[m.idx], tests[m.idx],
                     harness_version=2 if m.idx == 0 else 1)
    for step in (2, 4):
        best = {i: right for i, v in vals.items() for st, right in v if st == step}
        top = max(best.values())
        ps.record_scores([Score(step=step, member=i, n=N_VAL, correct=r, acc=r / N_VAL, best=r == top,
                                diff=(r - top) / N_VAL, low=(r - top) / N_VAL - 0.15, high=(r - top) / N_VAL + 0.15,
                                behind=(r - top) / N_VAL + 0.15 < 0) for i, r in best.items()])
    ev = Evidence(diff=-0.5, low=-0.7, high=-0.3, n=N_VAL, compared=(0, 1, 2))
    copy_id, move_id = ps.plan_events([Planned(2, "copy", 0, 1, ev, 0.9), Planned(2, "move", 0, 1, ev, 0.9)])
    ps.set_event(copy_id, "applied", policy_version=2, harness_version=1)
    if mode == "explore":
        ps.set_move(move_id, MoveChange(harness_version=2, knob="sampling.temperature", old_value="1.0",
                                        new_value="1.2", code_diff="-T = 1.0\n+T = 1.2\n",
                                        diagnosis="dead groups 0.9: all wrong", target="dead_group", intervention_id=1))
        ps.set_event(move_id, "applied" if auto else "pending")
    else:
        ps.set_event(move_id, "failed", error="copy mode: no move")
    ps.set_outcome(copy_id, Outcome(result="won", step=4, diff=0.4, low=0.1, high=0.6, n=N_VAL))
    ps.close()
    return pop_dir


def build_best_of_n(folder: Path, val_right: list[int], tests: list[int], seed: int = 0) -> Path:
    """best-of-n's folder: run rI with last validation val_right[i] of N_VAL, test tests[i] of N_TEST."""
    for i, (v, t) in enumerate(zip(val_right, tests)):
        build_member(Path(folder) / f"r{i}", "best-of-n", member_seed(seed, i), [(2, v // 2), (4, v)], t)
    return Path(folder)


def comparison(step: int, right: dict[int, int], width: float = 0.15) -> list[Score]:
    """One comparison's scores: member -> right of N_VAL, each paired against the best with a
    95% interval of +-`width`; a member whose interval lies below 0 is clearly behind."""
    top = max(right.values())
    return [Score(step=step, member=i, n=N_VAL, correct=r, acc=r / N_VAL, best=r == top, diff=(r - top) / N_VAL,
                  low=(r - top) / N_VAL - width, high=(r - top) / N_VAL + width, behind=(r - top) / N_VAL + width < 0)
            for i, r in right.items()]


DEMO_VALIDATION = {0: {2: 5, 4: 15, 6: 16}, 1: {2: 12, 4: 13, 6: 14}, 2: {2: 10, 4: 13, 6: 9}}
"""Member -> comparison step -> right of N_VAL: m0 behind at step 2, m2 at step 6."""


def build_population_demo(pop_dir: Path) -> Path:
    """A supervised explore population mid-run, for the population screen's snapshots and README shot.

    Three members compared at steps 2, 4 and 6 of 12, training on towards 8. At step 2 m0 was
    clearly behind m1: it copied m1 (#1) and took a move the operator approved (#2); both won at
    step 4. At step 6 m2 was clearly behind m0: it copied m0 (#3) and its move (#4) waits for the
    operator. Every value the screen shows is fixed (timestamps come from `ts`; ids count from 1)."""
    pop_dir = Path(pop_dir)
    pop_dir.mkdir(parents=True, exist_ok=True)
    ps = PopulationStore.open(pop_dir, create=True)
    members = [Member(i, f"m{i}", f"m{i}", member_seed(0, i)) for i in range(3)]
    ps.create(Population(size=3, every=2, mode="explore", steps_total=12, seed=0, auto_promote=False, step=6,
                         status="running", config_json=json.dumps(to_dict(RunConfig(steps=12, name="population")))),
              members)
    for m, steps, harness in zip(members, (7, 7, 6), (3, 1, 2)):
        build_member(pop_dir / m.run_dir, f"population-m{m.idx}", m.seed, sorted(DEMO_VALIDATION[m.idx].items()),
                     test_right=2 * DEMO_VALIDATION[m.idx][6], steps=steps, steps_total=8, status="running",
                     harness_version=harness)
    scores = {step: comparison(step, {i: v[step] for i, v in DEMO_VALIDATION.items()}) for step in (2, 4, 6)}
    for step_scores in scores.values():
        ps.record_scores(step_scores)
    m0, m2 = (Evidence(s.diff, s.low, s.high, s.n, (0, 1, 2)) for s in (scores[2][0], scores[6][2]))
    ids = ps.plan_events([Planned(2, "copy", 0, 1, m0, 0.6), Planned(2, "move", 0, 1, m0, 0.6)])
    ids += ps.plan_events([Planned(6, "copy", 2, 0, m2, 0.8), Planned(6, "move", 2, 0, m2, 0.8)])
    ps.set_event(ids[0], "applied", policy_version=2, harness_version=2)
    ps.set_move(ids[1], MoveChange(2, "SAMPLING.temperature", "1.0", "1.2", "-    \"temperature\": 1.0,\n"
                                   "+    \"temperature\": 1.2,\n", "dead groups 0.60: every rollout wrong",
                                   "dead_group", 1))
    ps.set_event(ids[1], "applied", policy_version=2, harness_version=3)
    for eid in ids[:2]:
        ps.set_outcome(eid, Outcome(result="won", step=4, diff=0.1, low=0.01, high=0.19, n=N_VAL))
    ps.set_event(ids[2], "applied", policy_version=6, harness_version=2)
    ps.set_move(ids[3], MoveChange(2, "FILTERS.drop_truncated", "False", "True", "-    \"drop_truncated\": False,\n"
                                   "+    \"drop_truncated\": True,\n", "truncated: 41% of wrong answers",
                                   "truncated", 1))
    ps.set_event(ids[3], "pending")
    ps.close()
    return pop_dir
