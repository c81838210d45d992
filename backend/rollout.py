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
import time
from dataclasses import dataclass, field

from backend.envs.base import Episode, Task, Verdict
from backend.harness.loader import Harness, RolloutView, advantages
from backend.store import dumps


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


def view_of(s: Scored, max_new_tokens: int) -> RolloutView:
    return RolloutView(question=s.task.question, answer=s.task.answer, prompt=s.prompt_text,
                       completion=s.completion, finish=s.finish, completion_tokens=len(s.completion_ids),
                       max_new_tokens=max_new_tokens, obs=s.obs, turns=tuple(s.turns), domain=s.task.domain,
                       meta=s.task.meta, task_id=s.task.id)


def reward_threshold(weights: dict) -> float:
    """A reward above half the best possible total counts as 'the harness says right'."""
    return 0.5 * sum(w for w in weights.values() if w > 0)


def agreement(rewards: list[float], correct: list[bool], weights: dict) -> float:
    """Share of rollouts where the harness's reward and the evaluator agree."""
    if not rewards:
        return float("nan")
    thr = reward_threshold(weights)
    return sum((r > thr) == c for r, c in zip(rewards, correct)) / len(rewards)


def score_all(items: list[Scored], harness: Harness, env, max_new_tokens: int) -> tuple[float, float]:
    """Evaluator, rewards, diagnostics for every item; returns (eval_ms, score_ms, diagnose_ms)."""
    t_eval = t_score = t_diag = 0.0
    todo = [s for s in items if s.verdict is None]
    if todo and hasattr(env, "evaluate_many"):  # e.g. code: test runs in parallel sandboxes
        t0 = time.perf_counter()
        try:
            for s, v in zip(todo, env.evaluate_many([(s.task, s.completion) for s in todo])):
                s.verdict = v
        except Exception as e:
            for s in todo:
                s.verdict = Verdict(False, 0.0, "error", {"error": f"{type(e).__name__}: {e}"})
        t_eval += time.perf_counter() - t0
    for s in items:
        t0 = time.perf_counter()
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
        t1 = time.perf_counter()
        v = view_of(s, max_new_tokens)
        s.reward, s.components = harness.score(v)
        t2 = time.perf_counter()
        s.labels = harness.diagnose(v)
        t3 = time.perf_counter()
        s.eval_ms = (t1 - t0) * 1000
        t_eval += t1 - t0
        t_score += t2 - t1
        t_diag += t3 - t2
    return t_eval * 1000, t_score * 1000, t_diag * 1000


def group_stats(items: list[Scored], harness: Harness) -> dict:
    """Apply filters and the advantage rule in place; return per-step group metrics."""
    groups: dict[int, list[Scored]] = {}
    for s in items:
        groups.setdefault(s.group, []).append(s)
    f = harness.filters
    adv = harness.advantage
    invalid = harness.validity
    dead = kept_groups = 0
    for members in groups.values():
        rewards = [m.reward for m in members]
        is_dead = max(rewards) - min(rewards) < 1e-9
        dead += is_dead
        for m in members:
            m.kept = True
            if f.get("drop_truncated") and m.finish == "length":
                m.kept = False
            if f.get("drop_invalid") and any(lbl in invalid for lbl, _ in m.labels):
                m.kept = False
        if is_dead and f.get("drop_dead_groups"):
            for m in members:
                m.kept = False
        live = [m for m in members if m.kept]
        if len(live) >= 2:
            advs = advantages([m.reward for m in live], adv.get("rule", "group_std"), float(adv.get("eps", 1e-6)))
            for m, a in zip(live, advs):
                m.advantage = a
            kept_groups += any(abs(a) > 0 for a in advs)  # groups that carry a learning signal
        else:
            for m in live:
                m.kept = False
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
        "truncated_frac": sum(s.finish in ("length", "tokens", "turns") for s in items) / max(len(items), 1),
    }


def rollout_row(s: Scored, step: int, harness_version: int, policy_version: int, max_new_tokens: int) -> dict:
    obs = dict(s.obs)
    obs["_max_new_tokens"] = max_new_tokens
    comps = {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in s.components.items()}
    return {
        "step": step, "domain": s.task.domain, "task_id": s.task.id, "group_idx": s.group, "idx": s.idx,
        "prompt": s.prompt_text, "completion": s.completion, "prompt_tokens": len(s.prompt_ids),
        "completion_tokens": len(s.completion_ids), "reward": s.reward, "rewards_json": dumps(comps),
        "verdict": s.verdict.status, "correct": int(bool(s.verdict.correct)),
        "verdict_score": s.verdict.score, "verdict_json": dumps(s.verdict.to_dict()), "finish": s.finish,
        "status": s.status, "error": s.error, "harness_version": harness_version,
        "policy_version": policy_version, "gen_ms": s.gen_ms, "eval_ms": s.eval_ms,
        "task_json": dumps(s.task.to_dict()), "obs_json": json.dumps(obs, default=str),
        "token_ids_json": dumps(s.completion_ids), "labels": ",".join(sorted({l for l, _ in s.labels})),
    }


def diagnosis_rows(s: Scored, step: int, harness_version: int, validity: set) -> list[dict]:
    return [{"step": step, "label": lbl, "evidence": ev, "validity": int(lbl in validity),
             "harness_version": harness_version} for lbl, ev in s.labels]


def turn_rows(s: Scored) -> list[dict]:
    return [{"turn": i, "role": t.get("role", ""), "tool": t.get("tool"), "args_json": dumps(t.get("args")),
             "content": str(t.get("content", ""))[:20000], "tokens": t.get("tokens"), "ms": t.get("ms")}
            for i, t in enumerate(s.turns)]


def from_episode(ep: Episode, task: Task, group: int, idx: int, prompt_text: str, prompt_ids: list[int]) -> Scored:
    return Scored(task=task, group=group, idx=idx, prompt_text=prompt_text, prompt_ids=prompt_ids,
                  completion=ep.completion, completion_ids=ep.completion_ids, loss_mask=ep.loss_mask,
                  finish=ep.finish, verdict=ep.verdict, obs=dict(ep.obs), turns=list(ep.turns))
