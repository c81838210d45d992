"""The population's frontier (scores, lineage, parent choice, branches marked) and what the
search costs in training rollouts."""

import math
import random

import pytest

from backend.evolve import interventions as iv
from backend.evolve import frontier, lineage, offline, run_round, schedule
from backend.evolve.budget import search_budget
from backend.harness.loader import sha
from backend.store import now
from backend.tools.compare import probe_rollouts
from backend.tools.report_search import search_facts, search_lines
from synthetic_run import build_run, context, make_probe

LABELS = ["no_answer_tag", "dead_groups", "truncated"]
"""The round's failure labels, most common first."""


@pytest.fixture
def store(tmp_path):
    s = build_run(tmp_path / "run.db", steps=4)
    yield s
    s.close()


def _version(store, parent, status, change):
    code = store.get("harness_versions", parent)["code"].replace('"format": 0.1', f'"format": {change}')
    return store.add_harness_version(code, parent, "", status, sha(code))


def _child(store, parent, target, status):
    """A stored candidate built on `parent` that ended as `status`."""
    base = store.get("harness_versions", parent)["code"]
    code = base.replace('"level": 1', f'"level": {random.Random(target + status).randint(2, 9)}')
    iid = iv.record(store, None, iv.Candidate(title="t", code=code, parent_version=parent, parent_code=base,
                                              proposer="offline", target=target))
    iv.transition(store, iid, "backtesting", "test")
    iv.transition(store, iid, status, "test")
    return iid


def _tree(store):
    """v1 (root) -> v2 -> v4 (active); v1 -> v3 (rolled back); v1 has three children, one passed."""
    store.update("harness_versions", 1, {"status": "superseded"})
    v2 = _version(store, 1, "superseded", 0.2)
    v3 = _version(store, 1, "rolled_back", 0.3)
    v4 = _version(store, v2, "active", 0.4)
    store.set_run(harness_version=v4)
    _child(store, 1, "no_answer_tag", "passed")
    _child(store, 1, "no_answer_tag", "failed")
    _child(store, 1, "dead_groups", "inconclusive")
    _child(store, v2, "truncated", "failed")
    return v2, v3, v4


def test_frontier_scores_members_and_keeps_their_lineage(store):
    v2, v3, v4 = _tree(store)
    front = frontier.frontier(store, 4, LABELS)
    assert [m.version for m in front] == [v4, v2, 1]  # the rolled-back v3 is out; active first
    active, m2, m1 = front
    assert active.active and active.ancestry == (v4, v2, 1)
    assert (m1.children, m1.passed) == (3, 1) and m1.productivity == pytest.approx(2 / 5)
    assert m1.novelty == pytest.approx(1 / 4) and m1.coverage == pytest.approx(1 / 3)  # only 'truncated' untried
    assert (m2.children, m2.passed) == (1, 0) and m2.coverage == pytest.approx(2 / 3)
    assert m2.score > m1.score  # less explored, and its children left more of the top failures open
    for m in front:  # the lineage of every member explains it back to the root
        assert tuple(s["version"] for s in lineage(store, m.version)) == m.ancestry
    assert [m.version for m in frontier.frontier(store, 2, LABELS)] == [v4, v2]
    assert m2.to_dict()["ancestry"] == [v2, 1]


def test_parents_are_the_active_version_first_then_drawn_by_score(store):
    v2, _, v4 = _tree(store)
    parents = frontier.choose_parents(store, 4, LABELS, random.Random(0), 4)
    assert parents[0].version == v4 and len(parents) == 4
    many = [p.version for seed in range(300) for p in frontier.choose_parents(store, 4, LABELS,
                                                                                random.Random(seed), 2)[1:]]
    assert set(many) == {v4, v2, 1}
    scores = {m.version: m.score for m in frontier.frontier(store, 4, LABELS)}
    # drawn in proportion to score: the most frequent is the best-scoring one
    assert max(set(many), key=many.count) == max(scores, key=scores.get)


def test_candidates_on_an_older_member_record_their_base(store):
    v2, _, v4 = _tree(store)
    ctx = context(store, probe=make_probe())
    table = [{"label": "no_answer_tag", "share": 0.9}]
    cands = offline.propose(ctx, table, {}, 8, set(), schedule.judgeable_by_trial(ctx))
    on_active = [c for c in cands if c.parent_version == v4]
    branched = [c for c in cands if c.parent_version != v4]
    assert on_active and branched and cands[0].parent_version == v4
    assert all("branch" not in c.params for c in on_active)
    for c in branched:
        assert c.params["branch"] == {"base": c.parent_version, "active": v4}
        assert c.parent_code == store.get("harness_versions", c.parent_version)["code"]
        assert len(c.names()) == 1  # single-factor against its own base


def test_search_budget_counts_probe_arms_once_per_round_and_replay_by_time(store):
    store.conn.execute("UPDATE steps SET n_rollouts = 16, total_ms = 800")  # 4 steps: 64 rollouts, 50 ms each
    rid = store.insert("rounds", {"step": 4, "created_at": now(), "summary": ""})
    # one round: two probed candidates (8 rollouts each) and two replayed in one batch (each row
    # records the batch's time so far: 100 ms, then 150 ms)
    costs = [("probe", 8, 10.0), ("probe", 8, 12.0), ("replay", 64, 100.0), ("replay", 64, 150.0)]
    for mode, n, ms in costs:
        iid = store.insert("interventions", {"round_id": rid, "status": "failed", "code": "", "params_json": "{}"})
        store.insert("backtests", {"intervention_id": iid, "mode": mode, "n_rollouts": n, "ms": ms, "verdict": "x"})
    b = search_budget(store)
    assert b["train_rollouts"] == 64
    assert (b["candidate_rollouts"], b["incumbent_rollouts"]) == (16, 8)  # the incumbent arm is shared
    assert b["replay_rollouts_scored"] == 128 and b["replay_rollout_equiv"] == pytest.approx(150 / 50)
    assert b["search_rollouts"] == pytest.approx(16 + 8 + 3)
    assert b["share_of_training"] == pytest.approx(27 / 64, abs=1e-4)
    assert b["by_mode"]["probe"] == {"backtests": 2, "rollouts": 24, "ms": 22.0}


def test_an_explore_moves_safety_gate_costs_its_time_not_its_replayed_rows(store):
    from backend.evolve.budget import POPULATION_GATE

    store.conn.execute("UPDATE steps SET n_rollouts = 16, total_ms = 800")  # 64 rollouts, 50 ms each
    for ms in (200.0, 300.0):  # two moves' gates, outside any round, each replaying 8,192 stored rows
        iid = store.insert("interventions", {"status": "passed", "code": "", "params_json": "{}"})
        store.insert("backtests", {"intervention_id": iid, "mode": POPULATION_GATE, "n_rollouts": 8192, "ms": ms,
                                   "verdict": "passed"})
    b = search_budget(store)
    assert (b["candidate_rollouts"], b["incumbent_rollouts"]) == (0, 0)
    assert b["replay_rollouts_scored"] == 2 * 8192
    assert b["search_rollouts"] == pytest.approx((200 + 300) / 50)
    assert b["by_mode"][POPULATION_GATE] == {"backtests": 2, "rollouts": 0, "ms": 500.0}


def test_a_real_round_s_probes_are_counted(store):
    run_round(context(store, probe=make_probe(groups=2, group_size=4)))
    probes = store.rows("SELECT n_rollouts FROM backtests WHERE mode = 'probe' AND n_rollouts > 0")
    assert probes, "the round probed nothing"
    b = search_budget(store)
    assert b["candidate_rollouts"] == sum(p["n_rollouts"] for p in probes)
    assert b["incumbent_rollouts"] == max(p["n_rollouts"] for p in probes)
    assert b["search_rollouts"] >= b["candidate_rollouts"] + b["incumbent_rollouts"]
    facts = search_facts(store)  # the report's section reads the same numbers
    (rnd,) = facts["rounds"]
    assert rnd["tried"] == rnd["passed"] + rnd["inconclusive"] + rnd["failed"] > 0
    md = "\n".join(search_lines({"coevolve": [{"seed": 0, "search": facts}]}))
    assert f"| coevolve s0 | 1 | 0 | 0 | 0 | {rnd['tried']} | {rnd['passed']} |" in md and rnd["error"] is None
    assert "- v1 (active; children" in md and ", ".join(rnd["knobs"]) in md
    assert probe_rollouts(store.path.parent) == math.ceil(b["search_rollouts"])  # what the control arm gets


def test_a_round_that_stopped_on_an_error_is_counted_and_its_error_shown(store, monkeypatch):
    """A round that raises proposes nothing: the report must say it failed, not show an empty
    round (else a run whose every round raised would read as an idle search)."""

    def broken(*a, **k):
        raise RuntimeError("the proposer broke")

    monkeypatch.setattr(schedule, "plan", broken)
    out = run_round(context(store, probe=make_probe())).summary
    assert out["error"] == "RuntimeError: the proposer broke"
    (rnd,) = search_facts(store)["rounds"]
    assert rnd["tried"] == 0 and rnd["error"] == "RuntimeError: the proposer broke"
    md = "\n".join(search_lines({"coevolve": [{"seed": 0, "search": search_facts(store)}]}))
    assert "| coevolve s0 | 1 | 1 | 0 | 1 | 0 |" in md  # empty, not spent: it stopped on an error
    assert "1 round(s) stopped on an error; the first, at step" in md and "the proposer broke" in md


def test_the_tui_reads_the_same_frontier_and_shows_it(tmp_path):
    """The harness screen's frontier line: the engine's rule over the TUI's read-only connection."""
    import asyncio

    from backend.store import Store
    from backend.store.search import SearchOver
    from backend.store.reader import RunDB
    from tui_fixtures import build_run as tui_run, make_app, press, settle

    run_dir = tui_run(tmp_path / "run")
    s = Store.open(run_dir / "run.db", readonly=True)
    want = [m.to_dict() for m in frontier.frontier_now(s, 4)]
    s.close()
    db = RunDB(run_dir)
    assert [m.to_dict() for m in frontier.frontier_now(SearchOver(db), 4)] == want and want
    db.close()

    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=(100, 32)) as pilot:
            await settle(pilot)
            await press(pilot, "5")
            return str(app.screen.query_one("#h-frontier").render())
    text = asyncio.run(go())
    active = want[0]
    assert text.startswith(f"frontier: v{active['version']}● {active['score']:.2f}")
    assert text.count(" · ") + 1 == len(want) or len(want) == 1
