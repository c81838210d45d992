"""The offline proposer: templates and skills matched to failure modes; no network.

Each round it ranks every built-in template and every retrieved skill card
by how well its trigger matches the failure table, picks parents from a small
population of harness versions, and writes one single-factor edit per slot,
drawing template parameters (or mutating a skill's numbers) until it finds a
candidate this run has not tried before.

Parent choice balances productivity (how many of a version's children
passed), novelty (versions with few children get tried) and coverage (whether
its children already targeted the current top failure modes). The active
version always gets the first slot, so the most direct fix is always tried.
"""

from __future__ import annotations

import random

from . import skills as sk
from .edit import Edit, EditError
from .interventions import Candidate
from .templates import TEMPLATES, mutate_numbers

DRAWS = 4
"""Parameter draws per option before moving on to the next one."""


def population(store, k: int) -> list[dict]:
    """The active version plus the most recent earlier ones (rolled-back versions are out)."""
    rows = store.rows("SELECT * FROM harness_versions WHERE status IN ('active', 'superseded') "
                      "ORDER BY (status = 'active') DESC, id DESC LIMIT ?", (max(1, k),))
    return rows


def parent_scores(store, versions: list[dict], table: list[dict]) -> list[tuple[dict, float, dict]]:
    top = [e["label"] for e in table[:3]]
    out = []
    for v in versions:
        kids = store.rows("SELECT status, target FROM interventions WHERE parent_version = ? AND code != ''",
                          (v["id"],))
        good = sum(k["status"] in ("passed", "approved", "promoted") for k in kids)
        targeted = {k["target"] for k in kids}
        parts = {"productivity": (good + 1) / (len(kids) + 2), "novelty": 1 / (1 + len(kids)),
                 "coverage": sum(lbl not in targeted for lbl in top) / len(top) if top else 0.0}
        score = parts["productivity"] + 0.5 * parts["novelty"] + 0.5 * parts["coverage"]
        out.append((v, score + (1.0 if v["status"] == "active" else 0.0), parts))
    return out


def choose_parents(store, k: int, table: list[dict], rng: random.Random, n: int) -> list[dict]:
    scored = parent_scores(store, population(store, k), table)
    if not scored:
        return []
    active = [v for v, _, _ in scored if v["status"] == "active"] or [scored[0][0]]
    rest = [rng.choices([v for v, _, _ in scored], weights=[s for _, s, _ in scored])[0] for _ in range(n - 1)]
    return active[:1] + rest


def _options(ctx, table: list[dict], metrics: dict) -> list[tuple[float, str, object]]:
    by_label = {e["label"]: e for e in table}
    domain = ctx.harness.domain
    opts = [(t.score(by_label, metrics), t.id, t) for t in TEMPLATES if domain in t.domains]
    # A skill that helped before outranks a template with the same match.
    opts += [(1.5 * sum(by_label.get(lbl, {}).get("share", 0.0) for lbl in c["trigger"].get("labels", [])),
              "skill:" + c["name"], c) for c in sk.retrieve(ctx.store, table, domain, k=4)]
    return sorted([o for o in opts if o[0] > 0], key=lambda o: (-o[0], o[1]))


def _from_template(t, parent: dict, rng, ctx) -> Candidate | None:
    made = t.make(parent["code"], rng, {"max_new_tokens_cap": ctx.cfg.train.max_new_tokens_cap})
    if made is None:
        return None
    edit, params = made
    return Candidate(title=t.title, code=edit.apply(parent["code"]), parent_version=parent["id"],
                     parent_code=parent["code"], proposer="offline", target=t.target, hypothesis=t.hypothesis,
                     expected=t.expected, params=dict(params, template=t.id, op=edit.op, name=edit.name))


def _from_skill(card: dict, parent: dict, rng, attempt: int) -> Candidate | None:
    ch = card["change"]
    source, extra = ch.get("source", ""), {}
    if attempt > 0 and source:  # the card as it is was tried: mutate one of its numbers
        mutated = mutate_numbers(source, rng)
        if mutated is None:
            return None
        source, extra = mutated
    code = Edit(ch["op"], ch["name"], source).apply(parent["code"])
    return Candidate(title=f"Skill: {ch.get('title') or card['name']}", code=code, parent_version=parent["id"],
                     parent_code=parent["code"], proposer="offline", kind=ch.get("kind", ""),
                     target=(card["trigger"].get("labels") or [""])[0],
                     hypothesis=ch.get("hypothesis") or f"Skill '{card['name']}' fixed this failure mode before.",
                     expected=ch.get("expected", ""), skills=[card["name"]],
                     params=dict(extra, template=ch.get("template"), op=ch["op"], name=ch["name"]))


def propose(ctx, table: list[dict], metrics: dict, n: int, exclude: set[str], screen=None) -> list[Candidate]:
    """Up to `n` new candidates, each a single-factor edit of a population member.
    `screen(candidate)`: a reason to refuse it (the churn rules), or None; a refused draw takes no slot."""
    rng = random.Random(f"{ctx.cfg.seed}:{ctx.step}")
    parents = choose_parents(ctx.store, ctx.cfg.evolve.population, table, rng, n)
    if not parents:
        parents = [{"id": ctx.harness_version, "code": ctx.harness.code, "status": "active"}]
    seen = set(exclude)
    out: list[Candidate] = []
    for score, key, opt in _options(ctx, table, metrics):
        if len(out) >= n:
            break
        parent = parents[len(out) % len(parents)]
        for attempt in range(DRAWS):
            try:
                c = _from_skill(opt, parent, rng, attempt) if key.startswith("skill:") else \
                    _from_template(opt, parent, rng, ctx)
            except EditError:
                c = None  # the option does not fit this parent
            if c is None:
                break
            if c.code not in seen and c.code != parent["code"] and (screen is None or screen(c) is None):
                c.params["match"] = round(score, 4)
                seen.add(c.code)
                out.append(c)
                break
    return out
