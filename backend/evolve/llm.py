"""The LLM proposer: any OpenAI-compatible chat endpoint (vLLM, a hosted API).

It sends the failure table, round metrics, a few evidence rollouts, the
current harness and the retrieved skill cards, and asks for a JSON answer:

    {"interventions": [{"title": ..., "target": "<failure label>", "hypothesis": ..., "expected": ...,
                        "name": "<top-level name>", "definition": "<its full new source, or empty to remove>"}
                       | {..., "diff": "<unified diff of the harness>"}]}

Every way this can go wrong (no endpoint, HTTP errors, timeouts, garbage,
a diff that does not apply, a change touching two names, code the harness
checker rejects) becomes a failed proposal carrying the reason.
"""

from __future__ import annotations

import json
import os
import re

from backend.harness.loader import HarnessError, check_source

from . import skills as sk
from .edit import EditError, apply_unified_diff, set_definition
from .interventions import Candidate

SYSTEM = """You improve the training harness of a reinforcement-learning run (GRPO).
The harness is one Python file: PROMPT, SAMPLING, REWARD_WEIGHTS, ADVANTAGE, FILTERS, CURRICULUM,
VALIDITY, reward_<name>(r) functions and diagnose_<label>(r) functions. The evaluator (the task's
own verifier) is fixed; you change how rollouts are rewarded, filtered and diagnosed.
Each intervention must change exactly ONE top-level name. Never make the reward credit answers
the evaluator would reject (validity diagnostics will block it).
Answer with JSON only, no prose:
{"interventions": [{"title": str, "target": failure label, "hypothesis": str, "expected": str,
  "name": top-level name, "definition": full new source of that one definition ("" removes it)}]}
Instead of name/definition you may give "diff": a unified diff of the harness file."""


def _evidence(store, table: list[dict], k: int = 2) -> list[dict]:
    out = []
    for e in table[:3]:
        for rid in e.get("examples", [])[:k]:
            r = store.get("rollouts", rid)
            if r:
                task = json.loads(r.get("task_json") or "{}")
                out.append({"label": e["label"], "question": task.get("question", "")[:300],
                            "gold": task.get("answer"), "completion_end": (r["completion"] or "")[-300:],
                            "reward": r["reward"], "evaluator_correct": bool(r["correct"])})
    return out


def build_messages(ctx, table: list[dict], metrics: dict, cards: list[dict], n: int) -> list[dict]:
    rows = [{k: e[k] for k in ("label", "count", "share", "trend", "correct_share")} for e in table[:10]]
    skills = [{"name": c["name"], "trigger": c["trigger"], "change": {k: c["change"].get(k) for k in
               ("op", "name", "source", "hypothesis")}, "helped": c.get("helped", 0)} for c in cards]
    user = (f"Failure table (share of recent rollouts):\n{json.dumps(rows, indent=1)}\n\n"
            f"Round metrics:\n{json.dumps(metrics, default=str)}\n\n"
            f"Evidence rollouts:\n{json.dumps(_evidence(ctx.store, table), indent=1)}\n\n"
            f"Skills that fixed similar failures before:\n{json.dumps(skills, indent=1)}\n\n"
            f"Current harness (version {ctx.harness_version}):\n```python\n{ctx.harness.code}```\n\n"
            f"Propose up to {n} interventions.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def parse_answer(text: str) -> list[dict]:
    """The list of intervention objects in a model's answer; ValueError when there is none."""
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", (text or "").strip())
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the answer")
    data = json.loads(text[start:end + 1])
    items = data.get("interventions", [data]) if isinstance(data, dict) else None
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        raise ValueError("answer has no list of intervention objects")
    return items


def candidate_from(item: dict, ctx, skill_names: list[str]) -> Candidate:
    base = dict(parent_version=ctx.harness_version, parent_code=ctx.harness.code, proposer="llm",
                skills=skill_names, title=str(item.get("title") or "LLM intervention")[:120],
                target=str(item.get("target") or ""), hypothesis=str(item.get("hypothesis") or ""),
                expected=str(item.get("expected") or ""))
    try:
        if not base["hypothesis"]:
            raise ValueError("answer has no hypothesis")
        if isinstance(item.get("diff"), str) and item["diff"].strip():
            code, how = apply_unified_diff(ctx.harness.code, item["diff"]), {"op": "diff"}
        elif isinstance(item.get("name"), str) and isinstance(item.get("definition"), str):
            code = set_definition(ctx.harness.code, item["name"], item["definition"])
            how = {"op": "set", "name": item["name"]}
        else:
            raise ValueError("answer has neither a diff nor a name and definition")
        check_source(code)
    except EditError as e:
        return Candidate(code="", error=f"llm: change does not apply: {e}", **base)
    except HarnessError as e:
        return Candidate(code="", error=f"llm: harness check rejected the change: {e}", **base)
    except ValueError as e:
        return Candidate(code="", error=f"llm: malformed answer: {e}", **base)
    return Candidate(code=code, params=how, **base)


def _client(cfg):
    from openai import OpenAI

    base_url = cfg.base_url or os.environ.get("OPENAI_BASE_URL", "")
    if not base_url:
        raise ValueError("no endpoint: set evolve.llm.base_url (or OPENAI_BASE_URL)")
    if not cfg.model:
        raise ValueError("evolve.llm.model is not set")
    key = cfg.api_key or os.environ.get(cfg.api_key_env or "", "") or "EMPTY"  # local servers take any key
    return OpenAI(base_url=base_url, api_key=key, timeout=cfg.timeout_s, max_retries=0)


def check_endpoint(cfg) -> str | None:
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


def propose(ctx, table: list[dict], metrics: dict, n: int, exclude: set[str]) -> list[Candidate]:
    """Up to `n` candidates from one chat completion; failures come back as failed candidates."""
    cfg = ctx.cfg.evolve.llm
    cards = sk.retrieve(ctx.store, table, ctx.harness.domain, k=3)
    names = [c["name"] for c in cards]

    def failed(why: str) -> list[Candidate]:
        return [Candidate(title="LLM proposal", code="", parent_version=ctx.harness_version,
                          parent_code=ctx.harness.code, proposer="llm", skills=names, error=why)]
    try:
        client = _client(cfg)
        resp = client.chat.completions.create(model=cfg.model, messages=build_messages(ctx, table, metrics, cards, n),
                                              temperature=cfg.temperature, max_tokens=cfg.max_tokens)
        text = resp.choices[0].message.content
    except Exception as e:  # HTTP errors, timeouts, refused connections, odd response shapes
        return failed(f"llm: request failed: {type(e).__name__}: {str(e)[:200]}")
    try:
        items = parse_answer(text)
    except ValueError as e:
        return failed(f"llm: malformed answer: {str(e)[:200]}")
    out = []
    for item in items[:n]:
        c = candidate_from(item, ctx, names)
        if c.error or c.code not in exclude:
            out.append(c)
    return out
