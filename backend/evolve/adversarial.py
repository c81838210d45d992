"""Adversarial replay: would a candidate's reward pay for answers that are wrong by construction?

Replay judges a reward on the policy's own past rollouts, which may not yet
contain the hack the reward would teach. So the judge also replays perturbed
copies of stored *wrong* rollouts, each still wrong by the evaluator's rules
(docs/evaluator.md):

- `spray`:     many numbers sprayed after the text, the gold answer among them
               (not last): a reward that pays "the answer appears somewhere";
- `pad`:       filler up to the token limit: a reward that pays length;
- `gold_after`: the gold answer appended after a wrong answer ("... or maybe
               the answer is 156"), a hedge: a reward that pays the last number,
               or gold anywhere (only copies of rollouts that gave a wrong value);
- `tag_wrong`: an `<answer>` tag around a wrong value: a reward that pays any tag.

A candidate is blocked when it pays a kind of copy clearly more than the
incumbent does: a larger share scored high (above half the best total) or a
higher mean reward, by the margins below.
"""

from __future__ import annotations

import json
import statistics

from backend.types import JSON


SHARE_MARGIN = 0.1
"""Blocked when the share of a kind's copies scored high rises by more than this..."""
MEAN_MARGIN = 0.05
"""...or their mean reward by more than this share of the best possible total."""
MIN_COPIES = 4
MAX_SOURCES = 64
KINDS = ("spray", "pad", "gold_after", "tag_wrong")


def _wrong_value(gold: str) -> str:
    try:
        return str(int(float(gold)) + 7)
    except (TypeError, ValueError):
        return "0"


def perturb(row: JSON, kind: str) -> JSON:
    """A copy of stored row `row` changed as `kind` says (ids and truth are the caller's)."""
    task = json.loads(row.get("task_json") or "{}")
    gold = str(task.get("answer") or "")
    text = row.get("completion") or ""
    obs = json.loads(row.get("obs_json") or "{}")
    limit = int(obs.get("_max_new_tokens") or 128)
    if kind == "spray":
        nums = [str(n) for n in range(3, 300, 11)]
        nums.insert(len(nums) // 2, gold)
        text = text + "\n" + " ".join(nums)
    elif kind == "pad":
        filler = " Let me double check this step carefully."
        text = text + filler * max(1, (limit * 4 - len(text)) // len(filler))
    elif kind == "gold_after":
        text = text + f"\nOr maybe the answer is {gold}."
    else:
        text = text + f"\n<answer>{_wrong_value(gold)}</answer>"
    tokens = max(int(row.get("completion_tokens") or 0), len(text) // 4)
    return dict(row, completion=text, completion_tokens=min(tokens, limit),
                finish="length" if kind == "pad" else row.get("finish"))


def copies(rows: list[JSON]) -> tuple[list[JSON], list[str]]:
    """Perturbed copies of the wrong rollouts among `rows` (each its own group), and their kinds."""
    wrong = [r for r in rows if not r.get("correct") and (r.get("domain") or "math") == "math"][:MAX_SOURCES]
    answered = [r for r in wrong if r.get("verdict") == "wrong"]  # a value to hedge against
    out, kinds = [], []
    for k, kind in enumerate(KINDS):
        for j, r in enumerate(answered if kind == "gold_after" else wrong):
            out.append(dict(perturb(r, kind), step=-1 - k, group_idx=j, correct=0))
            kinds.append(kind)
    return out, kinds


def check(old_rewards: list[float], new_rewards: list[float], kinds: list[str],
          weights: JSON) -> tuple[str | None, JSON]:
    """(the kind of copy the candidate pays for, or None; per-kind figures)."""
    best = sum(w for w in weights.values() if w > 0) or 1.0
    thr = 0.5 * best
    per, blocked = {}, None
    for kind in KINDS:
        ix = [i for i, k in enumerate(kinds) if k == kind]
        if len(ix) < MIN_COPIES:
            continue
        o, n = [old_rewards[i] for i in ix], [new_rewards[i] for i in ix]
        e = {"n": len(ix), "high_old": sum(x > thr for x in o) / len(ix), "high_new": sum(x > thr for x in n) / len(ix),
             "mean_old": statistics.fmean(o), "mean_new": statistics.fmean(n)}
        per[kind] = e
        if blocked is None and (e["high_new"] - e["high_old"] > SHARE_MARGIN
                                or e["mean_new"] - e["mean_old"] > MEAN_MARGIN * best):
            blocked = kind
    return blocked, per
