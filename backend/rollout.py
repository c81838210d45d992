"""From policy samples to scored, diagnosed rollout rows.

`collect` runs one step's generation (single- or multi-turn), then the
evaluator, the harness's rewards and diagnostics. Its output is plain data:
rows ready for the store and `Sample`s ready for the trainer. Nothing here
raises on a bad rollout: it becomes a row with a status and an error.
"""

from __future__ import annotations

import json
import math
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from backend.envs.base import Episode, Task, Verdict
from backend.harness.loader import Harness
from backend.harness.semantics import apply_harness, group_batch, is_trained, reward_threshold
from backend.store import dumps
from backend.store.rollouts import join_labels
from backend.types import Generation, Rollout


TRUNCATED = ("length", "tokens", "turns")
"""Finish reasons of a rollout cut off by its budget (tokens, or an episode's turns)."""


@dataclass
class Scored:
    task: Task
    group: int
    idx: int
    prompt_text: str
    prompt_ids: list[int]
    completion: str
    completion_ids: list[int]
    loss_mask: list[int]
    finish: str
    verdict: Verdict
    obs: dict
    turns: list[dict] = field(default_factory=list)
    reward: float = 0.0
    components: dict = field(default_factory=dict)
    labels: list[tuple[str, str]] = field(default_factory=list)
    gen_ms: float = 0.0
    eval_ms: float = 0.0
    status: str = "ok"
    error: str | None = None
    advantage: float = 0.0
    kept: bool = True
    encoded: dict[str, str] | None = None  # `judged_json`, when the rank that judged it encoded it
    asked: tuple[Future, int] | None = None
    """The harness worker's pending answer for the chunk this rollout was sent in while the rest
    of its batch decoded (`JudgedEarly`), and its place in that chunk."""


def as_rollout(s: Scored, max_new_tokens: int) -> Rollout:
    """What the harness sees of a sampled rollout (the documented contract, never the verdict)."""
    return Rollout(group=(s.group,), question=s.task.question, answer=s.task.answer, prompt=s.prompt_text,
                   completion=s.completion, finish=s.finish, completion_tokens=len(s.completion_ids),
                   max_new_tokens=max_new_tokens, obs=s.obs, turns=list(s.turns), domain=s.task.domain,
                   meta=s.task.meta, task_id=s.task.id)


def agreement(rewards: list[float], correct: list[bool], weights: dict) -> float:
    """Share of rollouts where the harness's reward and the evaluator agree."""
    if not rewards:
        return float("nan")
    thr = reward_threshold(weights)
    return sum((r > thr) == c for r, c in zip(rewards, correct)) / len(rewards)


def evaluate_all(items: list[Scored], env) -> float:
    """The evaluator's verdict and the domain's observations for every item; returns ms."""
    t0 = time.perf_counter()
    todo = [s for s in items if s.verdict is None]
    if todo and hasattr(env, "evaluate_many"):  # e.g. code: test runs in parallel sandboxes
        try:
            for s, v in zip(todo, env.evaluate_many([(s.task, s.completion) for s in todo])):
                s.verdict = v
        except Exception as e:
            for s in todo:
                s.verdict = Verdict(False, 0.0, "error", {"error": f"{type(e).__name__}: {e}"})
    for s in items:
        t1 = time.perf_counter()
        if s.verdict is None:
            try:
                s.verdict = env.evaluate(s.task, s.completion)
            except Exception as e:  # the evaluator must not kill the loop either
                s.verdict = Verdict(False, 0.0, "error", {"error": f"{type(e).__name__}: {e}"})
        if not s.obs:
            try:
                s.obs = env.observe(s.task, s.completion, s.verdict) or {}
            except Exception as e:
                s.obs = {"observe_error": f"{type(e).__name__}: {e}"}
        s.eval_ms = (time.perf_counter() - t1) * 1000
    return (time.perf_counter() - t0) * 1000


def score_all(items: list[Scored], harness: Harness, env, max_new_tokens: int,
              worker=None) -> tuple[float, float, float]:
    """Evaluator, and the harness applied to the batch (rewards, labels, filters, advantages):
    returns (eval_ms, harness_ms, 0.0). Raises HarnessError / WorkerFailure when the harness
    fails as a whole; the caller decides (a candidate fails, the active harness pauses the run).
    `worker`: as `apply_harness`'s (a data-parallel step passes the scores its ranks made).

    The harness never sees the verdict, so where the env's observations do not read it either
    (`observes_verdict` False: math) the harness worker scores the batch while the evaluator
    judges it here; harness_ms is then the wait for the worker after the evaluator finished."""
    if getattr(env, "observes_verdict", True):
        eval_ms = evaluate_all(items, env)
        t0 = time.perf_counter()
        out = apply_harness(harness, [as_rollout(s, max_new_tokens) for s in items], worker=worker,
                            known=answered(items))
        harness_ms = (time.perf_counter() - t0) * 1000
    else:
        for s in items:
            if not s.obs:
                s.obs = env.observe(s.task, s.completion, None) or {}
        with ThreadPoolExecutor(1, thread_name_prefix="harness") as pool:
            views = [as_rollout(s, max_new_tokens) for s in items]
            # the early answers are waited for on the pool's thread too, beside the evaluator
            scoring = pool.submit(lambda: apply_harness(harness, views, worker=worker, known=answered(items)))
            eval_ms = evaluate_all(items, env)
            t0 = time.perf_counter()
            out = scoring.result()
            harness_ms = (time.perf_counter() - t0) * 1000
    for s, o in zip(items, out.rollouts):
        s.reward, s.labels, s.kept, s.advantage = o.reward, o.labels, o.kept, o.advantage
        s.components = dict(o.components, **({"_errors": o.errors} if o.errors else {}))
    return eval_ms, harness_ms, 0.0


def answered(items: list[Scored]) -> list | None:
    """The harness worker's answers for the rollouts sent to it early (`Scored.asked`), None for
    the others; None for all when none was sent, or when an early request failed (the batch's
    own request then meets the failure again and reports it as it always has)."""
    if not any(s.asked for s in items):
        return None
    try:
        return [s.asked[0].result()[s.asked[1]] if s.asked else None for s in items]
    except Exception:  # noqa: BLE001 - a harness or worker failure: asked again below, with the batch
        return None


def group_stats(items: list[Scored], harness: Harness) -> dict:
    """Per-step group metrics of a scored batch (filters and advantages were applied by `score_all`)."""
    groups = group_batch([(s.group,) for s in items], [s.reward for s in items])
    dead = sum(g.dead for g in groups)
    kept_groups = sum(any(is_trained(items[i].kept, items[i].advantage) for i in g.members) for g in groups)
    n = len(groups) or 1
    rewards = [s.reward for s in items]
    return {
        "n_groups": len(groups), "dead_group_frac": dead / n, "frac_reward_zero_std": dead / n,
        "kept_groups": kept_groups,
        "reward_mean": statistics.fmean(rewards) if rewards else 0.0,
        "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
        "verdict_acc": sum(s.verdict.correct for s in items) / max(len(items), 1),
        "agreement": agreement(rewards, [s.verdict.correct for s in items], harness.weights),
        "mean_completion_tokens": statistics.fmean([len(s.completion_ids) for s in items]) if items else 0.0,
        "truncated_frac": sum(s.finish in TRUNCATED for s in items) / max(len(items), 1),
    }


def judged_json(s: Scored) -> dict[str, str]:
    """The JSON texts of a rollout's stored row that are fixed once it is judged: its verdict,
    its task and its completion's token ids (most of `rollout_row`'s cost). On N ranks the rank
    that judged a share encodes them there (`backend/ddp/share.py`: `Scored.encoded`), so rank 0
    does not encode every rank's rollouts on the step's critical path."""
    return {"verdict_json": dumps(s.verdict.to_dict()), "task_json": dumps(s.task.to_dict()),
            "token_ids_json": dumps(s.completion_ids)}


def rollout_row(s: Scored, step: int, harness_version: int, policy_version: int, max_new_tokens: int) -> dict:
    """The `rollouts` row of a scored rollout; its `judged_json` part is the one encoded where
    it was judged when there is one (the same text: one function encodes both)."""
    obs = dict(s.obs)
    obs["_max_new_tokens"] = max_new_tokens
    comps = {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in s.components.items()}
    return {
        "step": step, "domain": s.task.domain, "task_id": s.task.id, "group_idx": s.group, "idx": s.idx,
        "prompt": s.prompt_text, "completion": s.completion, "prompt_tokens": len(s.prompt_ids),
        "completion_tokens": len(s.completion_ids), "reward": s.reward, "rewards_json": dumps(comps),
        "verdict": s.verdict.status, "correct": int(bool(s.verdict.correct)),
        "verdict_score": s.verdict.score, "finish": s.finish,
        "status": s.status, "error": s.error, "harness_version": harness_version,
        "policy_version": policy_version, "gen_ms": s.gen_ms, "eval_ms": s.eval_ms,
        "obs_json": json.dumps(obs, default=str), "labels": join_labels(lbl for lbl, _ in s.labels),
        "advantage": s.advantage, "kept": int(s.kept), **(s.encoded or judged_json(s)),
    }


def diagnosis_rows(s: Scored, step: int, harness_version: int, validity: set) -> list[dict]:
    return [{"step": step, "label": lbl, "evidence": ev, "validity": int(lbl in validity),
             "harness_version": harness_version} for lbl, ev in s.labels]


def turn_rows(s: Scored) -> list[dict]:
    return [{"turn": i, "role": t.get("role", ""), "tool": t.get("tool"), "args_json": dumps(t.get("args")),
             "content": str(t.get("content", ""))[:20000], "tokens": t.get("tokens"), "ms": t.get("ms")}
            for i, t in enumerate(s.turns)]


def from_generation(prompt: tuple, gen: Generation) -> Scored:
    """A single-turn rollout, not judged yet: `prompt` is (group, index in the group, task,
    prompt text, prompt token ids), `gen` what the policy sampled for it."""
    g, i, task, text, pids = prompt
    return Scored(task=task, group=g, idx=i, prompt_text=text, prompt_ids=pids, completion=gen.text,
                  completion_ids=gen.ids, loss_mask=[1] * len(gen.ids), finish=gen.finish, verdict=None, obs={})


class JudgedEarly:
    """A single-turn batch's rollouts judged while the rest of the batch decodes: the fast engine
    hands over the rows that stopped (`FastGenerator.generate`'s `on_finished`), and the
    evaluator judges them (and `judged_json` encodes their stored row's judged part) on the loop's
    thread between decode launches, so `score_all` and the step's rows have only the rows that
    ran longest left to do. `prompts` as `from_generation` takes them, one a row.

    `ask`: sends judged rows to the harness worker and returns the future of its answer (a
    thread waits for it while the card decodes; `Scored.asked`); None: the harness scores the
    whole batch after generation."""

    def __init__(self, prompts: list[tuple], env, ask: Callable[[list[Scored]], Future] | None = None):
        self.prompts, self.env, self.ask = prompts, env, ask
        self.judged: dict[int, tuple[Generation, Scored]] = {}

    def __call__(self, rows: list[int], gens: list[Generation]) -> None:
        batch = [from_generation(self.prompts[r], g) for r, g in zip(rows, gens)]
        evaluate_all(batch, self.env)
        for s in batch:  # their stored row's judged part too, while the card decodes
            s.encoded = judged_json(s)
        if self.ask is not None:
            answer = self.ask(batch)
            for k, s in enumerate(batch):
                s.asked = (answer, k)
        self.judged.update(zip(rows, zip(gens, batch)))

    def items(self, gens: list[Generation]) -> list[Scored]:
        """The batch's rollouts: judged ones where the generation returned is the one judged (a
        batch drawn again after a pause judges its rows again), the rest not judged yet."""
        out = []
        for r, (p, g) in enumerate(zip(self.prompts, gens)):
            early = self.judged.get(r)
            out.append(early[1] if early is not None and early[0] is g else from_generation(p, g))
        return out


def asking(harness: Harness, max_new_tokens: int, pool: ThreadPoolExecutor):
    """`JudgedEarly`'s `ask`: judged rows go to this process's harness worker from `pool`'s thread,
    the same request `score_all` makes for the batch (`apply_harness` takes the answers as known).
    Once one such request fails (a harness over its time limit, a worker that died), the chunks
    after it are not sent: the batch's own request meets the failure once more, not once a chunk."""
    from backend.harness.client import shared_worker

    worker = shared_worker()
    failed = threading.Event()

    def send(views: list[dict]):
        if failed.is_set():
            raise EarlyScoringSkipped("an earlier chunk's request failed")
        try:
            return worker.apply(harness.code, harness.spec.weights, views)
        except Exception:
            failed.set()
            raise
    return lambda batch: pool.submit(send, [as_rollout(s, max_new_tokens).view() for s in batch])


class EarlyScoringSkipped(RuntimeError):
    """A chunk of early rows not sent to the harness worker (`asking`); the batch's request scores them."""


def from_episode(ep: Episode, task: Task, group: int, idx: int, prompt_text: str, prompt_ids: list[int]) -> Scored:
    return Scored(task=task, group=group, idx=idx, prompt_text=prompt_text, prompt_ids=prompt_ids,
                  completion=ep.completion, completion_ids=ep.completion_ids, loss_mask=ep.loss_mask,
                  finish=ep.finish, verdict=ep.verdict, obs=dict(ep.obs), turns=list(ep.turns))
