"""The two held-out sets: disjoint, sized by config, and the test set never steers a decision.

The isolation test drives a seeded synthetic run through the real pieces the
loop uses (rounds with backtests and auto-promotion, `Store.record_evals`,
`after_eval` with rollback and skill learning). Scrambling the test answers
changes the test accuracy and nothing else; scrambling the validation answers
does change decisions (so the comparison can see a leak).
"""

import hashlib
import random

import pytest

from backend.config import ConfigError, load_config
from backend.envs import held_out_sets
from backend.envs.math import answers_match, extract_lenient
from backend.evolve import after_eval, run_round
from backend.store import loads
from synthetic_run import add_steps, build_run, context, make_probe

N_VAL, N_TEST = 48, 48


def _tasks(split: str, n: int) -> list[tuple[str, int, int]]:
    rng = random.Random(split)
    return [(f"{split}:{i}", rng.randint(2, 60), rng.randint(2, 60)) for i in range(n)]


def _skill(code: str) -> float:
    """The synthetic policy's held-out accuracy under a harness: fixed per harness version's code."""
    return 0.2 + 0.6 * int(hashlib.sha256(code.encode()).hexdigest()[:4], 16) / 0xFFFF


def _evaluate(store, step: int, scramble: str | None) -> None:
    """What the loop's `evaluate` stores, from a synthetic policy judged by the real math checks."""
    run = store.run()
    p = _skill(store.get("harness_versions", run["harness_version"])["code"])
    results = {}
    for split, n in (("validation", N_VAL), ("test", N_TEST)):
        rows = []
        for tid, a, b in _tasks(split, n):
            rng = random.Random(f"{tid}:{step}:{run['harness_version']}")
            text = f"The answer is {a + b if rng.random() < p else a + b + rng.choice([-2, 1, 3])}"
            gold = str(a + b + 7) if scramble == split else str(a + b)
            rows.append({"task_id": tid, "correct": answers_match(gold, extract_lenient(text)), "status": "",
                         "reward": 0.0})
        results[split] = rows
    store.record_evals(step, results, {}, run["policy_version"], run["harness_version"])


def _run(path, monkeypatch, scramble: str | None = None) -> tuple[list, list[float]]:
    """A seeded synthetic run: rounds every 4 steps, evaluations every 4 steps (offset by 2).
    Returns (every decision, the test accuracies). Each run has its own global skill library."""
    monkeypatch.setenv("EVOTUI_HOME", str(path.parent / "home"))
    store = build_run(path, steps=4, seed=5)
    store.set_run(auto_promote=1)
    probe = make_probe(seed=5)
    _evaluate(store, 0, scramble)
    for step in range(5, 19):
        add_steps(store, step, step, seed=5)
        if step % 4 == 0:
            run_round(context(store, step=step, probe=probe))
        if step % 4 == 2:
            _evaluate(store, step, scramble)
            after_eval(context(store, step=step))
    trace = [(r["id"], r["status"], r["reason"], r["child_version"], r["score"],
              [(h["to"], h["reason"]) for h in loads(r["history_json"], [])],
              r["gain_json"])
             for r in store.rows("SELECT * FROM interventions ORDER BY id")]
    trace += [("version", v["id"], v["status"], v["intervention_id"])
              for v in store.rows("SELECT * FROM harness_versions ORDER BY id")]
    trace += [("skill", k["name"], k["helped"], k["uses"], k["evidence_json"])
              for k in store.rows("SELECT * FROM skills ORDER BY id")]
    trace.append(("active", store.run()["harness_version"]))
    tests = [r["accuracy"] for r in store.rows("SELECT accuracy FROM evals WHERE split = 'test' ORDER BY id")]
    store.close()
    return trace, tests


def test_scrambling_the_test_answers_changes_no_decision(tmp_path, monkeypatch):
    base, base_test = _run(tmp_path / "a" / "run.db", monkeypatch)
    scrambled, scrambled_test = _run(tmp_path / "b" / "run.db", monkeypatch, scramble="test")
    assert any(t[1] == "promoted" or t[1] == "rolled_back" for t in base if isinstance(t[0], int)), base
    assert scrambled_test != base_test and max(scrambled_test) < 0.2 < max(base_test)
    assert scrambled == base
    # The comparison can see a leak: the validation set does steer decisions.
    leaky, _ = _run(tmp_path / "c" / "run.db", monkeypatch, scramble="validation")
    assert leaky != base


def test_sets_are_disjoint_and_sized_by_config():
    from backend.envs.math import MathEnv

    env = MathEnv(["basic_arithmetic", "chain_sum"], 99991, 32)
    sets = held_out_sets(env, 20, 300)
    assert [len(sets[k]) for k in ("validation", "test")] == [20, 300]
    val, test = ({t.question for t in sets[k]} for k in ("validation", "test"))
    assert not val & test and not {t.id for t in sets["validation"]} & {t.id for t in sets["test"]}
    assert [t.id for t in held_out_sets(env, 20, 300)["test"]] == [t.id for t in sets["test"]]  # frozen
    old = [t.id for t in env.heldout_tasks()]  # validation is the held-out set the gate always read
    assert [t.id for t in held_out_sets(env, 32, 10)["validation"]] == old


def test_math_sides_ask_each_question_once_share_none_and_keep_one_mix():
    """A small problem space (lcm at the held-out level repeats questions): each side asks a
    question once, a hash of the question picks its side, and when the space runs short every
    dataset gives as many as the smallest, so validation and test keep the same even mix."""
    from collections import Counter

    from backend.envs.math import MathEnv
    from backend.envs.split import in_validation

    env = MathEnv(["lcm", "fraction_simplification"], 99991, 32)
    sets = held_out_sets(env, 1000, 500)
    val, test = sets["validation"], sets["test"]
    for side in (val, test):
        assert len({t.question for t in side}) == len(side)
        mix = Counter(t.meta["dataset"] for t in side)
        assert mix["lcm"] == mix["fraction_simplification"]
    assert len(test) == 500 and 600 < len(val) < 1000  # the lcm space holds fewer than 500 on one side
    assert not {t.question for t in val} & {t.question for t in test}
    assert all(in_validation(f"math:{t.meta['dataset']}:{t.question}") for t in val)
    assert not any(in_validation(f"math:{t.meta['dataset']}:{t.question}") for t in test)
    assert [t.id for t in held_out_sets(env, 1000, 500)["validation"]] == [t.id for t in val]  # frozen
    for t in (val[0], val[-1], test[-1]):  # an id names its task, whichever rule drew it
        again = env.task_by_id(t.id)
        assert (again.id, again.question, again.answer) == (t.id, t.question, t.answer)


def test_code_split_is_a_hash_of_the_held_out_list():
    from backend.config import CodeConfig
    from backend.envs.code import CodeEnv

    env = CodeEnv(CodeConfig())
    sets = held_out_sets(env, 1000, 1000)
    held = {t.id for t in env.heldout_tasks()}
    val, test = {t.id for t in sets["validation"]}, {t.id for t in sets["test"]}
    assert val and test and not val & test and val | test == held


def test_config_sizes_and_the_deprecated_alias():
    cfg = load_config(None, [])
    assert (cfg.eval.n_val, cfg.eval.n_test) == (32, 32)
    assert (lambda c: (c.eval.n_val, c.eval.n_test))(load_config(None, ["eval.n_tasks=128"])) == (128, 128)
    cfg = load_config(None, ["eval.n_tasks=2", "eval.n_test=500"])
    assert (cfg.eval.n_val, cfg.eval.n_test) == (2, 500)
    with pytest.raises(ConfigError, match="n_val"):
        load_config(None, ["eval.n_val=0"])
