"""The offline proposer: moves in the harness's search space, snippets and skills; no network.

Each round it ranks three kinds of option against the failure table:

- **knobs** of the typed search space (`space.py`): one move of one setting,
  with a step that adapts to how earlier moves of that knob fared. Every knob
  is an option every round (relevance to the top failure modes, plus an
  exploration bonus for knobs tried less, plus their record), so a round
  proposes something while the space has untried moves;
- **snippets** (`templates.py`): code-level reward, extraction and
  diagnostic edits that the failure labels point to;
- **skills** retrieved by trigger (a skill that helped before outranks a
  snippet with the same match; a card already tried has one number mutated).

**Stuck training first.** When most groups of the window are dead
(`deadgroups.STUCK`), the moves that act on dead groups (the curriculum level,
pass-rate target, hints, resampling, a longer token budget where rollouts are
cut off: `space.rescue_first`) and the snippets that revive them (lenient
extraction, partial credit: `Template.rescues`) rank before every other
option, by score among themselves (the knob moves only where training will
judge them: a run that trials, or the population); each candidate of such a move carries the
diagnosis with its numbers (`deadgroups.Diagnosis.text`) in its hypothesis
and its params. The knob moves change what training draws or sees, so only a
trial or the population judges them (`space.why_trial`); the snippets are
reward edits, replayed like any other.

Parents come from the population's frontier (`frontier.py`): the active
version takes the first slot, the others are drawn by score. A candidate
built on a version that is not the active one says so in its params
(`branch`: its base and the active version), so a promotion can re-apply the
factor onto the active harness. At most one move per knob per round, and a
refused draw (the churn rules) takes no slot.
"""

from __future__ import annotations

import random
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, cast

from backend.types import JSON

from . import deadgroups as dg
from . import frontier
from . import skills as sk
from . import interventions as iv
from . import space
from .failures import FailureRow, RoundMetrics
from .edit import Edit, EditError
from .interventions import Candidate
from .skills import SkillCard
from .templates import TEMPLATES, MakeContext, Template, mutate_numbers


if TYPE_CHECKING:
    from .context import EvolveContext

DRAWS = 4
"""Parameter draws per snippet or skill before moving on to the next option."""
SKILL_BONUS = 0.05
"""How far a retrieved skill ranks above the snippet it was made from."""
EXPLORE, RECORD, RELEVANCE = 0.3, 0.2, 0.5
"""Weights of a knob's score: less-tried first, its record of passes, its match to the failure table."""


Option = Template | SkillCard | tuple[space.Knob, space.Steps]
"""What a round may draw from: a snippet, a skill card, or a knob with its record of moves."""
Ranked = tuple[float, str, Option]
"""(score, key, option): an option of the round, `rank`'s order."""


def knob_score(knob: space.Knob, shares: Mapping[str, float], steps: space.Steps) -> float:
    """How much a knob is worth trying now (always above 0); `shares`: {failure label: its share}."""
    relevance = min(1.0, float(sum(shares.get(lbl, 0.0) for lbl in knob.targets)))
    return RELEVANCE * relevance + EXPLORE / (1 + steps.tried) + RECORD * (steps.good + 1) / (steps.tried + 2)


def knob_args(ctx: EvolveContext) -> tuple[str, str, int, list[str]]:
    """`space.knobs`'s arguments for this run: the active harness, its domain, the token cap and datasets."""
    return ctx.harness.code, ctx.harness.domain, ctx.cfg.train.max_new_tokens_cap, ctx.cfg.math.datasets


def run_knobs(ctx: EvolveContext) -> list[space.Knob]:
    """Every knob of the active harness, at this run's token cap and datasets."""
    return space.knobs(*knob_args(ctx))


def split_knobs(ks: list[space.Knob], trials: bool) -> tuple[list[space.Knob], list[space.Knob]]:
    """(knobs this run's gate can judge, knobs left out because only a trial could judge them and
    the round cannot run one: `trials` False, see `schedule.judgeable_by_trial`)."""
    return [k for k in ks if trials or not k.needs_trial], [k for k in ks if k.needs_trial and not trials]


def judgeable_knobs(ctx: EvolveContext, trials: bool) -> tuple[list[space.Knob], list[space.Knob]]:
    """`split_knobs` of this run's knobs. Both proposers offer only the first."""
    return split_knobs(run_knobs(ctx), trials)


def options(ctx: EvolveContext, table: list[FailureRow], metrics: RoundMetrics, trials: bool) -> list[Ranked]:
    """(score, key, option) for every snippet, skill and knob that fits this round, best first
    (`trials`: whether knobs only a trial can judge may be offered)."""
    return rank(ctx, table, metrics, judgeable_knobs(ctx, trials)[0],
                sk.for_round(ctx, table, k=4))


def rank(ctx: EvolveContext, table: list[FailureRow], metrics: RoundMetrics, knobs: list[space.Knob],
         cards: list[SkillCard]) -> list[Ranked]:
    """`options` from the knobs and skill cards this round may offer: by score, except that in a
    stuck window the moves acting on dead groups come first (`space.rescue_first`, and the snippets
    that revive dead groups: `Template.rescues`), by score among themselves. The knob moves come
    first only where training will judge them (`trained`: this run trials them, or the round has
    no live policy and its moves go to the population's comparison, `explore.propose_move`);
    without that each would end inconclusive and take a slot from a move the gate can judge."""
    by_label = {e["label"]: e for e in table}
    domain = ctx.harness.domain
    stuck = dg.of_table(by_label, metrics).stuck
    opts: list[Ranked] = [(t.score(by_label, cast(JSON, metrics)), t.id, t) for t in TEMPLATES
                          if domain in t.domains]
    first = {t.id for t in TEMPLATES if t.rescues and stuck}
    trained = ctx.policy is None or ctx.policy.trials
    made_by = {key: score for score, key, _ in opts}
    # a skill ranks at least as high as the snippet it was made from, and above it: the same
    # change, with a record of having helped (and its card counts the use)
    opts += [(max(1.5 * sum(by_label[lbl].get("share", 0.0) for lbl in c["trigger"].get("labels", [])
                            if lbl in by_label),
                  made_by.get(c["change"].get("template") or "", 0.0) + SKILL_BONUS),
              "skill:" + c["name"], c) for c in cards]
    first |= {"skill:" + c["name"] for c in cards if c["change"].get("template") in first}  # as its snippet
    history = space.history(ctx.store)
    shares = {e["label"]: e.get("share", 0.0) for e in table}
    for knob in knobs:
        steps = space.Steps.of(knob, history.get(knob.name, []))
        opts.append((knob_score(knob, shares, steps), space.PREFIX + knob.name, (knob, steps)))
        if trained and space.rescue_first(knob, by_label, metrics):
            first.add(space.PREFIX + knob.name)
    return sorted([o for o in opts if o[0] > 0], key=lambda o: (o[1] not in first, -o[0], o[1]))


@dataclass(frozen=True)
class Draft:
    """One draw of an option before it is rendered on a parent: the change and its params."""

    change: Edit | space.Move
    params: dict[str, Any]


def _template_draft(t: Template, made: tuple[Edit, JSON] | None) -> Draft | None:
    if made is None:
        return None
    edit, params = made
    return Draft(edit, dict(params, template=t.id, op=edit.op, name=edit.name))


def _skill_draft(card: SkillCard, rng: random.Random, attempt: int) -> Draft | None:
    ch = card["change"]
    source, extra = ch.get("source", ""), dict[str, Any]()
    if attempt > 0 and source:  # the card as it is was tried: mutate one of its numbers
        mutated = mutate_numbers(source, rng)
        if mutated is None:
            return None
        source, extra = mutated
    return Draft(Edit(ch["op"], ch["name"], source), dict(extra, template=ch.get("template"), op=ch["op"],
                                                            name=ch["name"]))


def _motivated(hypothesis: str, params: Mapping[str, Any], why: str) -> tuple[str, dict[str, Any]]:
    """A hypothesis and params that carry the dead-group diagnosis behind the move (`why`)."""
    return f"{hypothesis} Diagnosis: {why}.", dict(params, diagnosis=why)


def _candidate(opt: Option, draft: Draft, code: str, parent: frontier.Member,
               by_label: Mapping[str, FailureRow], why: str | None) -> Candidate:
    """A rendered draft of option `opt` (a template, a skill card, or a (knob, steps) pair); in a
    stuck window (`why`: its diagnosis, else None) a move acting on dead groups carries it."""
    c = Candidate(title="", code=code, parent_version=parent.version, parent_code=parent.code, proposer="offline",
                  params=draft.params)
    if isinstance(draft.change, space.Move):
        move, k = draft.change, draft.change.knob
        target = max(k.targets, key=lambda lbl: float(by_label[lbl]["share"]) if lbl in by_label else 0.0) \
            if k.targets else ""
        hypothesis, params = k.hypothesis, dict(move.params())
        if k.rescues and why:
            hypothesis, params = _motivated(hypothesis, params, why)
        return dataclasses.replace(
            c, title=move.title(), kind=k.kind, target=target, hypothesis=hypothesis, params=params,
            expected=f"{', '.join(k.targets) or 'the targeted metric'} improves ({move.title()})")
    if isinstance(opt, Template):
        hypothesis, params = opt.hypothesis, draft.params
        if opt.rescues and why:
            hypothesis, params = _motivated(hypothesis, params, why)
        return dataclasses.replace(c, title=opt.title, target=opt.target, hypothesis=hypothesis,
                                   expected=opt.expected, params=params)
    assert isinstance(opt, dict)  # a skill card
    ch = opt["change"]
    return dataclasses.replace(
        c, title=f"Skill: {ch.get('title') or opt['name']}", kind=ch.get("kind", ""),
        target=(opt["trigger"].get("labels") or [""])[0], expected=ch.get("expected", ""), skills=[opt["name"]],
        hypothesis=ch.get("hypothesis") or f"Skill '{opt['name']}' fixed this failure mode before.")


def _draft(opt: Option, moves: list[space.Move], attempt: int, rng: random.Random, made: Any) -> Draft | None:
    """Draw `attempt` of `opt`: the knob's next move, a skill card (mutated after the first), or
    what the template made (`made`, drawn by the caller)."""
    if isinstance(opt, tuple):
        return Draft(moves[attempt], {})
    if isinstance(opt, Template):
        return _template_draft(opt, made)
    return _skill_draft(opt, rng, attempt)


def propose(ctx: EvolveContext, table: list[FailureRow], metrics: RoundMetrics, n: int, exclude: set[str], trials: bool,
            screen: Callable[[Candidate], str | None] | None = None) -> list[Candidate]:
    """Up to `n` new candidates, each a single-factor edit of a frontier member. `trials`: whether
    moves only a trial can judge may be offered (`schedule.judgeable_by_trial`).
    `screen(candidate)`: a reason to refuse it (the churn rules), or None; a refused draw takes no slot.

    The options are ranked first (`rank`); then each option is drawn on a parent in turn, and the
    first draw that is new, changes the parent and passes the screen takes the slot."""
    rng = random.Random(f"{ctx.cfg.seed}:{ctx.step}")
    active = frontier.Member(ctx.harness_version, "active", ctx.harness.code, None, 0, 0, 0.0, 0.0, 0.0,
                               (ctx.harness_version,))
    labels = [e["label"] for e in table]
    parents = frontier.choose_parents(ctx.store, ctx.cfg.evolve.frontier, labels, rng, n) or [active]
    by_label = {e["label"]: e for e in table}
    diagnosis = dg.diagnose(table, metrics)
    motive = diagnosis.text() if diagnosis.stuck else None
    knobs = split_knobs(space.knobs(*knob_args(ctx)), trials)[0]
    ranked = rank(ctx, table, metrics, knobs, sk.for_round(ctx, table, k=4))
    cap = MakeContext(max_new_tokens_cap=ctx.cfg.train.max_new_tokens_cap)
    seen = set(exclude)
    out: list[Candidate] = []
    for score, _, opt in ranked:
        if len(out) >= n:
            break
        slot = parents[len(out) % len(parents)]
        for parent in [slot] + ([active] if slot.version != active.version else []):
            c = None
            try:
                moves = list(space.moves(parent.code, opt[0], opt[1], by_label, metrics)) \
                    if isinstance(opt, tuple) else []
                for attempt in range(len(moves) if isinstance(opt, tuple) else DRAWS):
                    made = opt.make(parent.code, rng, cap) if isinstance(opt, Template) else None
                    draft = _draft(opt, moves, attempt, rng, made)
                    if draft is None:
                        break
                    code = draft.change.apply(parent.code)
                    if code in seen or code == parent.code:
                        continue
                    c = _candidate(opt, draft, code, parent, by_label, motive)
                    why = screen(c) if screen is not None else None
                    if why is None:
                        break
                    c = None
                    if isinstance(why, iv.Refusal) and why.whole_option:
                        break  # the screen refuses every draw of this option (`interventions.Refusal`)
            except EditError:
                c = None  # the option does not fit this parent
            if c is not None:
                c.params["match"] = round(score, 4)
                if parent.version != active.version:
                    c.params["branch"] = {"base": parent.version, "active": active.version}
                seen.add(c.code)
                out.append(c)
                break
    return out
