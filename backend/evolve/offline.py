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

Parents come from the population's frontier (`population.py`): the active
version takes the first slot, the others are drawn by score. A candidate
built on a version that is not the active one says so in its params
(`branch`: its base and the active version), so a promotion can re-apply the
factor onto the active harness. At most one move per knob per round, and a
refused draw (the churn rules) takes no slot.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Callable, Iterable

from backend.types import JSON

from . import population
from . import skills as sk
from . import interventions as iv
from . import space
from .edit import Edit, EditError
from .interventions import Candidate
from .templates import TEMPLATES, Template, mutate_numbers


if TYPE_CHECKING:
    from .context import EvolveContext

DRAWS = 4
"""Parameter draws per snippet or skill before moving on to the next option."""
SKILL_BONUS = 0.05
"""How far a retrieved skill ranks above the snippet it was made from."""
EXPLORE, RECORD, RELEVANCE = 0.3, 0.2, 0.5
"""Weights of a knob's score: less-tried first, its record of passes, its match to the failure table."""


def knob_score(knob: space.Knob, by_label: JSON, steps: space.Steps) -> float:
    """How much a knob is worth trying now (always above 0)."""
    relevance = min(1.0, float(sum(by_label.get(lbl, {}).get("share", 0.0) for lbl in knob.targets)))
    return RELEVANCE * relevance + EXPLORE / (1 + steps.tried) + RECORD * (steps.good + 1) / (steps.tried + 2)


def run_knobs(ctx: EvolveContext) -> list[space.Knob]:
    """Every knob of the active harness, at this run's token cap and datasets."""
    return space.knobs(ctx.harness.code, ctx.harness.domain, ctx.cfg.train.max_new_tokens_cap, ctx.cfg.math.datasets)


def judgeable_knobs(ctx: EvolveContext, trials: bool) -> tuple[list[space.Knob], list[space.Knob]]:
    """(knobs this run's gate can judge, knobs left out because only a trial could judge them and
    the round cannot run one: `trials` False, see `schedule.judgeable_by_trial`). Both proposers
    offer only the first."""
    ks = space.knobs(ctx.harness.code, ctx.harness.domain, ctx.cfg.train.max_new_tokens_cap, ctx.cfg.math.datasets)
    return [k for k in ks if trials or not k.needs_trial], [k for k in ks if k.needs_trial and not trials]


def options(ctx: EvolveContext, table: list[JSON], metrics: JSON, trials: bool) -> list[tuple[float, str, object]]:
    """(score, key, option) for every snippet, skill and knob that fits this round, best first
    (`trials`: whether knobs only a trial can judge may be offered)."""
    by_label = {e["label"]: e for e in table}
    domain = ctx.harness.domain
    opts: list[tuple[float, str, object]] = [(t.score(by_label, metrics), t.id, t) for t in TEMPLATES
                                             if domain in t.domains]
    made_by = {key: score for score, key, _ in opts}
    # a skill ranks at least as high as the snippet it was made from, and above it: the same
    # change, with a record of having helped (and its card counts the use)
    opts += [(max(1.5 * sum(by_label.get(lbl, {}).get("share", 0.0) for lbl in c["trigger"].get("labels", [])),
                  made_by.get(c["change"].get("template") or "", 0.0) + SKILL_BONUS),
              "skill:" + c["name"], c) for c in sk.for_round(ctx, table, k=4)]
    history = ctx.store.move_history()
    for knob in judgeable_knobs(ctx, trials)[0]:
        steps = space.Steps.of(knob, history.get(knob.name, []))
        opts.append((knob_score(knob, by_label, steps), space.PREFIX + knob.name, (knob, steps)))
    return sorted([o for o in opts if o[0] > 0], key=lambda o: (-o[0], o[1]))


def _from_template(t: Template, parent: population.Member, rng: random.Random, ctx: EvolveContext) -> Candidate | None:
    made = t.make(parent.code, rng, {"max_new_tokens_cap": ctx.cfg.train.max_new_tokens_cap})
    if made is None:
        return None
    edit, params = made
    return Candidate(title=t.title, code=edit.apply(parent.code), parent_version=parent.version,
                     parent_code=parent.code, proposer="offline", target=t.target, hypothesis=t.hypothesis,
                     expected=t.expected, params=dict(params, template=t.id, op=edit.op, name=edit.name))


def _from_skill(card: JSON, parent: population.Member, rng: random.Random, attempt: int) -> Candidate | None:
    ch = card["change"]
    source, extra = ch.get("source", ""), dict[str, Any]()
    if attempt > 0 and source:  # the card as it is was tried: mutate one of its numbers
        mutated = mutate_numbers(source, rng)
        if mutated is None:
            return None
        source, extra = mutated
    code = Edit(ch["op"], ch["name"], source).apply(parent.code)
    return Candidate(title=f"Skill: {ch.get('title') or card['name']}", code=code, parent_version=parent.version,
                     parent_code=parent.code, proposer="offline", kind=ch.get("kind", ""),
                     target=(card["trigger"].get("labels") or [""])[0],
                     hypothesis=ch.get("hypothesis") or f"Skill '{card['name']}' fixed this failure mode before.",
                     expected=ch.get("expected", ""), skills=[card["name"]],
                     params=dict(extra, template=ch.get("template"), op=ch["op"], name=ch["name"]))


def _from_move(move: space.Move, parent: population.Member, by_label: JSON) -> Candidate:
    k = move.knob
    target = max(k.targets, key=lambda lbl: by_label.get(lbl, {}).get("share", 0.0)) if k.targets else ""
    return Candidate(title=move.title(), code=move.apply(parent.code), parent_version=parent.version,
                     parent_code=parent.code, proposer="offline", kind=k.kind, target=target,
                     hypothesis=k.hypothesis, expected=f"{', '.join(k.targets) or 'the targeted metric'} improves "
                     f"({move.title()})", params=move.params())


def _draws(key: str, opt: Any, parent: population.Member, rng: random.Random, ctx: EvolveContext,
           table: list[JSON], metrics: JSON, by_label: JSON) -> Any:
    """The candidates one option offers on one parent, in the order to try them."""
    if key.startswith(space.PREFIX):
        knob, steps = opt
        for move in space.moves(parent.code, knob, steps, by_label, metrics):
            yield _from_move(move, parent, by_label)
        return
    for attempt in range(DRAWS):
        c = _from_skill(opt, parent, rng, attempt) if key.startswith("skill:") else _from_template(opt, parent, rng,
                                                                                                  ctx)
        if c is None:
            return
        yield c


def propose(ctx: EvolveContext, table: list[JSON], metrics: JSON, n: int, exclude: set[str], trials: bool,
            screen: Callable[[Candidate], str | None] | None = None) -> list[Candidate]:
    """Up to `n` new candidates, each a single-factor edit of a frontier member. `trials`: whether
    moves only a trial can judge may be offered (`schedule.judgeable_by_trial`).
    `screen(candidate)`: a reason to refuse it (the churn rules), or None; a refused draw takes no slot."""
    rng = random.Random(f"{ctx.cfg.seed}:{ctx.step}")
    active = population.Member(ctx.harness_version, "active", ctx.harness.code, None, 0, 0, 0.0, 0.0, 0.0,
                               (ctx.harness_version,))
    parents = population.choose_parents(ctx.store, ctx.cfg.evolve.population, table, rng, n) or [active]
    by_label = {e["label"]: e for e in table}
    seen = set(exclude)
    out: list[Candidate] = []
    for score, key, opt in options(ctx, table, metrics, trials):
        if len(out) >= n:
            break
        slot = parents[len(out) % len(parents)]
        for parent in [slot] + ([active] if slot.version != active.version else []):
            c = _first_new(_draws(key, opt, parent, rng, ctx, table, metrics, by_label), parent, seen, screen)
            if c is not None:
                c.params["match"] = round(score, 4)
                if parent.version != active.version:
                    c.params["branch"] = {"base": parent.version, "active": active.version}
                seen.add(c.code)
                out.append(c)
                break
    return out


def _first_new(draws: Iterable[Candidate], parent: population.Member, seen: set[str],
               screen: Callable[[Candidate], str | None] | None) -> Candidate | None:
    """The first draw that is new, changes the parent and passes the screen; none once the screen
    refuses the whole option (`interventions.Refusal.whole_option`)."""
    try:
        for c in draws:
            if c.code in seen or c.code == parent.code:
                continue
            why = screen(c) if screen is not None else None
            if why is None:
                return c
            if isinstance(why, iv.Refusal) and why.whole_option:
                return None
    except EditError:
        pass  # the option does not fit this parent
    return None
