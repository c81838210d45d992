"""No churn: repeats are dropped before their backtest, retired diagnostics stay retired,
failing change kinds cool down, and the round log and the report say so."""

import pytest

from backend.evolve import interventions as iv
from backend.evolve import promote, run_round, submit
from backend.evolve import schedule
from backend.evolve.interventions import normalise
from backend.evolve.records import Skip
from backend.evolve.schedule import Rules
from backend.evolve.edit import remove_name, set_constant
from backend.store import loads, now
from backend.tools.report_gate import repeated_promotions
from synthetic_run import build_run, context, make_probe


@pytest.fixture
def run(tmp_path):
    s = build_run(tmp_path / "run.db", steps=6)
    yield s
    s.close()


def _cand(ctx, code, title="t", proposer="offline", parent=None, **params) -> iv.Candidate:
    parent = parent or {"id": ctx.harness_version, "code": ctx.harness.code}
    return iv.Candidate(title=title, code=code, parent_version=parent["id"], parent_code=parent["code"],
                        proposer=proposer, params=params)


def _promote_code(ctx, code, title, **params) -> int:
    """Record a candidate and promote it (as an approved one would be)."""
    iid = iv.record(ctx.store, None, _cand(ctx, code, title, **params))
    iv.transition(ctx.store, iid, "backtesting", "test")
    iv.transition(ctx.store, iid, "passed", "test")
    promote(ctx, iid, "test")
    return iid


def _prompt_change(code: str, text: str) -> str:
    return set_constant(code, "PROMPT", {"system": text, "user": "{question}"})


def test_normalised_duplicates_of_any_version_are_dropped(run):
    ctx = context(run)
    v1 = ctx.harness.code
    assert normalise(v1 + "\n# a comment\n\n") == normalise(v1)
    assert Rules(ctx).reason(_cand(ctx, "# reformatted\n" + v1)) == "same code as the active harness"
    _promote_code(ctx, _prompt_change(v1, "Answer in <answer> tags."), "Prompt A")
    rules = Rules(ctx)
    back = _cand(ctx, v1.replace("\n\n\n", "\n\n"), "Back to v1")
    assert rules.reason(back) == "same code as harness v1"
    assert rules.skipped == [Skip("Back to v1", "prompt:PROMPT", "offline", "same code as harness v1")]


def test_a_round_skips_repeats_before_their_backtest_and_logs_why(run, monkeypatch):
    ctx = context(run, probe=make_probe())
    dup = _cand(ctx, ctx.harness.code.replace("\n\n\n", "\n\n"), "Same thing again", template="noop")
    fresh = _cand(ctx, _prompt_change(ctx.harness.code, "Show the answer in tags."), "Prompt B")
    monkeypatch.setattr("backend.evolve.schedule.offline.propose", lambda *a, **k: [dup, fresh])
    out = run_round(ctx).summary
    titles = [run.get("interventions", i)["title"] for i in out["proposed"]]
    assert "Same thing again" not in titles and "Prompt B" in titles  # dropped before any backtest
    assert out["skipped"][0]["title"] == "Same thing again" and "same code" in out["skipped"][0]["reason"]
    rnd = run.get("rounds", out["round_id"])
    assert "1 skipped (churn)" in rnd["summary"]
    assert loads(rnd["skipped_json"])[0]["reason"] == "same code as the active harness"
    logged = [e["message"] for e in run.rows("SELECT message FROM events WHERE kind = 'evolve'")]
    assert any(m.startswith("skipped 'Same thing again'") for m in logged)


def test_an_operator_edit_equal_to_a_version_fails_with_the_reason(run):
    ctx = context(run, probe=make_probe())
    res = submit(ctx, ctx.harness.code + "\n# just a comment\n", title="no-op edit")
    row = run.get("interventions", res.id)
    assert res.status == "failed" and row["status"] == "failed" and "same code as harness v1" in row["reason"]


def test_a_promoted_change_is_not_promoted_again(run):
    ctx = context(run)
    v1 = ctx.harness.code
    a = _prompt_change(v1, "Use <answer> tags.")
    first = _promote_code(ctx, a, "Prompt A", template="prompt_tags")
    b = _prompt_change(a, "Something else.")
    _promote_code(ctx, b, "Prompt B")
    _promote_code(ctx, remove_name(b, "diagnose_empty"), "Retire 'empty'", op="remove", name="diagnose_empty")
    # the same PROMPT as #first, on top of v4: new code, but a change this run already promoted
    again = _cand(ctx, _prompt_change(ctx.harness.code, "Use <answer> tags."), "Prompt A again")
    assert Rules(ctx).reason(again) == f"the same change to PROMPT was promoted before (#{first})"
    assert repeated_promotions(run) == []
    iid = iv.record(run, None, again)  # forced past the rules: the report counts it
    iv.transition(run, iid, "backtesting", "t")
    iv.transition(run, iid, "passed", "t")
    promote(ctx, iid, "forced")
    assert [r["id"] for r in repeated_promotions(run)] == [iid]


def test_a_retired_diagnostic_stays_retired_without_new_evidence(run):
    ctx = context(run)
    v1 = {"id": 1, "code": ctx.harness.code}
    retire = _promote_code(ctx, remove_name(v1["code"], "diagnose_empty"), "Retire diagnostic 'empty'",
                           op="remove", name="diagnose_empty")
    source = 'def diagnose_empty(r):\n    if not r.completion.strip():\n        return "nothing written"\n'
    readd = _cand(ctx, ctx.harness.code + "\n\n" + source, "Skill: bring back 'empty'", name="diagnose_empty")
    why = Rules(ctx).reason(readd)
    assert why == f"diagnostic 'empty' was retired by #{retire}; no new evidence names it"
    assert why.whole_option  # every draw of that snippet brings it back: the proposer stops drawing it
    evidence = _cand(ctx, readd.code, "New diagnostic 'empty'", proposer="revision", op="add",
                     name="diagnose_empty", cluster_size=9)
    assert Rules(ctx).reason(evidence) is None  # revision names it from this window's unlabeled failures


def test_a_branch_from_an_older_member_is_judged_by_its_own_change(run):
    """A candidate built on a frontier member from before a retirement still defines the retired
    diagnostic, but only its factor reaches the active harness (a promotion re-applies it there),
    so it is not refused for the member's diagnostic (refusing it, a run would record thousands of
    refusals and never branch after its first retirement)."""
    ctx = context(run)
    v1 = {"id": 1, "code": ctx.harness.code}
    retire = _promote_code(ctx, remove_name(v1["code"], "diagnose_empty"), "Retire diagnostic 'empty'",
                           op="remove", name="diagnose_empty")
    branch = _cand(ctx, _prompt_change(v1["code"], "Be brief."), "Prompt from v1", parent=v1)
    assert Rules(ctx).reason(branch) is None
    rid = iv.record(ctx.store, None, branch)
    onto = iv.rebased_code(ctx.store, iv.get(ctx.store, rid), ctx.harness.code)
    assert "def diagnose_empty" not in onto and "Be brief." in onto  # what a promotion would make
    assert retire in Rules(ctx).retired.values()


def _decided(store, rid, template, status):
    ctx = context(store)
    iid = iv.record(store, rid, _cand(ctx, _prompt_change(ctx.harness.code, f"{template} {rid}"), template,
                                      template=template))
    iv.transition(store, iid, "backtesting", "t")
    iv.transition(store, iid, status, "t")


def _round(store) -> int:
    with store.tx():
        return store.insert("rounds", {"step": 1, "created_at": now(), "summary": ""})


def test_a_kind_that_keeps_failing_cools_down(run):
    ctx = context(run)
    ctx.cfg.evolve.cooldown_after, ctx.cfg.evolve.cooldown_rounds = 3, 2
    cand = _cand(ctx, _prompt_change(ctx.harness.code, "New wording."), "wording", template="prompt_wording")
    for status in ("failed", "inconclusive"):
        _decided(run, _round(run), "prompt_wording", status)
    assert Rules(ctx).reason(cand) is None  # two in a row: not yet
    _decided(run, _round(run), "prompt_wording", "failed")
    why = Rules(ctx).reason(cand)
    assert why.startswith("cooldown: prompt_wording failed or was inconclusive 3 times in a row")
    other = _cand(ctx, _prompt_change(ctx.harness.code, "Other."), "other", template="prompt_other")
    assert Rules(ctx).reason(other) is None  # only that kind cools down
    _round(run)
    assert Rules(ctx).reason(cand) is not None  # 1 round later: still cooling
    _round(run)
    assert Rules(ctx).reason(cand) is not None
    _round(run)
    assert Rules(ctx).reason(cand) is None  # cooldown_rounds passed: one more try
    _decided(run, _round(run), "prompt_wording", "failed")
    assert Rules(ctx).reason(cand).startswith("cooldown: prompt_wording failed or was inconclusive 4 times")
    _decided(run, _round(run), "prompt_wording", "passed")  # a pass ends the streak
    assert Rules(ctx).reason(cand) is None


class _EveryKind(dict):
    """A cooldown table in which every change kind is cooling down."""

    def __contains__(self, key):
        return True

    def __getitem__(self, key):
        return (3, 2)


def _all_cooling(run, monkeypatch):
    """(ctx, rules, steps, failure table, metrics) of a round in which every change kind cools down."""
    from backend.evolve import diagnose

    built = Rules.__init__

    def every_kind_cooling(self, c):
        built(self, c)
        self.cooling = _EveryKind()

    monkeypatch.setattr(Rules, "__init__", every_kind_cooling)
    ctx, steps = context(run), range(1, 7)
    return ctx, Rules(ctx), steps, diagnose.failure_table(run, steps), diagnose.round_metrics(run, steps)


def test_a_round_with_every_kind_cooling_still_proposes(run, monkeypatch):
    """No empty rounds while the space has untried moves. With every kind cooling,
    the offline proposer fills the round's slots with cooling kinds, marked as waived."""
    from backend.evolve.records import Observation

    ctx, rules, steps, table, metrics = _all_cooling(run, monkeypatch)
    cands = rules.screen(schedule.propose_all(ctx, Observation(6, steps, table, metrics, 0), rules))
    assert len(cands) == ctx.cfg.evolve.candidates and all(c.waived for c in cands)
    assert len({c.code for c in cands}) == len(cands)
    waived = {c.title for c in cands}
    assert not [e for e in rules.skipped if e.title in waived and e.reason.startswith("cooldown:")]
    # the waiver is for the cooldown only: a repeat stays refused
    assert rules.waived(_cand(ctx, "# reformatted\n" + ctx.harness.code)) == "same code as the active harness"
    assert Rules(ctx).reason(_cand(ctx, _prompt_change(ctx.harness.code, "x"), template="t")).startswith("cooldown")


def test_a_cooling_option_is_refused_once_not_once_per_value(run, monkeypatch):
    """A knob's cooldown holds for every value of its grid: the proposer stops drawing from it after
    the first refusal, so a round records one refusal per option (before: one per value, 301 in
    this round)."""
    from backend.evolve import offline

    ctx, rules, steps, table, metrics = _all_cooling(run, monkeypatch)
    options = offline.options(ctx, table, metrics, trials=True)
    assert offline.propose(ctx, table, metrics, len(options), set(), True, screen=rules.reason) == []
    cooled = [e for e in rules.skipped if e.reason.startswith("cooldown:")]
    assert cooled and len(cooled) <= len(options)
    assert len({e.key for e in cooled}) == len(cooled)  # one refusal per option
