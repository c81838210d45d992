"""Data-parallel runs (backend/ddp) on the CPU: 2 gloo processes of this machine.

A tiny random Llama (the default model's tokenizer, 2 layers of width 32) keeps
each rank's start and step to a few seconds; the ranks, the messages, the
collectives and the loop are the real ones."""

from __future__ import annotations

import dataclasses
import multiprocessing
import pickle
import random
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from backend.config import load_config
from backend.ddp.balance import balance
from backend.ddp.comm import DistributedError, split
from backend.ddp.launch import check, ranks, world_size
from backend.store import Store


def _cfg(model: str, *extra: str):
    return load_config(None, [f"model.name={model}", "model.device=cpu", "model.threads=1", "model.engine=hf",
                              "train.gpus=2", "train.micro_batch=4", "train.lr=1e-3", *extra])


def _lora(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _slots(env, harness, n_tasks: int, group: int) -> list[tuple]:
    """A step's rollouts as the loop hands them to the ranks (group, index, task, chat messages),
    with a short user message (no system prompt) to keep the tiny model's passes short."""
    tasks = env.sample_tasks(n_tasks, random.Random(0), harness.curriculum)
    return [(g, i, task, [{"role": "user", "content": task.question[:40]}])
            for g, task in enumerate(tasks) for i in range(group)]


def test_two_ranks_score_and_take_the_one_process_update(tiny_model, spread_harness):
    """One step's rollouts and two updates through rank 0's Leader (2 gloo ranks), against one
    process: the harness applied to the whole batch gives the same rewards, labels, filters and
    advantages when each rank judged and scored its own share; the updates (trained rollouts
    dealt out by `balance`, the second moving some of rank 0's to rank 1) equal
    GRPOTrainer.step on the whole batch from the same initial adapter.

    Tolerance: the ranks sum partial gradients in another order (micro-batches of 3 and 3 against
    4 and 2 here), so the gradients differ by float32 rounding, which Adam's division by sqrt(v)
    can enlarge where a gradient is near zero: the weights (moved by up to 2e-3 over the two
    updates, lr 1e-3) came out within 4.4e-7 of the one-process ones. 1e-5 leaves room for that
    and fails a real difference: with the gradients averaged instead of summed, not all-reduced
    at all, or rank 1 dividing by its own token count, weights differed by about 1e-3 (each
    checked by editing backend/ddp once). The loss and gradient norm catch a scale error too."""
    from backend.envs import make_env
    from backend.harness.loader import Harness
    from backend.policy.generate import make_generator
    from backend.policy.grpo import GRPOTrainer, Sample
    from backend.policy.load import load_fast_policy
    from backend.policy.model import task_prompts
    from backend.rollout import Scored, rollout_row, score_all

    cfg = _cfg(tiny_model, f"harness={spread_harness}")
    harness = Harness.from_code(open(spread_harness).read())
    env = make_env(cfg)
    with ranks(cfg, adapter=None) as leader:
        lm = load_fast_policy(cfg.model, None, seed=cfg.seed)
        slots = _slots(env, harness, 3, 2)
        start = _lora(lm.model)
        leader.attach(SimpleNamespace(lm=lm, trainer=GRPOTrainer(lm.model, lm.tokenizer, cfg.train, lm.device),
                                      env=env,
                                      control=SimpleNamespace(checkpoint=lambda *a, **k: None, stop_only=nullcontext),
                                      generate_fn=make_generator("hf", lm.model, lm.tokenizer, lm.device).generate))
        torch.manual_seed(1)
        items, scores = leader.rollouts(slots, harness, 5, 1.0, 1.0)
        assert leader.shares == [(0, 3), (3, 6)] and len(items) == 6
        assert [(s.group, s.idx) for s in items] == [(p[0], p[1]) for p in slots]
        # rank 1 built its share's prompts (task 1's group is split between the ranks) as rank 0 would
        assert [(s.prompt_text, s.prompt_ids) for s in items] == \
            [(p[3], p[4]) for p in task_prompts(lm.tokenizer, slots)]
        assert all(s.verdict is not None for s in items)  # rank 1 judged its share
        score_all(items, harness, env, 5, worker=scores)
        assert all(s.encoded for s in items)  # each rank encoded its share's row texts
        assert [rollout_row(s, 1, 1, 0, 5) for s in items] == \
            [rollout_row(dataclasses.replace(s, encoded=None), 1, 1, 0, 5) for s in items]
        alone = [Scored(task=s.task, group=s.group, idx=s.idx, prompt_text=s.prompt_text, prompt_ids=s.prompt_ids,
                        completion=s.completion, completion_ids=s.completion_ids, loss_mask=s.loss_mask,
                        finish=s.finish, verdict=None, obs={}) for s in items]
        score_all(alone, harness, env, 5)  # one process: this one's harness worker scores every rollout
        assert [(s.reward, s.labels, s.kept, s.advantage, s.verdict.status, s.components) for s in items] == \
            [(s.reward, s.labels, s.kept, s.advantage, s.verdict.status, s.components) for s in alone]
        updates = [  # (advantage per item, trained items): the second is all rank 0's, balance moves some
            ([0.9, -0.4, 0.0, 1.2, -0.7, 0.3], [0, 1, 3, 4, 5]),
            ([0.5, -1.0, 0.8, 0.0, 0.0, 0.0], [0, 1, 2]),
        ]
        got, shapes = [], []
        for adv, chosen in updates:
            trained = [items[k] for k in chosen]
            samples = [Sample(items[k].prompt_ids, items[k].completion_ids, items[k].loss_mask, adv[k])
                       for k in chosen]
            got.append(leader.update(items, trained, samples, None))
            shapes.append([r["shape"] for r in leader.times["by_rank"]])
        after = _lora(lm.model)

    ref = load_fast_policy(cfg.model, None, seed=cfg.seed)
    assert all(torch.equal(ref_p, start[n]) for n, ref_p in _lora(ref.model).items())
    trainer = GRPOTrainer(ref.model, ref.tokenizer, cfg.train, ref.device)
    want = []
    for adv, chosen in updates:
        want.append(trainer.step([Sample(items[k].prompt_ids, items[k].completion_ids, items[k].loss_mask, adv[k])
                                  for k in chosen]))
    moved = max(float((after[n] - start[n]).abs().max()) for n in after)
    assert moved > 1e-4  # the updates did something
    for n, p in _lora(ref.model).items():
        assert torch.allclose(after[n], p, rtol=0, atol=1e-5), n
    for g, w in zip(got, want):
        assert g["loss"] == pytest.approx(w["loss"], abs=1e-6)
        assert g["grad_norm"] == pytest.approx(w["grad_norm"], rel=1e-5)
        assert g["tokens"] == w["tokens"]
    # each rank reports the micro-batches its update ran (bench_ddp sets them beside one process's)
    for (_, chosen), by_rank in zip(updates, shapes):
        assert sum(sh["rows"] for sh in by_rank) == len(chosen)
        lengths = [len(items[k].prompt_ids) + len(items[k].completion_ids) for k in chosen]
        assert sum(sh["seq_tokens"] for sh in by_rank) == sum(lengths)
        for sh in by_rank:
            assert sh["micro_batch"] == 4 and sh["micro_batches"] == -(-sh["rows"] // 4) == len(sh["pass_ms"])
            assert sh["seq_tokens"] <= sh["padded_tokens"] <= sh["rows"] * sh["max_len"]
    alone = trainer.last_shape  # one process, the second update's whole batch: 3 rows, one micro-batch
    lengths = [len(items[k].prompt_ids) + len(items[k].completion_ids) for k in updates[1][1]]
    assert (alone["rows"], alone["micro_batches"], alone["max_len"]) == (3, 1, max(lengths))
    assert alone["padded_tokens"] == 3 * max(lengths) and alone["seq_tokens"] == sum(lengths)


def test_a_share_judged_on_a_rank_stores_the_rows_one_process_would(tmp_path):
    """Rank 1's side (`share.judge`: verdicts, scores and the row texts it encodes), pickled as the
    channel carries it, then rank 0's (`judged_rollout`, the harness applied to the batch with
    `Prescored`): the rollout rows equal one process's, which judges, scores and encodes every
    rollout itself, and the rank's encoding is the one used. (No processes: the real ranks' path is
    checked in test_two_ranks_score_and_take_the_one_process_update.)"""
    from backend.config import load_config
    from backend.ddp.share import Prescored, judge, judged_rollout
    from backend.envs import make_env
    from backend.harness.loader import Harness, default_harness_path
    from backend.rollout import from_generation, rollout_row, score_all
    from backend.types import Generation

    code = default_harness_path("math").read_text()
    harness = Harness.from_code(code)
    env = make_env(load_config(None, []))
    tasks = env.sample_tasks(3, random.Random(0), harness.curriculum)
    prompts = [(g, i, t, f"prompt {g}", [1, 2, 3 + g]) for g, t in enumerate(tasks) for i in range(2)]
    gens = [Generation([5, 6, 7][:1 + k % 3], f"so <answer>{p[2].answer if k % 2 else 'x'}</answer>",
                       "stop" if k % 3 else "length") for k, p in enumerate(prompts)]
    judged = judge([from_generation(p, g) for p, g in zip(prompts, gens)], env, code, harness.weights, 16)
    judged = pickle.loads(pickle.dumps(judged))  # as the channel carries a rank's reply
    items = [judged_rollout(p, g, j) for p, g, j in zip(prompts, gens, judged)]
    score_all(items, harness, env, 16, worker=Prescored(code, [j.scores for j in judged]))
    alone = [from_generation(p, g) for p, g in zip(prompts, gens)]
    score_all(alone, harness, env, 16)

    def row(s) -> dict:  # eval_ms: each process's own timing of the evaluator
        return {k: v for k, v in rollout_row(s, 4, 2, 1, 16).items() if k != "eval_ms"}

    assert all(s.encoded for s in items) and not any(s.encoded for s in alone)
    assert [row(s) for s in items] == [row(s) for s in alone]
    assert {row(s)["correct"] for s in items} == {0, 1}  # both verdicts are among them


def test_balance_deals_every_trained_rollout_once_and_evens_the_work():
    costs = [[30, 10, 50, 20, 40], [], [5, 5]]
    plan = balance(costs)
    dealt = sorted(x for p in plan for x in p)
    assert dealt == sorted((r, k) for r, own in enumerate(costs) for k in range(len(own)))
    load = [sum(costs[r][k] for r, k in p) for p in plan]
    assert max(load) - min(load) <= max(max(c) for c in costs if c)
    assert plan[2][:2] == [(2, 0), (2, 1)]  # a rank under its share keeps all it generated
    assert balance([[1, 1], [1, 1]]) == [[(0, 0), (0, 1)], [(1, 0), (1, 1)]]  # even already: nothing moves


def test_a_run_on_two_ranks_stores_once_and_resumes(tiny_model, spread_harness, capsys):
    """The real loop on 2 ranks: rank 0 writes each rollout once; a resume loads the other rank
    from rank 0's checkpoint; no rank is left behind."""
    from backend import runs

    extra = (f"harness={spread_harness}", "train.tasks_per_step=3", "train.group_size=2",
             "train.max_new_tokens_cap=4", "eval.n_val=2", "eval.n_test=2", "eval.max_new_tokens=4",
             "eval.every=10", "evolve.enabled=false")
    run = runs.runs_root() / "ddp"
    _, s = runs.start(_cfg(tiny_model, "steps=1", *extra), run, quiet=True)
    assert s["status"] == "finished"
    _, s = runs.resume(run, steps=2, quiet=True)
    assert s["status"] == "finished"
    assert not multiprocessing.active_children()
    store = Store.open(run, create=False)
    try:
        rows = store.rows("SELECT step, group_idx, idx FROM rollouts")
        assert len(rows) == 2 * 3 * 2  # steps x tasks x group: written once, by rank 0
        assert len({(r["step"], r["group_idx"], r["idx"]) for r in rows}) == len(rows)
        steps = store.rows("SELECT step, n_groups, kept_groups FROM steps ORDER BY step")
        assert [r["step"] for r in steps] == [1, 2] and all(r["n_groups"] == 3 for r in steps)
        assert store.latest_policy_version()["step"] == 2
        assert store.run()["device"] == "2 x cpu"
    finally:
        store.close()
    from evotui.cli import main

    assert main(["runs"]) == 0
    assert " 2 x cpu " in next(x for x in capsys.readouterr().out.splitlines() if str(run) in x)


def test_settings_a_data_parallel_run_cannot_honour(tiny_model):
    cfg = _cfg(tiny_model)
    assert world_size(cfg) == 2
    with pytest.raises(DistributedError, match="tasks_per_step"):
        check(_cfg(tiny_model, "train.tasks_per_step=1"), 2)
    with pytest.raises(DistributedError, match="swe"):
        check(_cfg(tiny_model, "domain=swe"), 2)
    check(_cfg(tiny_model, "domain=swe"), 1)  # one process: anything goes


def test_gpus_flag_rejects_nonsense(capsys):
    from evotui.cli import main

    assert main(["run", "--headless", "--gpus", "two", "--steps", "1"]) == 2
    assert "--gpus expects a positive count or auto" in capsys.readouterr().err


def test_shares_are_contiguous_and_balanced():
    assert split(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert split(2, 2) == [(0, 1), (1, 2)]


def test_bench_ddp_runs_one_and_two_ranks(tiny_model, capsys):
    """`evotui bench --only ddp` end to end on 2 gloo processes (timings printed, never asserted)."""
    from backend.tools.bench import main

    args = ["--only", "ddp", "--gpus", "2", "--model", tiny_model, "--tasks", "1", "--group", "2",
            "--step-new", "4", "--steps", "1", "--micro", "2"]
    assert main(args, quick=True) == 0
    out = capsys.readouterr().out
    assert "GRPO step, 1 vs 2 CPU processes: rollouts/s" in out
    assert "2 rollouts on 1 process vs 4 on 2" in out and "section failed" not in out
    for phase in ("step, median of the steps after the first",
                  "wait for the other ranks", "by rank: generate", "by rank: update up to the all-reduce",
                  "trained rollouts the balance moved", "update: micro-batches x rows",
                  "update: tokens padded / own", "update: queueing, then waiting (ms)",
                  "update: padded tokens per second", "rest: messages to the ranks, weights",
                  "rest: filter (group statistics)", "rest: checkpoint", "rest: rows, step row, retention"):
        assert phase in out, phase


def test_bench_ddp_says_why_with_one_rank(capsys):
    from backend.tools.bench import main

    assert main(["--only", "ddp", "--gpus", "1"], quick=True) == 0
    assert "needs --gpus 2 or more (asked for 1)" in capsys.readouterr().out


def test_a_rank_that_cannot_load_is_one_clear_error(tiny_model, tmp_path):
    """Rank 1 fails to load (the checkpoint it is told to resume from is not there): rank 0
    raises one line naming the rank and why, and no rank is left behind."""
    with pytest.raises(DistributedError, match=r"^rank 1 failed: .*"):
        with ranks(_cfg(tiny_model), adapter=str(tmp_path / "no-such-checkpoint")):
            pass
    assert not multiprocessing.active_children()
