"""The report's invariance check: does evolution that promoted nothing leave training unchanged?

Each evolving arm has a static twin with the same starting harness (`coevolve`
and `static`, `coevolve-expert` and `static-expert`). For every seed both ran,
their per-step training records (loss, gradient norm, mean reward, entropy)
are compared exactly, step by step. Probes, trials and replays happen between
steps and must not touch the next step, so the two runs must be identical up
to the first step trained under a promoted change that can alter training. A
`diagnostic` change only relabels rollouts (it alters training only through a
filter that drops invalid rollouts, which the shipped harnesses leave off), so
it does not explain a divergence. The check says, per seed, how far the two
agree and what was promoted before they split; a divergence with no
training-relevant promotion before it breaks the invariant.

    >>> first_divergence([{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.4}],
    ...                  [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.3}])
    2
"""

from __future__ import annotations

TWINS = {"coevolve": "static", "coevolve-expert": "static-expert"}
LABELS_ONLY = {"diagnostic"}
"""Intervention kinds that change labels, not what is trained (see the module docstring)."""
COMPARED = ("loss", "grad_norm", "reward_mean", "entropy")


def first_divergence(a: list[dict], b: list[dict]) -> int | None:
    """The first step whose compared fields differ (or that only one run has); None if identical."""
    sb = {r["step"]: r for r in b}
    for r in sorted(a, key=lambda r: r["step"]):
        o = sb.get(r["step"])
        if o is None or any(r.get(k) != o.get(k) for k in COMPARED):
            return r["step"]
    extra = sorted(set(sb) - {r["step"] for r in a})
    return extra[0] if extra else None


def twin_pairs(arms: dict[str, list[dict]]) -> list[tuple[str, str, list[tuple[dict, dict]]]]:
    """(evolving arm, its twin, [(run, the twin's run of the same seed)]) for each pair of `TWINS`."""
    out = []
    for arm, twin in TWINS.items():
        twins = {r["seed"]: r for r in arms.get(twin, [])}
        out.append((arm, twin, [(r, twins[r["seed"]]) for r in arms.get(arm, []) if r["seed"] in twins]))
    return out


def alters_training(promotion: dict) -> bool:
    """Whether a promoted change can alter training (see `LABELS_ONLY`)."""
    return promotion["kind"] not in LABELS_ONLY


def invariance_rows(arms: dict[str, list[dict]]) -> list[dict]:
    """Per evolving run with a same-seed twin: {arm, twin, seed, steps, diverged, promoted_before, holds}."""
    out = []
    for arm, twin, pairs in twin_pairs(arms):
        for r, t in pairs:
            d = first_divergence(r["steps"], t["steps"])
            before = [p for p in r["promoted"] if d is not None and (p["promoted_step"] or 0) < d]
            out.append({"arm": arm, "twin": twin, "seed": r["seed"], "steps": len(r["steps"]), "diverged": d,
                        "promoted_before": [f"#{p['id']} {p['kind']} (step {p['promoted_step']})" for p in before],
                        "holds": d is None or any(alters_training(p) for p in before)})
    return out


def invariance_lines(arms: dict[str, list[dict]]) -> list[str]:
    """Markdown lines of the section (nothing without twin pairs)."""
    rows = invariance_rows(arms)
    if not rows:
        return []
    md = ["## Invariance: evolving runs against their static twins", "",
          f"Per-step {', '.join(COMPARED)} compared exactly, seed by seed. A run may leave its twin only "
          "after promoting a change that alters training; diagnostic changes only relabel rollouts. A "
          "divergence with no such promotion before it breaks the invariant.", "",
          "| arm | twin | seed | steps | identical through | promoted before the divergence | holds |",
          "|---|---|---|---|---|---|---|"]
    for x in rows:
        same = "all steps" if x["diverged"] is None else f"step {x['diverged'] - 1}"
        holds = "yes" if x["holds"] else "**no**"
        md.append(f"| {x['arm']} | {x['twin']} | {x['seed']} | {x['steps']} | {same} | "
                  f"{'; '.join(x['promoted_before']) or '-'} | {holds} |")
    return md + [""]
