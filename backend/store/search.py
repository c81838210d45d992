"""What the proposer's search asks the store: move outcomes, children, history, cost.

Each function takes an open `Store` and returns plain rows; the SQL stays in
this package.

    >>> history = move_history(store)          # doctest: +SKIP
    >>> history["SAMPLING.temperature"][0]
    {'id': 7, 'status': 'failed', 'from': 1.0, 'to': 0.8, 'step': 0.2}
"""

from __future__ import annotations

from . import loads


def move_history(store) -> dict[str, list[dict]]:
    """Every earlier move of each search-space knob, oldest first: {knob: [{id, status, from, to, step}]}."""
    out: dict[str, list[dict]] = {}
    for r in store.rows("SELECT id, status, params_json FROM interventions "
                        "WHERE params_json LIKE '%\"knob\"%' ORDER BY id"):
        p = loads(r["params_json"], {}) or {}
        if isinstance(p.get("knob"), str):
            out.setdefault(p["knob"], []).append({"id": r["id"], "status": r["status"], "from": p.get("from"),
                                                  "to": p.get("to"), "step": p.get("step")})
    return out


def live_versions(store) -> list[dict]:
    """Harness versions a proposer may branch from (active and superseded; rolled-back ones are out),
    the active one first, then newest first."""
    return store.rows("SELECT * FROM harness_versions WHERE status IN ('active', 'superseded') "
                      "ORDER BY (status = 'active') DESC, id DESC")


def version_parents(store) -> dict[int, int | None]:
    """{version: its parent version} for every harness version of the run."""
    return {v["id"]: v["parent"] for v in store.rows("SELECT id, parent FROM harness_versions")}


def children(store, version_ids: list[int]) -> dict[int, list[dict]]:
    """{version: [{id, status, target, kind, params_json}]} of the candidates built on each version
    (proposals that never became code are left out)."""
    out: dict[int, list[dict]] = {v: [] for v in version_ids}
    if not version_ids:
        return out
    marks = ", ".join("?" * len(version_ids))
    for r in store.rows(f"SELECT id, parent_version, status, target, kind, params_json FROM interventions "
                        f"WHERE code != '' AND parent_version IN ({marks}) ORDER BY id", version_ids):
        out[r["parent_version"]].append(r)
    return out


def proposal_history(store, limit: int = 12) -> list[dict]:
    """The latest proposals with their backtest: {id, title, kind, target, proposer, status, reason,
    hypothesis, mode, verdict, effect, ci_low, ci_high}, newest first."""
    return store.rows(
        "SELECT i.id, i.title, i.kind, i.target, i.proposer, i.status, i.reason, i.hypothesis, "
        "b.mode, b.verdict, b.effect, b.ci_low, b.ci_high FROM interventions i "
        "LEFT JOIN backtests b ON b.id = (SELECT max(id) FROM backtests WHERE intervention_id = i.id) "
        "ORDER BY i.id DESC LIMIT ?", (limit,))


def diagnoses_of(store, rollout_ids: list[int]) -> dict[int, list[dict]]:
    """{rollout id: [{label, evidence}]} for these rollouts."""
    out: dict[int, list[dict]] = {i: [] for i in rollout_ids}
    if not rollout_ids:
        return out
    marks = ", ".join("?" * len(rollout_ids))
    for d in store.rows(f"SELECT rollout_id, label, evidence FROM diagnoses WHERE rollout_id IN ({marks}) "
                        f"ORDER BY id", rollout_ids):
        out[d["rollout_id"]].append({"label": d["label"], "evidence": d["evidence"]})
    return out


def backtest_costs(store) -> list[dict]:
    """One row per backtest: {round_id, mode, n_rollouts, ms}, in order."""
    return store.rows("SELECT i.round_id, b.mode, coalesce(b.n_rollouts, 0) AS n_rollouts, coalesce(b.ms, 0) AS ms "
                      "FROM backtests b JOIN interventions i ON i.id = b.intervention_id ORDER BY b.id")


def training_cost(store) -> dict:
    """{rollouts, ms}: what training generated and how long its steps took in all."""
    row = store.rows("SELECT coalesce(sum(n_rollouts), 0) AS rollouts, coalesce(sum(total_ms), 0) AS ms FROM steps")
    return {"rollouts": int(row[0]["rollouts"]), "ms": float(row[0]["ms"])}


def round_outcomes(store) -> list[dict]:
    """Per round, in order: {round_id, step, tried, passed, inconclusive, failed, knobs}; `knobs` lists the
    search-space knobs its moves explored."""
    rounds = {r["id"]: {"round_id": r["id"], "step": r["step"], "tried": 0, "passed": 0, "inconclusive": 0,
                        "failed": 0, "knobs": []}
              for r in store.rows("SELECT id, step FROM rounds ORDER BY id")}
    for r in store.rows("SELECT round_id, status, history_json, params_json FROM interventions "
                        "WHERE round_id IS NOT NULL ORDER BY id"):
        e = rounds.get(r["round_id"])
        if e is None:
            continue
        e["tried"] += 1
        # the backtest's verdict, even when the candidate was promoted or vetoed since
        seen = {h.get("to") for h in loads(r["history_json"], []) or []}
        verdict = next((v for v in ("passed", "inconclusive") if v in seen), "failed")
        e[verdict] += 1
        knob = (loads(r["params_json"], {}) or {}).get("knob")
        if knob and knob not in e["knobs"]:
            e["knobs"].append(knob)
    return list(rounds.values())
