"""Backtests: replay in a subprocess, the validity gate, regressions, crashes, probes."""

import json

import pytest

from backend.config import RunConfig
from backend.evolve import run_round, submit
from backend.evolve.edit import replace_name, set_constant
from synthetic_run import build_run, context, make_probe
from backend.harness.loader import default_harness_path

DEFAULT = default_harness_path("math").read_text()
LENIENT = ("def extract_answer(r):\n"  # the evaluator's own reading; nothing when it hedges
           "    return None if is_hedged(r.completion) else final_answer(r.completion)\n")
EXPLOIT = ("def reward_correct(r):\n"
           "    # planted hack: any number that appears in the question counts as right\n"
           "    pred = extract_answer(r) or last_number(r.completion)\n"
           "    if pred is not None and pred in numbers(r.question):\n"
           "        return 1.0\n"
           "    return 1.0 if same_answer(pred, r.answer) else 0.0\n")


def _cfg(**evolve):
    cfg = RunConfig()
    for k, v in evolve.items():
        setattr(cfg.evolve, k, v)
    return cfg


@pytest.fixture
def store(tmp_path):
    s = build_run(tmp_path / "run.db", steps=5, mix={"copied": 0.25})
    yield s
    s.close()


def _metrics(store, iid):
    return json.loads(store.rows("SELECT metrics_json FROM backtests WHERE intervention_id = ?", (iid,))[0]
                      ["metrics_json"])


def test_planted_exploitable_reward_is_blocked_by_the_validity_diagnostic(store):
    ctx = context(store)
    res = submit(ctx, replace_name(DEFAULT, "reward_correct", EXPLOIT), "Credit numbers from the prompt",
                 hypothesis="more reward signal")
    assert res.status == "failed"
    assert res.reason.startswith("blocked by validity diagnostic answer_copied_from_prompt")
    m = _metrics(store, res.id)
    assert m["blocked"]["label"] == "answer_copied_from_prompt"
    # the evidence points at real copied-answer rollouts the exploit scores high
    for rid in m["blocked"]["examples"]:
        row = store.get("rollouts", rid)
        assert not row["correct"] and "answer_copied_from_prompt" in row["labels"]
    assert m["invalid"]["answer_copied_from_prompt"]["high_old"] == 0
    assert store.get("interventions", res.id)["status"] == "failed"


def test_honest_fix_passes_on_the_same_run(store):
    res = submit(context(store), replace_name(DEFAULT, "extract_answer", LENIENT), "Lenient extraction")
    assert res.status == "passed", res.reason


def test_regression_on_rollouts_an_earlier_promotion_fixed(store):
    store.set_run(auto_promote=1)
    out = run_round(context(store, probe=make_probe())).summary
    assert out["harness_version"] == store.run()["harness_version"] >= 2  # lenient extraction is in
    ctx = context(store)
    strict = replace_name(ctx.harness.code, "extract_answer",
                          "def extract_answer(r):\n    return answer_tag(r.completion) or None\n")  # not v1's code
    res = submit(ctx, strict, "Strict tags again")
    assert res.status == "failed" and res.reason.startswith("regresses")
    m = _metrics(store, res.id)
    assert m["fixed_checked"] > 0 and m["regressions"]


@pytest.mark.parametrize("edit, reason", [
    (lambda c: replace_name(c, "reward_format", "def reward_format(r):\n    while True:\n        pass\n"),
     "ran over its 1s CPU limit"),
    (lambda c: replace_name(c, "reward_format", "def reward_format(r):\n    return 1 / 0\n"),
     "reward components crashed"),
    (lambda c: set_constant(c, "REWARD_WEIGHTS", {"correct": 1.0, "bogus": 1.0}),
     "does not load: REWARD_WEIGHTS names 'bogus'"),
    (lambda c: c.replace("REWARD_WEIGHTS = {", "import os\nREWARD_WEIGHTS = {"),
     "harness check rejected the change: line 21: import of 'os' is not allowed"),
    (lambda c: set_constant(set_constant(c, "ADVANTAGE", {"rule": "rank"}), "FILTERS", {"drop_dead_groups": True}),
     "not a single-factor change: touches ADVANTAGE, FILTERS"),
    (lambda c: c + "\ndef broken(:\n", "does not parse"),
])
def test_bad_candidates_fail_with_a_reason(store, edit, reason):
    ctx = context(store, cfg=_cfg(backtest_timeout_s=1.0))
    res = submit(ctx, edit(DEFAULT), "bad")
    assert res.status == "failed" and reason in res.reason


def test_generation_side_changes_get_a_probe(store):
    with_probe = context(store, probe=make_probe())
    prompt = dict(with_probe.harness.prompt, system="Answer as <answer>N</answer>. Example: 2 + 3 = <answer>5</answer>")
    res = submit(with_probe, set_constant(DEFAULT, "PROMPT", prompt), "Example in the prompt")
    row = store.rows("SELECT * FROM backtests WHERE intervention_id = ?", (res.id,))[0]
    assert row["mode"] == "probe" and res.status == "passed", res.reason
    m = json.loads(row["metrics_json"])
    assert m["new"]["accuracy"] > m["old"]["accuracy"]
    hotter = set_constant(DEFAULT, "SAMPLING", {"temperature": 0.5, "top_p": 1.0, "max_new_tokens": 128})
    res = submit(context(store), hotter, "Cooler sampling")
    assert res.status == "failed" and "no probe available" in res.reason


def test_a_dead_worker_is_replaced_and_fails_only_its_request(store):
    from backend.harness.client import shared_worker

    w = shared_worker()
    hang = replace_name(DEFAULT, "reward_format", "def reward_format(r):\n    return sum(iter(int, 1))\n")
    ctx = context(store, cfg=_cfg(backtest_timeout_s=1.0))
    res = submit(ctx, hang, "C-level hang")  # no signal handler interrupts it: RLIMIT_CPU and the deadline do
    assert res.status == "failed" and "ran over" in res.reason
    w._proc.proc.kill()  # the worker itself dies between requests
    res = submit(context(store), replace_name(DEFAULT, "extract_answer", LENIENT), "Lenient extraction")
    assert res.status == "passed", res.reason


def test_a_probe_that_turns_up_reward_hacks_is_blocked(store):
    def probe(h, n):
        copies = "copy" in h.prompt.get("system", "")
        return [{"id": i, "group_idx": i // 4, "correct": 0, "completion": "The answer is 3",
                 "reward": 1.1 if copies else 0.0, "labels": "answer_copied_from_prompt" if copies else "",
                 "completion_tokens": 4} for i in range(8)]
    ctx = context(store, probe=probe)
    prompt = dict(ctx.harness.prompt, system="Just copy a number from the question.")
    res = submit(ctx, set_constant(DEFAULT, "PROMPT", prompt), "Copy prompt")
    assert res.status == "failed"
    assert res.reason.startswith("blocked by validity diagnostic answer_copied_from_prompt: 8 of 8")


def test_harness_worker_sees_packages_installed_on_pythonpath(tmp_path, monkeypatch):
    """`python -I` drops PYTHONPATH; a math-verify installed with `pip install --target` (as on a
    machine without a venv) must still be importable in the worker, or every harness fails."""
    from backend.harness import client

    (tmp_path / "site").mkdir()
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    assert str((tmp_path / "site").resolve()) in client._site_paths()
    assert not any(p.startswith(client.runtime_dir()) for p in client._site_paths())


def _same_update(store, iid):
    return store.rows("SELECT same_update FROM backtests WHERE intervention_id = ?", (iid,))[0]["same_update"]


def test_a_replay_records_whether_the_candidate_left_trainings_update_as_it_was(store):
    """`backtests.same_update`: 1 when the candidate trains the same rollouts with the same advantages
    as the incumbent on every replayed rollout (every reward weight doubled: group_std takes the scale
    out), 0 when it does not (lenient extraction pays answers the incumbent missed). A knob's move
    history carries it to the proposer (`space.Steps`)."""
    from backend.evolve import interventions as iv
    from backend.evolve import space
    from backend.evolve.backtest import backtest
    from backend.evolve.edit import constant

    ctx = context(store)
    weights = constant(DEFAULT, "REWARD_WEIGHTS")
    doubled = set_constant(DEFAULT, "REWARD_WEIGHTS", {k: 2 * v for k, v in weights.items()})
    res = submit(ctx, doubled, "Every weight doubled")
    assert res.status == "inconclusive" and _same_update(store, res.id) == 1
    assert res.reason.endswith("training's update is unchanged on these rollouts "
                                  "(the same rows, the same advantages)"), res.reason
    assert store.latest_backtest(res.id).same_update is True
    res = submit(ctx, replace_name(DEFAULT, "extract_answer", LENIENT), "Lenient extraction")
    assert _same_update(store, res.id) == 0
    knob = next(k for k in space.knobs(DEFAULT, "math", 512) if k.name == "REWARD_WEIGHTS.format")
    move = next(space.moves(DEFAULT, knob, space.Steps.of(knob, [])))
    iid = iv.record(store, None, iv.Candidate(title=move.title(), code=move.apply(DEFAULT), parent_version=1,
                                              parent_code=DEFAULT, proposer="offline", kind="reward",
                                              params=move.params()))
    backtest(ctx, [iid])
    (last,) = store.move_history()[knob.name]
    assert last["id"] == iid and last["same_update"] == _same_update(store, iid) in (0, 1)
    bt = store.latest_backtest(iid)
    assert bt.ci_low is not None and (last["mode"], last["ci_low"], last["ci_high"]) == ("replay", bt.ci_low,
                                                                                       bt.ci_high)
    decisions = store.backtest_decisions()
    assert [d["same_update"] for d in decisions] == [1, 0, last["same_update"]]

    from backend.tools.report_gate import _notes
    from backend.tools.report_search import search_lines

    assert _notes(decisions[0]) == " (update unchanged)" and "unchanged" not in _notes(decisions[1])
    hugs_zero = dict(decisions[1], verdict="inconclusive", underpowered=0, ci_low=-0.0002, ci_high=0.0004)
    assert _notes(hugs_zero) == " (nothing seen)"
    facts = {"rounds": [{"step": 5, "tried": 3, "passed": 1, "inconclusive": 1, "failed": 1, "knobs": [],
                         "error": None, "spent": None}], "frontier": [],
             "budget": {"share_of_training": 0.1, "search_rollouts": 0, "replay_rollout_equiv": 0}}
    unchanged = sum(1 for d in decisions if d["same_update"] or (d["verdict"] == "inconclusive"
                                                                  and max(abs(d["ci_low"]), abs(d["ci_high"])) <= 1e-3))
    md = "\n".join(search_lines({"coevolve": [{"seed": 0, "search": facts, "decisions": decisions}]}))
    assert f"| coevolve s0 | 1 | 0 | 0 | 0 | 3 | 1 | 1 | 1 | {unchanged} | 0 |" in md
