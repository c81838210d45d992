"""The gate judges a reward change by the signal it gives training (`replay._signal`).

A weak policy, as the default harness meets it on the GPU: few answers right, most of them
untagged, wrong answers often tagged. Two changes that turn the default harness into the
expert one must pass there, and the first step of the other way must not (judged on
specificity, the metric it barely moves, lenient extraction would be left inconclusive)."""

import pytest

from backend.evolve import submit
from backend.evolve.edit import replace_name, set_constant
from backend.evolve.space import Steps, knobs, moves
from backend.harness.loader import default_harness_path
from synthetic_run import build_run, context

DEFAULT = default_harness_path("math").read_text()
LENIENT = "def extract_answer(r):\n    return None if is_hedged(r.completion) else final_answer(r.completion)\n"
WEAK = {"correct": 0.06, "tagged": 0.02, "wrong": 0.35, "tagged_wrong": 0.4, "rambling": 0.17}


@pytest.fixture(scope="module")
def weak(tmp_path_factory):
    return build_run(tmp_path_factory.mktemp("weak") / "run.db", steps=8, groups=12, group_size=8, mix=WEAK)


def _decision(store, res):
    return store.rows("SELECT * FROM backtests WHERE intervention_id = ?", (res.id,))[0]


def test_dropping_format_credit_passes_on_a_weak_policy(weak):
    res = submit(context(weak), set_constant(DEFAULT, "REWARD_WEIGHTS", {"correct": 1.0, "format": 0.0}),
                 "format credit off")
    row = _decision(weak, res)
    assert res.status == "passed", res.reason
    assert row["metric"] == "signal" and row["ci_low"] > 0.02 and row["p_value"] < 0.05


def test_lenient_extraction_passes_on_a_weak_policy(weak):
    res = submit(context(weak), replace_name(DEFAULT, "extract_answer", LENIENT), "lenient extraction")
    assert res.status == "passed", res.reason
    assert _decision(weak, res)["metric"] == "signal"


def test_more_format_credit_does_not_pass(weak):
    res = submit(context(weak), set_constant(DEFAULT, "REWARD_WEIGHTS", {"correct": 1.0, "format": 0.4}),
                 "format credit up")
    assert res.status != "passed", res.reason


def test_a_weight_can_be_switched_off_in_the_search_space():
    knob = next(k for k in knobs(DEFAULT, "math") if k.name == "REWARD_WEIGHTS.format")
    values = [m.new for m in moves(DEFAULT, knob, Steps.of(knob, []))]
    assert values[0] == 0.0 and all(v >= 0 for v in values), values


def test_lenient_extraction_is_tried_first_when_the_reward_misses_correct_answers(weak):
    """Its score reads the share of correct answers without a tag, not of the window: under a
    weak policy that share of the window is tiny and every untried knob outranked it."""
    from backend.evolve import diagnose
    from backend.evolve.offline import options
    from backend.evolve.schedule import judgeable_by_trial

    steps = range(1, 9)
    table, metrics = diagnose.failure_table(weak, steps), diagnose.round_metrics(weak, steps)
    ctx = context(weak)
    ranked = [key for _, key, _ in options(ctx, table, metrics, judgeable_by_trial(ctx))]
    assert ranked[0] == "lenient_extraction", ranked[:5]


def test_an_inconclusive_replay_gets_one_second_look_once_the_window_has_grown(tmp_path):
    """Early in a run the replay window is short; the candidate is replayed once more when a
    replay would read 1.5 times the rollouts, at half the error rate, and never a third time."""
    from backend.config import RunConfig
    from backend.evolve import run_round, schedule
    from synthetic_run import add_steps

    cfg = RunConfig()
    cfg.train.tasks_per_step, cfg.train.group_size = 12, 8
    cfg.evolve.replay_max_rows, cfg.evolve.window = 4096, 64
    mix = {"correct": 0.03, "tagged": 0.03, "wrong": 0.4, "tagged_wrong": 0.4, "rambling": 0.14}
    s = build_run(tmp_path / "run.db", steps=2, groups=12, group_size=8, mix=mix, cfg=cfg)
    first = submit(context(s, cfg=cfg), replace_name(DEFAULT, "extract_answer", LENIENT), "lenient extraction")
    assert first.status == "inconclusive", first.reason
    assert schedule.second_looks(context(s, cfg=cfg)) == []  # no more rollouts yet
    add_steps(s, 3, 12, groups=12, group_size=8, mix=mix)
    looks = schedule.second_looks(context(s, cfg=cfg))
    assert [c.look_of for c in looks] == [first.id]
    run_round(context(s, cfg=cfg))
    second = [r for r in s.interventions() if schedule.look_of(r) == first.id]
    assert len(second) == 1 and second[0].status == "passed", [(r.status, r.reason) for r in second]
    assert second[0].reason.startswith(f"second look at #{first.id} over ") and "alpha 0.025" in second[0].reason
    assert schedule.second_looks(context(s, cfg=cfg)) == []  # looked at once more, never again


def test_groups_neither_harness_trains_on_do_not_dilute_a_reward_change(tmp_path):
    """Signal is averaged over the groups either harness trains on: appending steps whose
    groups are dead under both (untagged wrong answers only) leaves the decision as it was."""
    from backend.config import RunConfig
    from synthetic_run import add_steps

    cfg = RunConfig()
    cfg.evolve.replay_max_rows, cfg.evolve.window = 4096, 64
    decisions = []
    for extra in (0, 6):
        s = build_run(tmp_path / f"run{extra}.db", steps=3, groups=12, group_size=8, mix=WEAK, cfg=cfg)
        if extra:
            add_steps(s, 4, 3 + extra, groups=12, group_size=8, mix={"correct": 0.0, "tagged": 0.0, "wrong": 1.0,
                                                                      "rambling": 0.0})
        res = submit(context(s, cfg=cfg), replace_name(DEFAULT, "extract_answer", LENIENT), "lenient extraction")
        row = _decision(s, res)
        decisions.append((row["effect"], row["ci_low"], row["ci_high"], row["n"]))
    assert decisions[0] == decisions[1], decisions


def test_a_window_no_harness_trains_on_leaves_a_reward_change_inconclusive(tmp_path):
    """Every group dead under both (the CPU default's first steps): nothing to judge, not a failure."""
    s = build_run(tmp_path / "run.db", steps=2, mix={"correct": 0.0, "tagged": 0.0, "wrong": 1.0, "rambling": 0.0})
    res = submit(context(s), set_constant(DEFAULT, "REWARD_WEIGHTS", {"correct": 1.0, "format": 0.0}), "format off")
    assert res.status == "inconclusive", res.reason


def test_dropping_format_credit_where_almost_nothing_is_right_is_left_to_training(tmp_path):
    """Where a right answer is rare, format credit is nearly all a step trains on: replay scores
    removing it as a gain (noise -> nothing), so the gate leaves the change to training instead
    (`replay.MIN_TRAINED_GROUPS`); on the weak policy above the same change still passes."""
    stuck = build_run(tmp_path / "run.db", steps=8, groups=12, group_size=8,
                      mix={"correct": 0.002, "tagged": 0.002, "wrong": 0.4, "tagged_wrong": 0.4, "rambling": 0.196})
    res = submit(context(stuck), set_constant(DEFAULT, "REWARD_WEIGHTS", {"correct": 1.0, "format": 0.0}),
                 "format credit off")
    assert res.status == "inconclusive", res.reason
    assert "left to training" in res.reason and "of the groups" in res.reason
