"""The LLM proposer: an agent with evidence, through any OpenAI-compatible chat endpoint.

Its context is what an engineer would look at before touching the harness:

- the failure table (share, trend, how often the evaluator still said
  correct) and the round's metrics;
- sampled rollouts for the top labels: question, gold answer, the end of the
  completion, reward, the evaluator's verdict and every diagnosis it got;
- the current harness, and the search space: every knob with its value,
  range and the step its earlier moves earned (`space.py`), marked where it
  acts on dead groups and where only training (a trial or the population)
  can judge it;
- the dead-group diagnosis (`deadgroups.py`): the dead share with its
  interval, the share in all-wrong groups, the truncated share, and whether
  the window is stuck, in which case the moves acting on dead groups are
  asked for first;
- the history of earlier proposals: what was tried, the backtest's verdict,
  effect and interval, and the reason;
- the skill cards retrieved by trigger.

It answers with JSON, one single-factor change per intervention, each with a
hypothesis and an expected effect, in one of three forms:

    {"interventions": [{"title": ..., "target": "<failure label>", "hypothesis": ..., "expected": ...,
                        "knob": "SAMPLING.temperature", "value": 0.7}                 # a move in the space
                       | {..., "name": "<top-level name>", "definition": "<its full new source, or empty>"}
                       | {..., "diff": "<unified diff of the harness>"}]}

Every way this can go wrong (no endpoint, HTTP errors, timeouts, garbage, an
unknown knob or a value out of its range, a diff that does not apply, a
change touching two names, code the harness checker rejects) becomes a
failed proposal carrying the reason.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from dataclasses import dataclass
from typing import Any, TYPE_CHECKING, TypedDict

from backend.config import LLMProposerConfig
from backend.harness.loader import HarnessError, check_source
from backend.types import JSON

from . import deadgroups as dg
from . import skills as sk
from . import space
from .failures import FailureRow, RoundMetrics
from .edit import EditError, apply_unified_diff, set_definition
from .interventions import Candidate, params
from .offline import judgeable_knobs, run_knobs
from .skills import SkillCard


if TYPE_CHECKING:
    from .context import EvolveContext
    from backend.store import Store

SYSTEM = """You improve the training harness of a reinforcement-learning run (GRPO).
The harness is one Python file: PROMPT, SAMPLING, REWARD_WEIGHTS, ADVANTAGE, FILTERS, CURRICULUM,
VALIDITY, reward_<name>(r) functions and diagnose_<label>(r) functions. The evaluator (the task's
own verifier) is fixed; you change how rollouts are rewarded, filtered and diagnosed.
Read the evidence: the failure table, the rollouts with their diagnoses, and what earlier proposals
did in their backtests (do not repeat a change that failed; build on what passed).
Each intervention must change exactly ONE thing: one knob of the search space, or one top-level name.
Never make the reward credit answers the evaluator would reject (validity diagnostics will block it).
Answer with JSON only, no prose:
{"interventions": [{"title": str, "target": failure label, "hypothesis": str, "expected": str,
  "knob": a knob name from the search space, "value": its new value (inside its range)}]}
Instead of knob/value you may give "name" (a top-level name) and "definition" (its full new source,
"" removes it), or "diff": a unified diff of the harness file.
A dead group is one whose rewards all tie: GRPO learns nothing from it. When most groups are dead,
training is stuck: prefer the knobs marked "acts_on_dead_groups" (the curriculum level, dataset
mix and target_pass_rate; SAMPLING.hint, a share of the reference solution the engine gives to
all-wrong groups; SAMPLING.resample_dead; a longer SAMPLING.max_new_tokens for truncated
rollouts), or partial credit that cannot be gamed. Knobs marked "judged_by": "training" are
judged by what training does on validation, never by replay."""
EXAMPLES_PER_LABEL = 2
TOP_LABELS = 3
HISTORY = 12


def _evidence(store: Store, table: list[FailureRow], rng: random.Random) -> list[JSON]:
    """Sampled rollouts of the top labels, each with every diagnosis it got."""
    picked = []
    for e in table[:TOP_LABELS]:
        ids = list(e.get("examples", []))
        picked += [(e["label"], rid) for rid in rng.sample(ids, min(EXAMPLES_PER_LABEL, len(ids)))]
    diags = store.diagnoses_by_rollout([rid for _, rid in picked])
    out = []
    for label, rid in picked:
        r = store.get("rollouts", rid)
        if r:
            task = json.loads(r.get("task_json") or "{}")
            out.append({"label": label, "question": task.get("question", "")[:300], "gold": task.get("answer"),
                        "completion_end": (r["completion"] or "")[-300:], "finish": r.get("finish"),
                        "reward": r["reward"], "evaluator_correct": bool(r["correct"]),
                        "diagnoses": [{"label": d["label"], "evidence": (d["evidence"] or "")[:160]}
                                      for d in diags.get(rid, [])]})
    return out


def _history(store: Store) -> list[JSON]:
    out = []
    for h in store.proposal_history(HISTORY):
        p = params(h)
        row = {"id": h["id"], "title": h["title"], "kind": h["kind"], "target": h["target"],
               "proposer": h["proposer"], "status": h["status"], "reason": (h["reason"] or "")[:240]}
        if p.get("knob"):
            row["move"] = {"knob": p["knob"], "from": p.get("from"), "to": p.get("to")}
        if h["effect"] is not None:
            row["backtest"] = {"mode": h["mode"], "effect": h["effect"], "ci": [h["ci_low"], h["ci_high"]]}
        out.append(row)
    return out


def _space(ctx: EvolveContext, trials: bool) -> list[JSON]:
    """The knobs shown to the model: those whose moves this run's gate can judge, as the offline
    proposer offers them (`offline.judgeable_knobs`: without trials an auto-promoting run leaves
    out the knobs only a trial could judge, whose moves would all end inconclusive)."""
    history = space.history(ctx.store)
    out = []
    for k in judgeable_knobs(ctx, trials)[0]:
        steps = space.Steps.of(k, history.get(k.name, []))
        row = {"knob": k.name, "type": k.type, "value": k.value(ctx.harness.code), "targets": list(k.targets)}
        if k.type in ("float", "int"):
            row.update(range=[k.lo, k.hi], step=(f"x{round(math.exp(steps.size), 3)}" if k.log
                                                  else round(steps.size, 4)), moves=steps.tried, passed=steps.good)
        elif k.type == "choice":
            row["choices"] = list(k.choices)
        if k.rescues:
            row["acts_on_dead_groups"] = True
        if k.needs_trial:
            row["judged_by"] = "training"
        out.append(row)
    return out


def _dead_groups(table: list[FailureRow], metrics: RoundMetrics) -> str:
    """The dead-group diagnosis as the model reads it, and what it asks for when training is stuck."""
    d = dg.diagnose(table, metrics)
    ask = (f"Training is stuck (dead share at least {dg.STUCK}): propose the moves acting on dead groups first."
           if d.stuck else "Training is not stuck.")
    return f"{d.text()}. {ask}"


class Message(TypedDict):
    """One chat message of the request."""

    role: str
    content: str


def build_messages(ctx: EvolveContext, table: list[FailureRow], metrics: RoundMetrics, cards: list[SkillCard],
                   n: int, trials: bool) -> list[Message]:
    """The chat request: the system prompt (`SYSTEM`) and the round's evidence (the module docstring)."""
    rows = [{k: e[k] for k in ("label", "count", "share", "trend", "correct_share")} for e in table[:10]]
    skills = [{"name": c["name"], "trigger": c["trigger"], "change": {k: c["change"].get(k) for k in
               ("op", "name", "source", "hypothesis")}, "helped": c.get("helped", 0)} for c in cards]
    rng = random.Random(f"{ctx.cfg.seed}:{ctx.step}:llm")
    user = (f"Failure table (share of recent rollouts):\n{json.dumps(rows, indent=1)}\n\n"
            f"Round metrics:\n{json.dumps(metrics, default=str)}\n\n"
            f"Dead groups:\n{_dead_groups(table, metrics)}\n\n"
            f"Evidence rollouts (sampled for the top labels, with their diagnoses):\n"
            f"{json.dumps(_evidence(ctx.store, table, rng), indent=1)}\n\n"
            f"Earlier proposals and their backtests (newest first):\n{json.dumps(_history(ctx.store), indent=1)}\n\n"
            f"Skills that fixed similar failures before:\n{json.dumps(skills, indent=1)}\n\n"
            f"Search space (knobs of this harness):\n{json.dumps(_space(ctx, trials), default=str)}\n\n"
            f"Current harness (version {ctx.harness_version}):\n```python\n{ctx.harness.code}```\n\n"
            f"Propose up to {n} interventions.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class Answer:
    """One intervention of a model's answer, each field read with its type checked (`parse_answer`):
    a knob and its value, else a unified diff, else a name and its new definition."""

    title: str = "LLM intervention"
    target: str = ""
    hypothesis: str = ""
    expected: str = ""
    knob: str | None = None
    value: Any = None
    diff: str | None = None
    name: str | None = None
    definition: str | None = None


def _answer(item: JSON) -> Answer:
    def text(key: str) -> str | None:
        v = item.get(key)
        return v if isinstance(v, str) else None
    return Answer(title=str(item.get("title") or "LLM intervention")[:120], target=str(item.get("target") or ""),
                  hypothesis=str(item.get("hypothesis") or ""), expected=str(item.get("expected") or ""),
                  knob=text("knob"), value=item.get("value"), diff=text("diff"), name=text("name"),
                  definition=text("definition"))


def parse_answer(text: str) -> list[Answer]:
    """The interventions in a model's answer; ValueError when there is none."""
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", (text or "").strip())
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the answer")
    data = json.loads(text[start:end + 1])
    items = data.get("interventions", [data]) if isinstance(data, dict) else None
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        raise ValueError("answer has no list of intervention objects")
    return [_answer(i) for i in items]


def candidate_from(item: Answer, ctx: EvolveContext, skill_names: list[str]) -> Candidate:
    base: dict[str, Any] = dict(parent_version=ctx.harness_version, parent_code=ctx.harness.code, proposer="llm",
                                skills=skill_names, title=item.title, target=item.target,
                                hypothesis=item.hypothesis, expected=item.expected)
    try:
        if not item.hypothesis:
            raise ValueError("answer has no hypothesis")
        if item.knob is not None:
            move = knob_move(ctx, item.knob, item.value)
            code, how = move.apply(ctx.harness.code), dict(move.params())
        elif item.diff is not None and item.diff.strip():
            code, how = apply_unified_diff(ctx.harness.code, item.diff), {"op": "diff"}
        elif item.name is not None and item.definition is not None:
            code = set_definition(ctx.harness.code, item.name, item.definition)
            how = {"op": "set", "name": item.name}
        else:
            raise ValueError("answer has no knob and value, no name and definition, and no diff")
        check_source(code)
    except EditError as e:
        return Candidate(code="", error=f"llm: change does not apply: {e}", **base)
    except HarnessError as e:
        return Candidate(code="", error=f"llm: harness check rejected the change: {e}", **base)
    except ValueError as e:
        return Candidate(code="", error=f"llm: malformed answer: {e}", **base)
    return Candidate(code=code, params=how, **base)


def knob_move(ctx: EvolveContext, name: str, value: Any) -> space.Move:
    """The move an answer names; ValueError (its reason) for an unknown knob or a value outside
    the knob's type or range."""
    ks = {k.name: k for k in run_knobs(ctx)}
    k = ks.get(name)
    if k is None:
        raise ValueError(f"no knob '{name}' in this harness's search space")
    old = k.value(ctx.harness.code)
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if k.type == "bool" and not isinstance(value, bool):
        raise ValueError(f"{name} takes true or false, not {value!r}")
    if k.type == "choice" and value not in k.choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, k.choices))}")
    if k.type in ("float", "int"):
        if not numeric or (k.type == "int" and value != int(value)) or not k.lo <= value <= k.hi:
            raise ValueError(f"{name} must be {'an integer' if k.type == 'int' else 'a number'} in "
                             f"[{k.lo:g}, {k.hi:g}], got {value!r}")
        value = int(value) if k.type == "int" else float(value)
    if value == old:
        raise ValueError(f"{name} is already {old!r}")
    steps = space.Steps.of(k, space.history(ctx.store).get(name, []))
    return space.Move(k, old, value, steps.size if k.type in ("float", "int") else None)


def _client(cfg: LLMProposerConfig) -> Any:  # an openai.OpenAI client
    from openai import OpenAI

    base_url = cfg.base_url or os.environ.get("OPENAI_BASE_URL", "")
    if not base_url:
        raise ValueError("no endpoint: set evolve.llm.base_url (or OPENAI_BASE_URL)")
    if not cfg.model:
        raise ValueError("evolve.llm.model is not set")
    key = cfg.api_key or os.environ.get(cfg.api_key_env or "", "") or "EMPTY"  # local servers take any key
    return OpenAI(base_url=base_url, api_key=key, timeout=cfg.timeout_s, max_retries=0)


def check_endpoint(cfg: LLMProposerConfig) -> str | None:
    """Why the endpoint cannot be used, or None. Checked when a run starts, so a wrong port or
    a server that is not up fails at once instead of costing every round its proposals; a TCP
    connect, not a request, so it needs no key and costs no tokens.

    >>> check_endpoint(LLMProposerConfig(base_url="http://127.0.0.1:9/v1", model="m"))  # doctest: +SKIP
    'cannot reach the LLM endpoint http://127.0.0.1:9/v1: Connection refused'
    """
    import socket
    from urllib.parse import urlsplit

    base_url = cfg.base_url or os.environ.get("OPENAI_BASE_URL", "")
    if not base_url:
        return "no endpoint is set (evolve.llm.base_url or OPENAI_BASE_URL)"
    if not cfg.model:
        return "evolve.llm.model is not set"
    try:
        url = urlsplit(base_url)
        host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    except ValueError as e:
        return f"evolve.llm.base_url '{base_url}' is not a valid URL ({e})"
    if url.scheme not in ("http", "https") or not host:
        return f"evolve.llm.base_url '{base_url}' is not an http(s) URL"
    try:
        socket.create_connection((host, port), timeout=min(5.0, cfg.timeout_s)).close()
    except OSError as e:
        return f"cannot reach the LLM endpoint {base_url}: {e.strerror or e}"
    return None


def propose(ctx: EvolveContext, table: list[FailureRow], metrics: RoundMetrics, n: int, exclude: set[str],
            trials: bool) -> list[Candidate]:
    """Up to `n` candidates from one chat completion; failures come back as failed candidates.
    `trials`: whether the knobs only a trial can judge are shown (`schedule.judgeable_by_trial`)."""
    cfg = ctx.cfg.evolve.llm
    cards = sk.for_round(ctx, table, k=3)
    names = [c["name"] for c in cards]

    def failed(why: str) -> list[Candidate]:
        return [Candidate(title="LLM proposal", code="", parent_version=ctx.harness_version,
                          parent_code=ctx.harness.code, proposer="llm", skills=names, error=why)]
    try:
        client = _client(cfg)
        messages = build_messages(ctx, table, metrics, cards, n, trials)
        resp = client.chat.completions.create(model=cfg.model, messages=messages,
                                              temperature=cfg.temperature, max_tokens=cfg.max_tokens)
        text = resp.choices[0].message.content
    except Exception as e:  # HTTP errors, timeouts, refused connections, odd response shapes
        return failed(f"llm: request failed: {type(e).__name__}: {str(e)[:200]}")
    try:
        items = parse_answer(text)
    except ValueError as e:
        return failed(f"llm: malformed answer: {str(e)[:200]}")
    diagnosis = dg.diagnose(table, metrics)
    rescues = {k.name for k in run_knobs(ctx) if k.rescues} if diagnosis.stuck else set()
    out = []
    for item in items[:n]:
        c = candidate_from(item, ctx, names)
        if c.params.get("knob") in rescues:  # a move acting on dead groups keeps the diagnosis it was shown
            c.params["diagnosis"] = diagnosis.text()
        if c.error or c.code not in exclude:
            out.append(c)
    return out
