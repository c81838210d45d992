"""The report's search section: what the proposer tried, what it cost, and its frontier.

Per evolving run: rounds (how many proposed nothing, and of those how many
had no untried move the run's gate could judge), candidates tried,
passed, inconclusive and failed, the search-space knobs explored, the search
budget in training rollouts (probe and trial arms, replay converted by time:
`backend/evolve/budget.py`) against the training rollouts, and the frontier
of harness versions with each member's lineage. A per-round table follows
for each run, then the search memory's table (`backend/evolve/search_memory.py`): per knob or
change family, its tries, what they cost (replay rows, probe and trial rollouts) and returned
(passed, inconclusive, changed nothing, failed, promoted), the draws the memory held back, and
what it holds now and why.
"""

from __future__ import annotations

from dataclasses import asdict

from backend.evolve import search_memory
from backend.evolve.budget import search_budget
from backend.evolve.frontier import frontier_now
from backend.evolve.space import NO_EFFECT, changed_nothing
from backend.store import Store, loads


SHOWN = 8
"""Holds listed per run (families first); the rest are counted."""


def search_facts(s: Store) -> dict:
    """What `report.collect` keeps of one run's search."""
    rounds = s.round_outcomes()
    cfg = loads(s.run()["config_json"], {}) or {}
    evo = cfg.get("evolve") or {}
    k = int(evo.get("frontier", evo.get("population", 4)) or 4)  # runs stored before the rename
    memory = search_memory.load(s)
    held = [*memory.family_holds.values(),
            *(h for h in memory.move_holds.values() if h.key.family not in memory.family_holds)]
    return {"rounds": rounds, "budget": search_budget(s),
            "frontier": [m.to_dict() for m in frontier_now(s, k)] if rounds else [],
            "memory": [asdict(t) for t in search_memory.tally(memory)],
            "held_now": [h.text()[len(search_memory.HELD_PREFIX):] for h in held]}


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
    return md + [""] + memory_lines(runs)


def memory_lines(runs: list[tuple[str, dict]]) -> list[str]:
    """The search memory's section: per run, one row per knob or family, most rollouts first."""
    runs = [(arm, r) for arm, r in runs if r["search"].get("memory")]
    if not runs:
        return []
    md = ["## Search memory: what each knob and family cost and returned", "",
          "Tries: candidates the gate judged. Replay rows: stored rollouts re-scored (nothing generated). "
          "Rollouts: probe and trial rollouts generated, each with an equal share of the incumbent arm its "
          "round shared. Changed nothing: inconclusive with no change the gate could see (counted apart from "
          "inconclusive). Held back: draws the memory refused because the move (or, after "
          f"{search_memory.FAMILY_TRIES} such tries in a row, the family) was inconclusive or changed nothing and "
          "validation accuracy has not moved beyond its 95% interval since (paired over the same problems).", "",
          "| run | knob / family | tries | replay rows | rollouts | passed | inconclusive | changed nothing | failed "
          "| promoted | held back |", "|---" * 11 + "|"]
    for arm, r in runs:
        md += [f"| {arm} s{r['seed']} | {search_memory.family_name(f['family'])} | {f['tries']} | {f['replay_rows']} | "
               f"{f['rollouts']:.0f} | {f['passed']} | {f['inconclusive']} | {f['nothing']} | {f['failed']} | "
               f"{f['promoted']} | {f['held']} |" for f in r["search"]["memory"]]
    for arm, r in runs:
        held = r["search"].get("held_now") or []
        md += ["", f"**{arm} s{r['seed']}** held now:" + (" none" if not held else "\n")]
        md += [f"- {h}" for h in held[:SHOWN]] + ([f"- ... and {len(held) - SHOWN} more"] if len(held) > SHOWN else [])
    return md + [""]
