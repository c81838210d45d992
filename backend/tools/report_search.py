"""The report's search section: what the proposer tried, what it cost, and its frontier.

Per evolving run: rounds (how many proposed nothing, and of those how many
had no untried move the run's gate could judge), candidates tried,
passed, inconclusive and failed, the search-space knobs explored, the search
budget in training rollouts (probe and trial arms, replay converted by time:
`backend/evolve/budget.py`) against the training rollouts, and the frontier
of harness versions with each member's lineage. A per-round table follows
for each run.
"""

from __future__ import annotations

from backend.evolve.budget import search_budget
from backend.evolve.frontier import frontier_now
from backend.evolve.space import NO_EFFECT, changed_nothing
from backend.store import Store, loads


def search_facts(s: Store) -> dict:
    """What `report.collect` keeps of one run's search."""
    rounds = s.round_outcomes()
    cfg = loads(s.run()["config_json"], {}) or {}
    evo = cfg.get("evolve") or {}
    k = int(evo.get("frontier", evo.get("population", 4)) or 4)  # runs stored before the rename
    return {"rounds": rounds, "budget": search_budget(s),
            "frontier": [m.to_dict() for m in frontier_now(s, k)] if rounds else []}


def _member(m: dict) -> str:
    chain = " <- ".join(f"v{v}" for v in m["ancestry"])
    return (f"v{m['version']} ({m['status']}; children {m['children']}, passed {m['passed']}, "
            f"score {m['score']:.2f}): {chain}")


def _nothing(x: dict) -> str:
    """The knobs cell of a round that explored none."""
    if x.get("spent") is None:
        return "–"
    return "spent" + (f" (left for a trial: {', '.join(x['spent'])})" if x["spent"] else "")


def search_lines(arms: dict[str, list[dict]]) -> list[str]:
    """Markdown lines of the section (nothing when no run evolved)."""
    runs = [(arm, r) for arm, rs in arms.items() for r in rs if r.get("search", {}).get("rounds")]
    if not runs:
        return []
    md = ["## Search: what the proposer tried and what it cost", "",
          "Candidates by backtest verdict; knobs: distinct search-space knobs its moves explored. Search "
          "rollouts: probe and trial arms (candidate and incumbent) plus replay time converted at the run's "
          "own training milliseconds per rollout; the share is of the run's training rollouts.", "",
          "Empty: rounds that tried nothing. Spent: empty rounds whose proposer had no untried move this "
          "run's gate can judge (what is left needs a trial, and `evolve.trials` is off); an empty round "
          "that is not spent is a search that ran dry too early.", "",
          "Round errors: rounds that stopped on an error (their candidates are lost; the first error "
          "of each such run is listed below the table).", "",
          "Changed nothing: inconclusive replays that left training's update as it was, or whose interval lies "
          f"within {NO_EFFECT} of 0 (`space.changed_nothing`); the proposer moves such a knob farther next time "
          "instead of walking its grid.", "",
          "| run | rounds | empty | spent | round errors | tried | passed | inconclusive | failed "
          "| changed nothing | knobs | search rollouts | replay (equiv.) | share of training |", "|---" * 14 + "|"]
    for arm, r in runs:
        rounds, b = r["search"]["rounds"], r["search"]["budget"]
        tot = {k: sum(x[k] for x in rounds) for k in ("tried", "passed", "inconclusive", "failed")}
        knobs = {k for x in rounds for k in x["knobs"]}
        share = "n/a" if b["share_of_training"] is None else f"{b['share_of_training']:.1%}"
        empty, errors = sum(1 for x in rounds if not x["tried"]), sum(1 for x in rounds if x.get("error"))
        spent = sum(1 for x in rounds if not x["tried"] and x.get("spent") is not None)
        unchanged = sum(1 for d in r.get("decisions", []) if changed_nothing(d["verdict"], d))
        md.append(f"| {arm} s{r['seed']} | {len(rounds)} | {empty} | {spent} | {errors} | {tot['tried']} | "
                  f"{tot['passed']} | {tot['inconclusive']} | {tot['failed']} | {unchanged} | {len(knobs)} | "
                  f"{b['search_rollouts']:.0f} | {b['replay_rollout_equiv']:.0f} | {share} |")
    for arm, r in runs:
        errors = [x for x in r["search"]["rounds"] if x.get("error")]
        if errors:
            md += ["", f"- **{arm} s{r['seed']}**: {len(errors)} round(s) stopped on an error; the first, at step "
                       f"{errors[0]['step']}: `{errors[0]['error'][:300]}`"]
    for arm, r in runs:
        md += ["", f"**{arm} s{r['seed']}** frontier:", ""]
        md += [f"- {_member(m)}" for m in r["search"]["frontier"]] or ["- (none)"]
        md += ["", "<details><summary>per round</summary>", "", "| step | tried | passed | inconclusive | failed "
               "| knobs explored |", "|---|---|---|---|---|---|"]
        md += [f"| {x['step']} | {x['tried']} | {x['passed']} | {x['inconclusive']} | {x['failed']} | "
               f"{', '.join(x['knobs']) or _nothing(x)} |" for x in r["search"]["rounds"]]
        md += ["", "</details>"]
    return md + [""]
