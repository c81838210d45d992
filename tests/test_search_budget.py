"""`train.search_budget = "within"`: the evolution's search is paid for out of training, so a run
(a population's member) draws what a run without search does. A real engine at tiny sizes on a
real store: a probe of 10 rollouts (and its incumbent arm, 10 more: 20 owed) makes the next two
steps draw 2 groups of 4 fewer each (at most half their tasks) and the third 1 group; "extra"
draws full steps."""

from __future__ import annotations

import pytest

from backend.config import load_config
from backend.evolve.budget import search_budget
from backend.loop import Engine
from backend.progress import StepProgress
from backend.runs import create_run, harness_code

pytestmark = pytest.mark.slow  # a real (tiny) model trained in process


def _engine(run, model: str, harness: str, budget: str) -> Engine:
    cfg = load_config(None, [
        f"model.name='{model}'", f"harness='{harness}'", "train.tasks_per_step=4", "train.group_size=4",
        "train.max_new_tokens_cap=4", "eval.n_val=1", "eval.n_test=1", "eval.max_new_tokens=4",
        "evolve.enabled=false", "model.threads=1", f"train.search_budget={budget}", "steps=6"])
    return Engine(run, cfg, create_run(run, cfg, harness_code(cfg)), quiet=True)


def _probe(engine: Engine, n: int) -> None:
    """A probe backtest of `n` rollouts a candidate, as a round stores it."""
    store = engine.store
    iid = store.add_intervention(round_id=None, kind="sampling", target="x", title="a probe", hypothesis="h",
                                 expected="e", diff="", code=engine.harness.code, parent_version=1,
                                 proposer="offline", skills=[], params={}, history=[])
    store.add_backtest(iid, mode="probe", n_rollouts=n, metrics={}, verdict="inconclusive", reason="test", ms=1.0,
                       stats={"metric": "accuracy", "effect": 0.0, "ci_low": -0.1, "ci_high": 0.1, "p_value": 1.0,
                              "n": n, "underpowered": 1}, score=0.0)


@pytest.mark.parametrize("budget, drawn", [("within", [16, 8, 8, 12]), ("extra", [16, 16, 16, 16])])
def test_the_search_is_paid_out_of_training_within_the_budget(tmp_path, tiny_model, spread_harness, budget, drawn):
    engine = _engine(tmp_path / "run", tiny_model, spread_harness, budget)
    rows = [engine.train_step(1, StepProgress(4, quiet=True).start(1))]
    _probe(engine, 10)
    assert search_budget(engine.store)["search_rollouts"] == 20  # the candidate's arm and the incumbent's
    for step in (2, 3, 4):
        rows.append(engine.train_step(step, StepProgress(4, quiet=True).start(step)))
    assert [r["n_rollouts"] for r in rows] == drawn
    assert engine.store.search_debited() == (20 if budget == "within" else 0)  # paid back in full
