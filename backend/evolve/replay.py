"""The replay backtest: apply harnesses to stored rollouts exactly as training would, and judge.

**Replay.** Each harness (the incumbent and every candidate of a round) goes
through `backend.harness.semantics.apply_harness`, the same function the loop
scores a training batch with, so rewards, labels, filters, dead groups and
advantages come out as training would have made them. The harness code runs
only in the sandboxed harness worker, with a CPU limit per harness; a harness
that fails (does not load, crashes as a whole, runs over) fails alone.

**Adversarial copies.** Replay judges a reward on the policy's own past
rollouts, which may not yet contain the hack the reward would teach. So a
reward change is also replayed over perturbed copies of stored *wrong*
rollouts, each still wrong by the evaluator's rules (docs/evaluator.md):

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

**Judging** (`judge`): metrics and the pass/fail rule, as pure functions over
replay results. Names used (all per harness, on the same replayed rows):

- `agreement`: share of rollouts where "reward above half the best total"
  matches the evaluator's verdict (the same definition as steps.agreement).
- `auc`: P(a correct rollout outscores a wrong one); 0.5 = blind.
- `dead_frac`: share of groups whose rewards all tie (GRPO learns nothing).
- `adv_agreement`: in groups with mixed verdicts, share of kept rollouts whose
  advantage sign matches the verdict.
- invalid-high: rollouts a validity diagnostic flags (under either harness:
  a candidate cannot escape a guard by deleting it) that still score high.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from backend.harness.check import HarnessError
from backend.harness.client import WorkerFailure
from backend.harness.loader import Harness
from backend.harness.semantics import BatchOut, apply_harness, batch_from_rows, is_trained, reward_threshold
from backend.store.rollouts import split_labels
from backend.types import GroupKey

from .diagnose import auc
from .records import CopyFigures, InvalidFigures, ReplayMetrics, Status
from .rows import RolloutRow, rollout_rows
from .stats import ALPHA, Decision, Effect, decide, pair_up, paired_bootstrap


if TYPE_CHECKING:
    from backend.store import Store

HISTORY_GROUPS = 16
"""Groups from before the window replayed too, so a fix is not judged on recent rollouts alone."""
MAX_ROWS = 600


@dataclass
class Replayed:
    """One harness over the replayed rows: its output, or why it failed."""

    harness: Harness | None
    out: BatchOut | None
    error: str | None = None


def select_rows(store: Store, step: int, window: int, extra_ids: Iterable[int] = (),
                history_groups: int = HISTORY_GROUPS, max_rows: int = MAX_ROWS) -> list[RolloutRow]:
    """Rows to replay: the recent window (at most `max_rows`), whole groups spread over older
    history, and `extra_ids` (rollouts earlier promotions fixed), without duplicates."""
    recent = store.recent_rollouts(step - window, step, max_rows)
    older = store.groups_through(step - window)
    if older and history_groups:
        stride = max(1, len(older) // history_groups)
        for g_step, g_idx in older[::stride][:history_groups]:  # evenly spread, deterministic
            recent += store.group_rollouts(g_step, g_idx)
    recent += store.rollouts_by_id(extra_ids)
    seen, out = set(), []
    for r in sorted(rollout_rows(recent), key=lambda r: r["id"]):
        if r["id"] not in seen:
            seen.add(r["id"])
            out.append(r)
    return out


def replay_one(code: str, rows: list[RolloutRow], timeout_s: float) -> Replayed:
    """Apply `code` to `rows` through the worker. Never raises."""
    try:
        harness = Harness.from_code(code)
    except HarnessError as e:
        return Replayed(None, None, f"does not load: {e}"[:300])
    if not rows:
        return Replayed(harness, BatchOut([]))
    try:
        return Replayed(harness, apply_harness(harness, batch_from_rows(rows), limit_s=timeout_s))
    except (HarnessError, WorkerFailure) as e:
        return Replayed(harness, None, str(e)[:300])


def replay(codes: list[str], rows: list[RolloutRow], timeout_s: float) -> list[Replayed]:
    """Replay each harness over `rows`; one `Replayed` per code, in order."""
    return [replay_one(code, rows, timeout_s) for code in codes]


def mismatches(rows: list[RolloutRow], code: str) -> list[str]:
    """Differences between what training stored for `rows` and a replay of `code` over them
    (reward, labels, advantage): empty when replay reproduces training exactly."""
    res = replay_one(code, rows, 60.0)
    if res.out is None:
        return [f"replay failed: {res.error}"]
    out = []
    for r, o in zip(rows, res.out.rollouts):
        stored_labels = split_labels(r.get("labels"))
        if r["reward"] != o.reward or stored_labels != o.label_set or \
                (r.get("advantage") is not None and r["advantage"] != o.advantage):
            out.append(f"rollout {r['id']}: stored ({r['reward']}, {sorted(stored_labels)}, {r.get('advantage')})"
                       f" != replayed ({o.reward}, {sorted(o.label_set)}, {o.advantage})")
    return out


# ---------------------------------------------------------------- adversarial copies

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


def perturb(row: RolloutRow, kind: str) -> RolloutRow:
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
    out = row.copy()
    out["completion"], out["completion_tokens"] = text, min(tokens, limit)
    if kind == "pad":
        out["finish"] = "length"
    return out


def adversarial_copies(rows: list[RolloutRow]) -> tuple[list[RolloutRow], list[str]]:
    """Perturbed copies of the wrong rollouts among `rows` (each its own group), and their kinds."""
    wrong = [r for r in rows if not r.get("correct") and (r.get("domain") or "math") == "math"][:MAX_SOURCES]
    answered = [r for r in wrong if r.get("verdict") == "wrong"]  # a value to hedge against
    out, kinds = [], []
    for k, kind in enumerate(KINDS):
        for j, r in enumerate(answered if kind == "gold_after" else wrong):
            copy = perturb(r, kind)
            copy["step"], copy["group_idx"], copy["correct"] = -1 - k, j, 0
            out.append(copy)
            kinds.append(kind)
    return out, kinds


def adversarial_check(old_rewards: list[float], new_rewards: list[float], kinds: list[str],
                      weights: dict[str, float]) -> tuple[str | None, dict[str, CopyFigures]]:
    """(the kind of copy the candidate pays for, or None; per-kind figures)."""
    best = sum(w for w in weights.values() if w > 0) or 1.0
    thr = 0.5 * best
    per: dict[str, CopyFigures] = {}
    blocked = None
    for kind in KINDS:
        ix = [i for i, k in enumerate(kinds) if k == kind]
        if len(ix) < MIN_COPIES:
            continue
        o, n = [old_rewards[i] for i in ix], [new_rewards[i] for i in ix]
        e: CopyFigures = {"n": len(ix), "high_old": sum(x > thr for x in o) / len(ix),
                          "high_new": sum(x > thr for x in n) / len(ix),
                          "mean_old": statistics.fmean(o), "mean_new": statistics.fmean(n)}
        per[kind] = e
        if blocked is None and (e["high_new"] - e["high_old"] > SHARE_MARGIN
                                or e["mean_new"] - e["mean_old"] > MEAN_MARGIN * best):
            blocked = kind
    return blocked, per


# ---------------------------------------------------------------- judging a replayed candidate

BLOCK_SHARE = 0.25
"""A candidate whose reward scores more than this share of invalid rollouts high is blocked..."""
BLOCK_MARGIN = 0.05
"""...when that is also this much above the incumbent, and at least BLOCK_MIN rollouts."""
BLOCK_MIN = 2
MAX_ERROR_SHARE = 0.05
MAX_FALSE_FIRE = 0.2
MIN_KEPT = 0.2
MIN_TRAINED_GROUPS = 0.1
"""`evolve.min_trained_groups`' default: a reward change after which training would learn from
fewer than this share of the replayed groups (and from under half of what the incumbent learns
from) is not judged by replay. `signal` scores shaping among answers the evaluator judged alike
as noise, so removing it looks like a gain; yet where correct answers are rare that shaping is
nearly all a step trains on, and what training on almost nothing does is not in the stored
rollouts (docs/gate.md)."""


@dataclass(frozen=True)
class ReplayView:
    """One harness over the replayed rows as training would have applied it (`view`): per
    rollout (in row order) its reward, labels, whether it scores high, is kept and its
    advantage; per group its members and whether it is dead; and the summary figures."""

    kept: list[bool]
    adv: list[float]
    rewards: list[float] = field(default_factory=list)
    labels: list[set[str]] = field(default_factory=list)
    high: list[bool] = field(default_factory=list)
    """Reward above half the best possible total: the harness says right."""
    validity: set[str] = field(default_factory=set)
    """The harness's validity labels (guards)."""
    dead: set[GroupKey] = field(default_factory=set)
    groups: dict[GroupKey, list[int]] = field(default_factory=dict)
    """Group key -> positions of its rollouts among the rows."""
    agreement: float = 0.0
    auc: float | None = None
    dead_frac: float = 0.0
    kept_frac: float = 0.0
    kept_dead_frac: float = 0.0
    kept_agreement: float = 0.0
    adv_agreement: float = 0.0
    error_share: float = 0.0
    diag_error_share: float = 0.0


def view(rows: list[RolloutRow], res: Replayed) -> ReplayView:
    """Per-harness replay summary (filters, dead groups and advantages as training applied them)."""
    if res.out is None or res.harness is None:
        raise ValueError(f"no replay to view: {res.error}")
    outs = res.out.rollouts
    rewards = [o.reward for o in outs]
    labels = [o.label_set for o in outs]
    correct = [bool(r["correct"]) for r in rows]
    thr = reward_threshold(res.harness.weights)
    high = [x > thr for x in rewards]
    groups = {g.key: list(g.members) for g in res.out.by_group}
    dead = res.out.dead
    kept = [o.kept for o in outs]
    adv = [o.advantage for o in outs]
    mixed = [i for g, ix in groups.items() if len({correct[i] for i in ix}) > 1 for i in ix if kept[i]]
    kept_ix = [i for i in range(len(rows)) if kept[i]]
    kept_groups = {g for g, ix in groups.items() if any(kept[i] for i in ix)}
    return ReplayView(
        kept=kept, adv=adv, rewards=rewards, labels=labels, high=high,
        validity=res.harness.validity, dead=dead, groups=groups,
        agreement=_mean([h == c for h, c in zip(high, correct)]),
        auc=auc(rewards, correct),
        dead_frac=res.out.dead_frac,
        kept_frac=len(kept_ix) / len(rows) if rows else 0.0,
        kept_dead_frac=len(kept_groups & dead) / len(kept_groups) if kept_groups else 0.0,
        kept_agreement=_mean([high[i] == correct[i] for i in kept_ix]),
        adv_agreement=_mean([(adv[i] > 0) == correct[i] for i in mixed if adv[i] != 0]),
        error_share=_mean([bool(o.errors) for o in outs]),
        diag_error_share=_mean(["diagnostic_error" in x for x in labels]),
    )


def _mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return statistics.fmean(xs) if xs else 0.0


def validity_check(rows: list[RolloutRow], old: ReplayView,
                   new: ReplayView) -> tuple[str | None, dict[str, InvalidFigures]]:
    """(blocking label or None, per-label counts). Flags come from both harnesses."""
    per: dict[str, InvalidFigures] = {}
    blocked = None
    for label in sorted(old.validity | new.validity):
        ix = [i for i in range(len(rows)) if label in old.labels[i] or label in new.labels[i]]
        if not ix:
            continue
        hi_new = [rows[i]["id"] for i in ix if new.high[i]]
        hi_old = [rows[i]["id"] for i in ix if old.high[i]]
        per[label] = {"n": len(ix), "high_new": len(hi_new), "high_old": len(hi_old), "examples": hi_new[:8]}
        share_new, share_old = len(hi_new) / len(ix), len(hi_old) / len(ix)
        if blocked is None and len(hi_new) >= BLOCK_MIN and share_new > BLOCK_SHARE \
                and share_new > share_old + BLOCK_MARGIN:
            blocked = label
    return blocked, per


def regressions(rows: list[RolloutRow], old: ReplayView, new: ReplayView, fixed_ids: set[int]) -> list[int]:
    """Rollouts an earlier promotion fixed that the incumbent judges right and the candidate does not."""
    out = []
    for i, r in enumerate(rows):
        c = bool(r["correct"])
        if r["id"] in fixed_ids and old.high[i] == c and new.high[i] != c:
            out.append(r["id"])
    return out


def fixed_by(rows: list[RolloutRow], old: ReplayView, new: ReplayView) -> list[int]:
    """Rollouts the candidate judges right and the incumbent did not (kept to guard later changes)."""
    return [r["id"] for i, r in enumerate(rows) if old.high[i] != bool(r["correct"]) == new.high[i]]


def _diagnostic_gain(rows: list[RolloutRow], old: ReplayView, new: ReplayView, names: list[str],
                     min_gain: float, m: ReplayMetrics) -> tuple[bool, str, float]:
    """(passed, reason, score) of a diagnostic's change; its figures go into `m`."""
    wrong = [i for i, r in enumerate(rows) if not r["correct"]]
    unl = [i for i in wrong if not (old.labels[i] - {"diagnostic_error"})]
    m["unlabeled_old"] = len(unl)
    for name in names:
        label = name[len("diagnose_"):] if name.startswith("diagnose_") else None
        if label is None:
            continue
        fires_old = [i for i in range(len(rows)) if label in old.labels[i]]
        fires_new = [i for i in range(len(rows)) if label in new.labels[i]]
        false_old = _mean([bool(rows[i]["correct"]) for i in fires_old]) if fires_old else 0.0
        false_new = _mean([bool(rows[i]["correct"]) for i in fires_new]) if fires_new else 0.0
        m.update({"label": label, "fires_old": len(fires_old), "fires_new": len(fires_new),
                  "false_fire_old": false_old, "false_fire_new": false_new})
        if not fires_new:  # retired (or silenced) diagnostic
            if not fires_old or false_old >= 0.5:
                why = "never fired" if not fires_old else \
                    f"fired on evaluator-correct rollouts {false_old:.0%} of the time"
                return True, f"retires '{label}': it {why}", 0.05
            return False, f"'{label}' still explains {len(fires_old)} rollouts; keep it", 0.0
        covered = sum(1 for i in unl if new.labels[i] - {"diagnostic_error"})
        coverage = covered / len(wrong) if wrong else 0.0
        m.update({"newly_labeled": covered, "coverage": coverage})
        if false_new > MAX_FALSE_FIRE:
            return False, f"'{label}' fires on evaluator-correct rollouts {false_new:.0%} of the time", 0.0
        if coverage >= min_gain or false_old - false_new >= min_gain:
            return True, f"'{label}' explains {covered} of {len(unl)} unlabeled failures", \
                coverage + false_old - false_new
        return False, f"'{label}' explains too few failures ({covered} of {len(unl)} unlabeled)", 0.0
    return False, "no diagnostic changed", 0.0


@dataclass
class Judged:
    """A replayed candidate's judgement: status, reason, the backtest's metrics, its score."""

    status: Status
    reason: str
    metrics: ReplayMetrics = field(default_factory=lambda: ReplayMetrics())
    score: float = 0.0


def _figures(rows: list[RolloutRow], old: ReplayView, new: ReplayView) -> ReplayMetrics:
    """Each figure of `view` for the incumbent (`_old`) and the candidate (`_new`)."""
    return {"n_rollouts": len(rows), "n_groups": len(old.groups),
            "agreement_old": old.agreement, "agreement_new": new.agreement,
            "auc_old": old.auc, "auc_new": new.auc,
            "dead_frac_old": old.dead_frac, "dead_frac_new": new.dead_frac,
            "kept_frac_old": old.kept_frac, "kept_frac_new": new.kept_frac,
            "kept_dead_frac_old": old.kept_dead_frac, "kept_dead_frac_new": new.kept_dead_frac,
            "kept_agreement_old": old.kept_agreement, "kept_agreement_new": new.kept_agreement,
            "adv_agreement_old": old.adv_agreement, "adv_agreement_new": new.adv_agreement,
            "error_share_old": old.error_share, "error_share_new": new.error_share,
            "diag_error_share_old": old.diag_error_share, "diag_error_share_new": new.diag_error_share}


def judge(kind: str, names: list[str], rows: list[RolloutRow], old_res: Replayed, new_res: Replayed,
          fixed_ids: set[int], min_gain: float,
          min_effect: float | None = None, alpha: float = ALPHA, min_trained: float = MIN_TRAINED_GROUPS) -> Judged:
    """The verdict (passed, inconclusive or failed), reason, metrics and score of a replayed candidate.
    Hard failures first (a broken replay, crashes, a validity block, regressions); then the
    statistical rule (`decision`), except for diagnostics, judged by what they explain."""
    if old_res.error:  # first: then the replay itself is broken, not the candidate
        return Judged(Status.FAILED, f"incumbent replay failed: {old_res.error}")
    if new_res.error:
        return Judged(Status.FAILED, f"candidate failed in replay: {new_res.error}")
    old, new = view(rows, old_res), view(rows, new_res)
    m = _figures(rows, old, new)
    m["same_update"] = same_update(old, new)
    revived = sorted(old.dead - new.dead)
    m["revived"], m["killed"] = len(revived), len(new.dead - old.dead)
    m["revived_examples"] = [list(g) for g in revived[:8]]
    blocked, m["invalid"] = validity_check(rows, old, new)
    m["regressions"] = regressions(rows, old, new, fixed_ids)
    m["fixed_checked"] = sum(1 for r in rows if r["id"] in fixed_ids)
    m["fixed_ids"] = fixed_by(rows, old, new)[:64]
    if new.error_share > MAX_ERROR_SHARE:
        return Judged(Status.FAILED, f"reward components crashed on {new.error_share:.0%} of rollouts", m)
    if new.diag_error_share > max(MAX_ERROR_SHARE, old.diag_error_share):
        # a diagnostic that crashes stops firing: it must not pass as "retired" or "quieter"
        return Judged(Status.FAILED, f"diagnostics crashed on {new.diag_error_share:.0%} of rollouts", m)
    if blocked:
        e = m["invalid"][blocked]
        m["blocked"] = {"label": blocked, "examples": e["examples"]}
        return Judged(Status.FAILED, (f"blocked by validity diagnostic {blocked}: {e['high_new']} of {e['n']} "
                                      f"rollouts it flags score high (incumbent: {e['high_old']})"), m)
    if m["regressions"]:
        return Judged(Status.FAILED, f"regresses {len(m['regressions'])} rollouts fixed by earlier promotions", m)
    if kind == "diagnostic":
        ok, why, score = _diagnostic_gain(rows, old, new, names, min_gain, m)
        return Judged(Status.PASSED if ok else Status.FAILED, why, m, score)
    return _gain(kind, rows, old, new, m, min_gain, min_effect, alpha, min_trained)


TARGETS = {"reward": "signal", "filter": "kept_agreement", "advantage": "adv_agreement"}
"""The metric each kind of replayed change is judged on; every other kind: `agreement`."""


def _per_group(rows: list[RolloutRow], v: ReplayView, metric: str) -> dict[GroupKey, float]:
    """{group: value} of `metric` per replayed group (groups where it is undefined are left out)."""
    correct = [bool(r["correct"]) for r in rows]
    out = {}
    for g, ix in v.groups.items():
        if metric == "agreement":
            val = [v.high[i] == correct[i] for i in ix]
        elif metric == "signal":
            out[g] = _signal(ix, v, correct)
            continue
        elif metric == "kept_agreement":
            val = [v.high[i] == correct[i] for i in ix if v.kept[i]]
        else:  # adv_agreement: in groups with mixed verdicts, advantage sign against the verdict
            if len({correct[i] for i in ix}) < 2:
                continue
            val = [(v.adv[i] > 0) == correct[i] for i in ix if v.kept[i] and v.adv[i] != 0]
        if val:
            out[g] = sum(val) / len(val)
    return out


def _signal(ix: list[int], v: ReplayView, correct: list[bool]) -> float:
    """How much of a group's update pushes toward the evaluator's verdict, in [-1, 1].

    The update a group gives is its trained rollouts' advantages. A share of it is aligned
    when the group holds both verdicts and the advantage's sign matches the rollout's
    (positive on correct, negative on wrong); everything else is noise to the evaluator: any
    update in a group whose rollouts it judged alike (format credit among wrong answers),
    or one against the verdict. Value: (aligned - noise) / total; 0 for a group that trains
    nothing (a dead or dropped group: no signal, and no noise either). The gate averages it
    over the groups either harness trains on (`_effect`).

    >>> v = ReplayView(kept=[True] * 4, adv=[1.0, -1.0, 0.5, -0.5])
    >>> _signal([0, 1], v, [True, False, False, False]), _signal([2, 3], v, [False] * 4)
    (1.0, -1.0)
    """
    mixed = len({correct[i] for i in ix}) > 1
    mass: dict[int, float] = {i: abs(float(v.adv[i])) for i in ix if is_trained(v.kept[i], v.adv[i])}
    total = sum(mass.values())
    if total == 0:
        return 0.0
    aligned = sum(m for i, m in mass.items() if mixed and (v.adv[i] > 0) == correct[i])
    return (2 * aligned - total) / total


SAME_ADVANTAGE = 1e-4
"""Advantages closer than this count as the same update (`same_update`). group_std divides by
std + eps (eps 1e-6), so rescaling every reward moves an advantage (of order 1) by about eps/std,
2e-5 at a std of 0.05; a move of a knob's finest step (10% of a weight) moves them by far more."""


def same_update(old: ReplayView, new: ReplayView) -> bool:
    """Whether two replays of the same rollouts give training the same update: every rollout
    trained by both or by neither, with the same advantage. A change that leaves the update as it
    was (a reward weight under `group_std` while the other paying terms tie within each group, a
    filter threshold no rollout crosses) changes nothing training does on these rollouts; the
    proposer moves such a knob farther next time (`space.Steps`).

    >>> v = ReplayView(kept=[True, True], adv=[1.0, -1.0])
    >>> rescaled, dropped = ReplayView([True, True], [1.0, -1.00002]), ReplayView([True, False], [1.0, -1.0])
    >>> same_update(v, rescaled), same_update(v, dropped)
    (True, False)
    """
    return all(is_trained(ko, ao) == is_trained(kn, an) and (not is_trained(ko, ao) or abs(ao - an) <= SAME_ADVANTAGE)
               for ko, ao, kn, an in zip(old.kept, old.adv, new.kept, new.adv))


def _live(v: ReplayView) -> set[GroupKey]:
    """Groups a harness trains on: at least one kept rollout with a non-zero advantage."""
    return {g for g, ix in v.groups.items() if any(is_trained(v.kept[i], v.adv[i]) for i in ix)}


def _effect(rows: list[RolloutRow], old: ReplayView, new: ReplayView, metric: str, alpha: float = ALPHA) -> Effect:
    a, b = _per_group(rows, old, metric), _per_group(rows, new, metric)
    if metric == "signal":
        # over the groups either harness trains on: a group dead under both is in neither
        # update (by default the loss is averaged over trained rollouts only, README "GRPO conventions"),
        # so counting it would shrink every effect by the share of dead groups, a property of
        # the policy rather than of the change (under a weak policy most groups are dead, and a
        # real gain over all groups would miss min_gain for that reason alone)
        # (a window where neither trains on anything keeps its groups: a zero effect, inconclusive)
        live = (_live(old) | _live(new)) or set(a) | set(b)
        a, b = {g: x for g, x in a.items() if g in live}, {g: x for g, x in b.items() if g in live}
    return paired_bootstrap(*pair_up(a, b), seed=0, metric=metric, alpha=alpha)


def decision(kind: str, rows: list[RolloutRow], old: ReplayView, new: ReplayView, min_gain: float,
             min_effect: float | None = None, alpha: float = ALPHA) -> Decision:
    """The gate's rule on a replayed change, paired over replayed groups (seeded bootstrap).

    A reward change is judged on `signal` (`_signal`): what share of each group's update
    would push toward the evaluator's verdict. It moves with what a reward change does to
    training: paying a correct answer the incumbent missed revives its group (0 -> +1), and
    a shaping term that splits a group the evaluator judged alike (format credit among wrong
    answers, which group_std scales to a full update) costs up to a whole group (-1 -> 0 when
    removed); on/off agreement with the verdict would see neither the second nor a small
    number of correct answers among a weak policy's many wrong ones. One metric, one test:
    the earlier rule took recall or specificity, whichever had the higher lower bound, and
    so judged lenient extraction on the metric it barely moved (README, Results).
    Filters and the advantage rule are judged on their own metric. Agreement is the harm
    guard for every kind."""
    metric = TARGETS.get(kind, "agreement")
    guard = _effect(rows, old, new, "agreement", alpha) if metric != "agreement" else None
    return decide(_effect(rows, old, new, metric, alpha), min_gain, guard, min_effect=min_effect, alpha=alpha)


def _starves_training(kind: str, old: ReplayView, new: ReplayView, floor: float = MIN_TRAINED_GROUPS) -> str | None:
    """Why a reward change is left to training (`MIN_TRAINED_GROUPS`), or None.

    >>> v = lambda dead: ReplayView(kept=[], adv=[], dead_frac=dead)
    >>> _starves_training("reward", v(0.0), v(0.97))[:42]
    'training would learn from 3% of the groups'
    >>> _starves_training("reward", v(0.6), v(0.7)), _starves_training("reward", v(0.95), v(0.96))
    (None, None)
    >>> _starves_training("reward", v(0.0), v(0.97), floor=0.0) is None
    True
    """
    live_old, live_new = 1 - old.dead_frac, 1 - new.dead_frac
    if kind != "reward" or live_new >= floor or live_new >= live_old / 2:
        return None
    return (f"training would learn from {live_new:.0%} of the groups (the incumbent from {live_old:.0%}): "
            f"replay cannot judge what training on so little does; left to training (a trial or a population move)")


def _gain(kind: str, rows: list[RolloutRow], old: ReplayView, new: ReplayView, m: ReplayMetrics, min_gain: float,
          min_effect: float | None, alpha: float = ALPHA, min_trained: float = MIN_TRAINED_GROUPS) -> Judged:
    d = {"agreement": new.agreement - old.agreement, "kept_agreement": new.kept_agreement - old.kept_agreement,
         "adv_agreement": new.adv_agreement - old.adv_agreement,
         "auc": (new.auc or 0.5) - (old.auc or 0.5), "dead": old.dead_frac - new.dead_frac,
         "kept_dead": old.kept_dead_frac - new.kept_dead_frac}
    m["deltas"] = d
    if d["auc"] < -min_gain:
        return Judged(Status.FAILED, f"reward ranks correct rollouts lower (auc {d['auc']:+.2f})", m)
    if kind == "filter" and new.kept_frac < MIN_KEPT:
        return Judged(Status.FAILED, f"filter keeps only {new.kept_frac:.0%} of rollouts", m)
    starved = _starves_training(kind, old, new, min_trained)
    if starved:
        return Judged(Status.INCONCLUSIVE, starved, m)
    metric = TARGETS.get(kind, "agreement")  # as `decision`, without a call level of its own
    guard = _effect(rows, old, new, "agreement", alpha) if metric != "agreement" else None
    dec = decide(_effect(rows, old, new, metric, alpha), min_gain, guard, min_effect=min_effect, alpha=alpha)
    m["decision"] = dec.record()
    reason = dec.reason
    if dec.status == "inconclusive" and m["revived"]:
        # reviving groups by paying for the wrong thing must not look like progress
        reason += f"; it revives {m['revived']} dead groups, which alone never promotes a change"
    return Judged(Status(dec.status), reason, m, round(dec.effect, 4) if dec.status == "passed" else 0.0)
