"""Paired trials: a curriculum change is judged by training policy copies under it
and under the incumbent from one snapshot, on the validation set; the live policy, its
optimizer and what training does next are untouched (trial rollouts are budget, not training).

A real engine at tiny sizes, in process, training the tiny random Llama of tests/tiny_llama.py (the
default model's tokenizer, 2 layers of width 32) rather than the embedded model: the checks are
exact equalities of weights, optimizer state and step metrics, which hold or break alike whatever
the weights (a trial that skips restoring the weights, the optimizer or the micro-batch fails
them here too), in about 10 s instead of 50.
"""

from __future__ import annotations

import copy

import pytest
import torch

from backend import evolve_hooks as hooks
from backend.config import load_config
from backend.evolve import submit
from backend.evolve.backtest import trial_decision
from backend.loop import Engine
from backend.progress import StepProgress
from backend.runs import create_run, harness_code
from backend.types import TrialArm

from conftest import TINY, varying_reward_harness

pytestmark = pytest.mark.slow  # a real (tiny) model trained in process


def _state(engine) -> tuple[dict, dict]:
    params = {n: p.detach().clone() for n, p in engine.lm.model.named_parameters() if p.requires_grad}
    return params, copy.deepcopy(engine.trainer.opt.state_dict())  # its tensors are the live ones


def _same(a: tuple[dict, dict], b: tuple[dict, dict]) -> bool:
    if a[0].keys() != b[0].keys() or any(not a[0][k].equal(b[0][k]) for k in a[0]):
        return False
    sa, sb = a[1]["state"], b[1]["state"]
    return sa.keys() == sb.keys() and all(
        all(torch.equal(sa[i][k], sb[i][k]) if torch.is_tensor(sa[i][k]) else sa[i][k] == sb[i][k] for k in sa[i])
        for i in sa)


def _engine(tmp_path, name: str, trials: str, model: str) -> Engine:
    harness = tmp_path / "harness.py"
    if not harness.exists():
        varying_reward_harness(tmp_path)
    cfg = load_config(None, [*TINY, f"harness='{harness}'", "eval.n_val=3", "eval.n_test=1", "evolve.trial_steps=1",
                             f"evolve.trials='{trials}'", "model.threads=1", f"model.name='{model}'"])
    store = create_run(tmp_path / name, cfg, harness_code(cfg))
    return Engine(tmp_path / name, cfg, store, quiet=True)


def test_a_curriculum_change_gets_a_trial_that_leaves_training_untouched(tmp_path, tiny_model):
    engine = _engine(tmp_path, "trial", "on", tiny_model)
    engine.train_step(1, StepProgress(3, quiet=True).start(1))  # an optimizer with state to restore
    before = _state(engine)
    harder = engine.harness.code.replace('"level": 1}', '"level": 2}')
    assert harder != engine.harness.code
    res = submit(hooks.context(engine, 1), harder, title="Harder curriculum level")
    bt = engine.store.rows("SELECT mode, n_rollouts, n, metric, verdict, reason, metrics_json FROM backtests")[-1]
    assert bt["mode"] == "trial", bt
    assert bt["metric"] == "validation accuracy" and bt["n"] == 3  # paired over the 3 validation problems
    assert bt["n_rollouts"] == 1 * 2 * 2 + 3  # one step of 2 tasks x 2 rollouts, then 3 validation answers
    assert res.status in ("passed", "inconclusive", "failed") and "trial (1 steps, validation)" in bt["reason"]
    assert _same(before, _state(engine)), "the trial changed the live policy or its optimizer"
    # ... so the next training step is the one a run without the trial takes
    step2 = engine.train_step(2, StepProgress(3, quiet=True).start(2))
    plain = _engine(tmp_path, "plain", "off", tiny_model)
    plain.train_step(1, StepProgress(3, quiet=True).start(1))
    ref = plain.train_step(2, StepProgress(3, quiet=True).start(2))
    assert step2["grad_norm"] > 0  # the step trained (the varying reward keeps groups alive)
    for k in ("loss", "grad_norm", "entropy", "tokens"):
        assert step2[k] == ref[k], k
    assert _same(_state(engine), _state(plain))


def test_without_trials_a_curriculum_change_stays_inconclusive_and_says_why(tmp_path):
    from synthetic_run import build_run

    store = build_run(tmp_path / "run.db", steps=2)
    from backend.evolve import EvolveContext
    from backend.harness.loader import Harness
    from backend.config import RunConfig
    from synthetic_run import StandIn

    code = store.get("harness_versions", store.run()["harness_version"])["code"]
    ctx = EvolveContext(store=store, cfg=RunConfig(), step=2, harness_version=store.run()["harness_version"],
                        harness=Harness.from_code(code), policy=StandIn(lambda h, n: []))
    res = submit(ctx, code.replace('"level": 1}', '"level": 2}'), title="Harder curriculum level")
    assert res.status == "inconclusive"
    assert "needs a trial" in res.reason and "evolve.trials is off" in res.reason


def test_trial_decision_pairs_by_problem():
    old = TrialArm("a", [f"t{i}" for i in range(200)], [i < 40 for i in range(200)], 0, 0.0)
    new = TrialArm("b", old.task_ids, [i < 90 for i in range(200)], 0, 0.0)
    dec = trial_decision(old, new, 0.02, 0.1)
    assert dec.status == "passed" and dec.n == 200 and abs(dec.effect - 0.25) < 1e-9
    assert trial_decision(old, old, 0.02, 0.1).status == "inconclusive"
    with pytest.raises(ValueError):
        trial_decision(old, TrialArm("c", old.task_ids[::-1], new.correct, 0, 0.0), 0.02, 0.1)


def test_an_out_of_memory_retry_inside_a_trial_caps_only_the_trial(tmp_path, tiny_model, monkeypatch):
    """An out-of-memory retry inside a trial halves the micro-batch; were the cap to stay with the
    run, every later step would differ from a run without the trial. The trial's retries end
    with the trial."""
    engine = _engine(tmp_path, "trial", "on", tiny_model)
    engine.train_step(1, StepProgress(3, quiet=True).start(1))
    engine.cfg.train.micro_batch = 8  # no cap: planned freely, as in a run that never met an OOM
    plan, micro, gen = copy.copy(engine.trainer.plan), engine.cfg.train.micro_batch, engine.generator.batch_size
    step, generate = engine.trainer.step, engine.generator.generate
    failed = {"train": False, "generate": False}

    def oom_once(kind, real):
        def call(*a, **k):
            if not failed[kind]:
                failed[kind] = True
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (test)")
            return real(*a, **k)
        return call

    monkeypatch.setattr(engine.trainer, "step", oom_once("train", step))
    monkeypatch.setattr(engine.generator, "generate", oom_once("generate", generate))
    harder = engine.harness.code.replace('"level": 1}', '"level": 2}')
    submit(hooks.context(engine, 1), harder, title="Harder curriculum level")
    assert failed == {"train": True, "generate": True}  # the trial met both, and its retries lowered both
    bt = engine.store.rows("SELECT mode FROM backtests")[-1]
    assert bt["mode"] == "trial"
    assert engine.trainer.plan == plan and engine.cfg.train.micro_batch == micro
    assert engine.generator.batch_size == gen
