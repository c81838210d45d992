"""A backtest as the operator reads it: the decision with its statistics, then every metric as a row.

Nothing is shown as cut JSON. The decision (the targeted metric's effect, 95%
interval, p-value and sample size, and the accuracy harm guard when there is
one) comes first; then each metric on one row: a before → after pair with its
change, a number, a list as its size and first items, a nested table as an
indented block of the same rows.

    >>> backtests([{"mode": "replay", "verdict": "passed", "n_rollouts": 80,
    ...             "metrics": {"agreement_old": 0.78, "agreement_new": 0.83}}]).plain.splitlines()[1]
    '  agreement             0.780 → 0.830  (+0.050)'
"""

from __future__ import annotations

import json

from textual.content import Content

from evotui.components.status_bar import fmt

NAME_WIDTH = 22
LIST_ITEMS = 6
MAX_DEPTH = 3
PAIRS = (("_old", "_new"), ("_before", "_after"))
SHOWN_ELSEWHERE = {"decision", "incumbent_version"}  # the decision line and the header show these
VERDICT_STYLE = {"passed": "$text-success", "pass": "$text-success", "inconclusive": "$text-warning"}


def backtests(rows: list[dict]) -> Content:
    """Every backtest of an intervention, oldest first."""
    if not rows:
        return Content.styled("not backtested yet: candidates are backtested in the round that proposed them",
                              "$text-muted")
    out: list[Content] = []
    for b in rows:
        metrics = b.get("metrics") or {}
        out.append(header(b, metrics))
        decision = metrics.get("decision") if isinstance(metrics.get("decision"), dict) else None
        if b.get("effect") is not None or decision:
            out += decision_lines(dict(decision or {}, **{k: b[k] for k in EFFECT_KEYS if b.get(k) is not None}))
        out += metric_rows({k: v for k, v in metrics.items() if k not in SHOWN_ELSEWHERE})
    return Content("\n").join(out)


def header(b: dict, metrics: dict) -> Content:
    verdict = str(b.get("verdict") or "?")
    against = f" vs v{metrics['incumbent_version']}" if metrics.get("incumbent_version") else ""
    return Content.assemble(
        Content.styled(f"{b.get('mode')} over {b.get('n_rollouts')} rollouts{against}: ", "bold"),
        Content.styled(verdict, f"bold {VERDICT_STYLE.get(verdict, '$text-error')}"),
        f"  {b.get('reason') or ''}", Content.styled(f"  ({fmt(b.get('ms'), '.0f')} ms)", "$text-muted"))


EFFECT_KEYS = ("metric", "effect", "ci_low", "ci_high", "p_value", "n", "underpowered")


def effect_text(e: dict) -> str:
    """`+0.050  95% CI [+0.022, +0.078]  p 0.0041  n 80`."""
    return (f"{fmt(e.get('effect'), '+.3f')}  95% CI [{fmt(e.get('ci_low'), '+.3f')}, "
            f"{fmt(e.get('ci_high'), '+.3f')}]  p {fmt(e.get('p_value'), '.3g')}  n {fmt(e.get('n'), 'd')}")


def is_effect(value) -> bool:
    return isinstance(value, dict) and "effect" in value and "ci_low" in value


def decision_lines(d: dict) -> list[Content]:
    """The gate's decision: the targeted metric with its statistics, the harm guard, the power."""
    out = [Content.assemble(Content.styled(f"  {(d.get('metric') or 'effect'):<{NAME_WIDTH}}", "bold"),
                            effect_text(d))]
    harm = d.get("harm")
    if is_effect(harm):
        out.append(Content.assemble(Content.styled(f"  {'harm guard: ' + str(harm.get('metric') or ''):<{NAME_WIDTH}}",
                                                   "$text-muted"), effect_text(harm)))
    if d.get("underpowered"):
        mde = f"; it detects gains of {d['mde']:.3f} or more" if isinstance(d.get("mde"), (int, float)) else ""
        out.append(Content.styled(f"  underpowered: too few samples for the minimum effect{mde}", "$text-warning"))
    return out


def metric_rows(metrics: dict, depth: int = 1) -> list[Content]:
    """One row per metric (pairs folded into before → after), nested tables indented."""
    pad = "  " * depth
    width = max(8, NAME_WIDTH - 2 * (depth - 1))
    out: list[Content] = []
    for name, value in fold_pairs(metrics):
        if is_effect(value):
            out.append(Content(f"{pad}{name:<{width}}{effect_text(value)}"))
        elif isinstance(value, dict) and not is_pair(value):
            if depth >= MAX_DEPTH or not value:
                out.append(Content(f"{pad}{name:<{width}}{compact(value)}"))
            else:
                out.append(Content.styled(f"{pad}{name}", "$text-muted"))
                out += metric_rows(value, depth + 1)
        else:
            out.append(Content(f"{pad}{name:<{width}}{cell(value)}"))
    return out


def is_pair(value) -> bool:
    return isinstance(value, dict) and set(value) == {"before", "after"}


def fold_pairs(metrics: dict) -> list[tuple[str, object]]:
    """Metrics with `x_old`/`x_new` (or `x_before`/`x_after`) folded into one {before, after} row,
    and a probe's `old`/`new` summaries folded key by key."""
    out = []
    old, new = metrics.get("old"), metrics.get("new")
    folded_arms = isinstance(old, dict) and isinstance(new, dict)
    for key, value in metrics.items():
        if folded_arms and key in ("old", "new"):
            if key == "old":
                out += [(k, {"before": old.get(k), "after": new.get(k)}) for k in dict.fromkeys([*old, *new])]
            continue
        halves = [(o, n) for o, n in PAIRS if key.endswith(o) and key[: -len(o)] + n in metrics]
        if halves:
            o, n = halves[0]
            out.append((key[: -len(o)], {"before": value, "after": metrics[key[: -len(o)] + n]}))
        elif not any(key.endswith(n) and key[: -len(n)] + o in metrics for o, n in PAIRS):
            out.append((key, value))
    return out


def cell(value) -> str:
    """A before → after pair with its change, a number, or a list by size and first items."""
    if is_pair(value):
        before, after = value["before"], value["after"]
        if isinstance(before, (list, dict)) or isinstance(after, (list, dict)):
            return f"{compact(before)} → {compact(after)}"
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (before, after))
        change = ""
        if numeric:
            delta = after - before
            change = f"  ({delta:+d})" if isinstance(delta, int) else f"  ({delta:+.3f})"
        return f"{num(before)} → {num(after)}{change}"
    return compact(value)


def compact(value) -> str:
    """Lists as their size and first items, dicts as key=value pairs, numbers to three places."""
    if isinstance(value, list):
        if not value:
            return "none"
        head = ", ".join(compact(v) if not isinstance(v, list) else "(" + ", ".join(map(num, v)) + ")"
                         for v in value[:LIST_ITEMS])
        more = f", … ({len(value)} in all)" if len(value) > LIST_ITEMS else ""
        return f"{head}{more}"
    if isinstance(value, dict):
        return " · ".join(f"{k} {compact(v)}" for k, v in value.items()) or "–"
    return num(value)


def num(value) -> str:
    """Integers as integers, other numbers to three places, text as it is."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.3f}"
    return value if isinstance(value, str) else json.dumps(value)
