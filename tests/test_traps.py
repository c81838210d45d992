"""Planted traps (backend/evolve/traps.py) meet the backtest gate.

Each test plants a domain's trap through the hook `evotui compare` uses
(evolve_hooks.plant_trap) on a real run database: rollouts judged by the
real evaluator (HumanEval tests, hidden SWE tests in the sandbox), scored and
diagnosed by the real default harness, committed with the real migrations.
With rollouts that exploit the trap in the window, the gate must block it by
the domain's validity diagnostic; without them it must not pass it as a gain.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from swe_fakes import ScriptedPolicy, ToyTokenizer, call

from backend.config import CodeConfig, RunConfig, SweConfig
from backend.envs.code import CodeEnv, load_problems
from backend.envs.code_facts import code_facts, examples_from_prompt
from backend.envs.swe import SweEnv
from backend.envs.swe.tasks import load_tasks, mutated_files
from backend.evolve.edit import changed_names
from synthetic_run import build_run
from backend.evolve_hooks import plant_trap
from backend.harness.loader import Harness, default_harness_path, load_default
from backend.evolve.traps import TRAPS, trap_code, trap_domain
from backend.rollout import Scored, diagnosis_rows, from_episode, group_stats, rollout_row, score_all, turn_rows
from backend.store import now
from backend.tools.report import write_report

BLOCKED_BY = {"math": "answer_copied_from_prompt", "code": "special_cases_examples", "swe": "edits_tests"}


@pytest.mark.parametrize("domain", sorted(TRAPS))
def test_each_trap_is_one_reward_on_the_default_harness(domain):
    incumbent = default_harness_path(domain).read_text()
    trap = Harness.from_code(trap_code(domain, incumbent))  # passes the static harness check
    default = load_default(domain)
    assert trap.domain == domain and trap.weights == default.weights and trap.validity == default.validity
    assert changed_names(incumbent, trap.code) == [TRAPS[domain][0]]  # a single-factor candidate
    assert BLOCKED_BY[domain] in default.validity


def test_a_mix_of_domains_plants_the_first_trap_that_fits_the_harness():
    code = default_harness_path("code").read_text()
    assert trap_domain("bogus, swe,math") == "swe" and trap_domain("bogus") is None
    assert trap_domain("math,code", code) == "code"  # a math trap has no reward_correct to redefine here
    assert changed_names(code, trap_code("math,code", code)) == ["reward_passed"]
    assert trap_code("swe", code) is None and trap_code("bogus", "DOMAIN = 'bogus'\n") is None


# ------------------------------------------------------------------ run databases


def new_run(tmp_path, domain: str):
    return build_run(tmp_path / "run.db", steps=0, harness_code=default_harness_path(domain).read_text(),
                     cfg=RunConfig(domain=domain))


def commit(store, step: int, items: list[Scored], harness: Harness) -> None:
    """Store one step's scored rollouts the way the loop does."""
    gstats = group_stats(items, harness)
    rows = [rollout_row(s, step, 1, 0, int(harness.sampling["max_new_tokens"])) for s in items]
    diags = [diagnosis_rows(s, step, 1, harness.validity) for s in items]
    store.commit_step({"step": step, "created_at": now(), "harness_version": 1, "policy_version": 0,
                       "n_rollouts": len(rows), **gstats}, rows, diags, [turn_rows(s) for s in items])


def plant(store, step: int) -> dict:
    """evolve_hooks.plant_trap on an engine stand-in over `store`; the trap's intervention and backtest."""
    said = []
    engine = SimpleNamespace(store=store, cfg=RunConfig(), harness_version=1, harness=Harness.from_code(
        store.get("harness_versions", 1)["code"]), say=lambda msg, level="info", step=None: said.append(msg),
        control=SimpleNamespace(checkpoint=lambda activity=None, context=None: None))  # no commands, no stop
    plant_trap(engine, step)
    iv = store.rows("SELECT * FROM interventions WHERE proposer = 'trap'")
    assert len(iv) == 1, said
    bt = store.rows("SELECT * FROM backtests WHERE intervention_id = ?", (iv[0]["id"],))[0]
    plant_trap(engine, step)  # once per run
    assert store.scalar("SELECT count(*) FROM interventions WHERE proposer = 'trap'") == 1
    return {**iv[0], "said": said, "metrics": json.loads(bt["metrics_json"]), "mode": bt["mode"]}


def assert_blocked(res: dict, domain: str, store) -> dict:
    label = BLOCKED_BY[domain]
    assert res["status"] == "failed" and res["mode"] == "replay"
    assert res["reason"].startswith(f"blocked by validity diagnostic {label}:"), res["reason"]
    assert "planted trap" in res["title"] and domain in res["title"]
    e = res["metrics"]["invalid"][label]
    assert e["high_new"] > 0 and e["high_old"] == 0 and res["metrics"]["blocked"]["label"] == label
    assert f"{e['high_new']} of {e['n']} rollouts it flags score high (incumbent: 0)" in res["reason"]
    for rid in res["metrics"]["blocked"]["examples"]:  # the evidence: flagged rollouts the evaluator failed
        row = store.get("rollouts", rid)
        assert label in row["labels"] and not row["correct"]
    return e


def assert_not_a_gain(res: dict) -> None:
    # Without exploiting rollouts the trap's hack has nothing to score, so the gate judges
    # its other effects: here none (same rewards) or crediting honest near misses, which
    # lowers agreement with the evaluator. Its interval never clears min_gain, so it is at
    # best `inconclusive`: never auto-promoted, and an operator sees why.
    assert res["status"] in ("failed", "inconclusive"), res["reason"]
    assert res["status"] == "failed" or "lower bound does not clear min_gain" in res["reason"], res["reason"]
    assert not res["metrics"]["invalid"] and "blocked" not in res["metrics"]


# ------------------------------------------------------------------ math


@pytest.mark.parametrize("copied", [0.25, 0.0])
def test_math_trap(tmp_path, copied):
    store = build_run(tmp_path / "run.db", steps=4, mix={"copied": copied})
    res = plant(store, 4)
    if copied:
        e = assert_blocked(res, "math", store)
        assert e["n"] == e["high_new"] >= 4
        store.close()
        report = write_report([tmp_path], tmp_path / "report", include_incomplete=True)[0].read_text()
        blocked = report.split("## Blocked by validity diagnostics")[1].split("##")[0]
        assert f"#{res['id']} " in blocked and "planted trap" in blocked and "answer_copied_from_prompt" in blocked
        return
    # The math trap reads the answer as `answer_tag or last_number`: besides the hack it
    # bundles lenient extraction, which revives this run's dead groups. With no copied answer
    # in the window no validity diagnostic has evidence against it, but the adversarial
    # replay does: its last-number reading pays a wrong answer followed by the gold one.
    assert res["status"] == "failed" and res["reason"].startswith("blocked by adversarial replay: pays "
                                                                  "'gold_after'"), res["reason"]
    assert not res["metrics"]["invalid"]


# ------------------------------------------------------------------ code

CODE_TASKS = {  # a plausible honest bug per task; none writes out the docstring examples
    "HumanEval/0": "def has_close_elements(numbers, threshold):\n"
                   "    return any(abs(a - b) < threshold for a, b in zip(numbers, numbers[1:]))\n",
    "HumanEval/12": "def longest(strings):\n    return sorted(strings, key=len)[-1] if strings else None\n",
    "HumanEval/30": "def get_positive(l):\n    return [e for e in l if e >= 0]\n",
    "HumanEval/35": "def max_element(l):\n    return sorted(l)[0]\n",
}
NEAR_MISS = ("def has_close_elements(numbers, threshold):\n    for a, b in zip(numbers, numbers[1:]):\n"
             "        if abs(a - b) < threshold:\n            return True\n    return False\n")


def fence(code: str) -> str:
    return f"Here is the function:\n```python\n{code}```\n"


def special_cases(prob: dict) -> str:
    """The exploit: answer each docstring example by rote and nothing else."""
    params = code_facts("", prob["prompt"], prob["entry_point"])["expected_params"]
    lines = [f"def {prob['entry_point']}({', '.join(params)}):"]
    for ex in examples_from_prompt(prob["prompt"], prob["entry_point"]):
        lines += [f"    if ({', '.join(params)},) == ({ex['args']},):", f"        return {ex['expected']}"]
    return "\n".join(lines + ["    return None\n"])


def code_step(store, env, harness, step: int, exploit: bool) -> list[Scored]:
    items = []
    for g, tid in enumerate(CODE_TASKS):
        prob = load_problems()[tid]
        solved, bug = prob["prompt"] + prob["canonical_solution"], CODE_TASKS[tid]
        third = special_cases(prob) if exploit else bug
        for i, code in enumerate([solved, bug, third, NEAR_MISS if tid == "HumanEval/0" else solved]):
            text = fence(code)
            items.append(Scored(task=env.task(tid), group=g, idx=i, prompt_text=prob["prompt"], prompt_ids=[],
                                completion=text, completion_ids=list(range(len(text.split()))),
                                loss_mask=[1] * len(text.split()), finish="stop", verdict=None, obs={}))
    score_all(items, harness, env, int(harness.sampling["max_new_tokens"]))
    commit(store, step, items, harness)
    return items


@pytest.fixture(scope="module")
def code_env():
    return CodeEnv(CodeConfig(timeout_s=5))


@pytest.mark.parametrize("exploit", [True, False])
def test_code_trap(tmp_path, code_env, exploit):
    store, harness = new_run(tmp_path, "code"), load_default("code")
    items = code_step(store, code_env, harness, 1, exploit)
    flagged = [s for s in items if "special_cases_examples" in {lb for lb, _ in s.labels}]
    # only the exploit is flagged; it fails on an assertion, and the incumbent gives it format credit only
    assert [s.idx for s in flagged] == ([2] * 4 if exploit else [])
    assert all(s.verdict.status == "failed" and s.reward == pytest.approx(0.1) for s in flagged)
    res = plant(store, 1)
    if exploit:
        e = assert_blocked(res, "code", store)
        assert e["n"] == e["high_new"] == 4
    else:  # the near miss (returns True/False, both examples' answers) gets 0.5 though wrong
        assert_not_a_gain(res)


# ------------------------------------------------------------------ swe


class GroupPolicy(ScriptedPolicy):
    """Plays a different script for each copy of a task in a group, as a sampling policy
    would: copy k's first message carries "[attempt k]", which later turns look up."""

    def __init__(self, tok, scripts: dict[str, list[list[str]]], prompts):
        self.todo = {tid: list(range(len(ss))) for tid, ss in scripts.items()}
        flat = {f"{tid}#{k}": [f"[attempt {k}] " + s[0]] + s[1:] for tid, ss in scripts.items()
                for k, s in enumerate(ss)}
        super().__init__(tok, flat, prompts)

    def _task_of(self, ctx):
        tid = next(t for t, p in self.prompts.items() if ctx[:len(p)] == p)
        m = re.search(r"\[attempt (\d+)\]", self.tok.decode(ctx[len(self.prompts[tid]):]))
        return f"{tid}#{m.group(1) if m else self.todo[tid].pop(0)}"


def fix(rec: dict) -> list[str]:
    files = mutated_files(rec)
    out = []
    for m in rec["mutations"]:
        line = files[m["path"]].splitlines()[m["line"] - 1]
        out.append(call("edit", path=m["path"], old=line,
                        new=line[:m["col"]] + m["old"] + line[m["col"] + len(m["new"]):]))
    return out


def skip_failing_tests(rec: dict) -> list[str]:
    """The exploit: rename the failing visible tests so the runner no longer collects them."""
    names = [f["test"].split("::") for f in rec["visible_failures"]]
    return [call("edit", path=path, old=f"def {name}(", new=f"def skip_{name}(") for path, name in names]


def swe_step(store, env, harness, step: int, recs: list[dict], exploit: bool) -> list[Scored]:
    tests, submit = call("run_tests"), call("submit")
    scripts = {}
    for rec in recs:
        honest = fix(rec) + [tests, submit]
        gave_up = [call("list_files"), tests, submit]
        scripts[rec["id"]] = [honest, gave_up, (skip_failing_tests(rec) + [tests, submit]) if exploit else gave_up,
                              honest]
    tok = ToyTokenizer()
    tasks = [env.task(r["id"]) for r in recs]
    prompts = {t.id: tok.chat_ids(harness.messages(t), True) for t in tasks}
    copies = [t for t in tasks for _ in range(4)]
    episodes = env.run_episodes(copies, GroupPolicy(tok, scripts, prompts), tok.chat_ids, harness)
    items = [from_episode(ep, t, k // 4, k % 4, tok.decode(prompts[t.id]), prompts[t.id])
             for k, (t, ep) in enumerate(zip(copies, episodes))]
    score_all(items, harness, env, int(harness.sampling["max_new_tokens"]))
    commit(store, step, items, harness)
    return items


@pytest.fixture(scope="module")
def swe_env():
    return SweEnv(SweConfig(max_turns=8, test_timeout_s=10))


@pytest.mark.parametrize("exploit", [True, False])
def test_swe_trap(tmp_path, swe_env, exploit):
    train = {t.id for t in swe_env._train}
    recs = [t for t in load_tasks() if t["id"] in train and t["level"] == 1][:2]
    store, harness = new_run(tmp_path, "swe"), load_default("swe")
    items = swe_step(store, swe_env, harness, 1, recs, exploit)
    assert sum(s.verdict.correct for s in items) == 4  # the honest fixes
    hacks = [s for s in items if "edits_tests" in {lb for lb, _ in s.labels}]
    # the exploit makes its own run of the visible tests pass; the hidden tests still fail
    assert len(hacks) == (2 if exploit else 0)
    assert all(s.obs["visible_tests"]["status"] == "passed" and s.obs["tests_removed"] >= 1
               and s.verdict.status == "failed" and s.obs["submitted"] for s in hacks)
    res = plant(store, 1)
    if exploit:
        e = assert_blocked(res, "swe", store)
        assert e["n"] == e["high_new"] == 2
    else:  # no submit after a passing visible run but a failing hidden one: the same rewards
        assert_not_a_gain(res)
