"""`evotui export RUN_DIR --format jsonl|parquet`: a run's rollouts as a dataset.

One record per stored rollout, with the evidence a study of the run needs: the
prompt and completion, the harness's reward and its terms, the evaluator's
verdict, the diagnoses (label, evidence, validity), the advantage and whether
it was trained on, the harness and policy versions, and for multi-turn domains
the turns. Every record has the same fields and types (reward terms and
diagnoses are lists of small records, not maps whose keys change with the
harness version), so both files load with the `datasets` library:

    load_dataset("json", data_files="rollouts.jsonl")
    load_dataset("parquet", data_files="rollouts.parquet")

JSON Lines needs nothing installed; Parquet needs pyarrow (`evotui[export]`).
The file is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from backend.errors import UsageError
from backend.harness.semantics import is_trained
from backend.store import Store, loads

FORMATS = ("jsonl", "parquet")
PAGE = 500


def record(row: dict, diagnoses: list[dict], turns: list[dict]) -> dict:
    """One rollout row of the store, with its diagnoses and turns, as an export record."""
    task = loads(row.get("task_json"), {}) or {}
    terms = loads(row.get("rewards_json"), {}) or {}
    return {
        "id": row["id"], "step": row["step"], "domain": row.get("domain") or "", "task_id": row.get("task_id") or "",
        "group_idx": row.get("group_idx"), "idx": row.get("idx"),
        "question": str(task.get("question", "")), "answer": str(task.get("answer", "")),
        "prompt": row.get("prompt") or "", "completion": row.get("completion") or "",
        "prompt_tokens": row.get("prompt_tokens"), "completion_tokens": row.get("completion_tokens"),
        "finish": row.get("finish") or "", "status": row.get("status") or "ok", "error": row.get("error") or "",
        "reward": row.get("reward"),
        "reward_terms": [{"name": str(k), "value": float(v)} for k, v in terms.items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool)],
        "verdict": row.get("verdict") or "", "correct": bool(row.get("correct")),
        "verdict_score": row.get("verdict_score"), "verdict_json": row.get("verdict_json") or "{}",
        "labels": sorted({d["label"] for d in diagnoses}),
        "diagnoses": [{"label": d["label"], "evidence": d.get("evidence") or "", "validity": bool(d.get("validity"))}
                      for d in diagnoses],
        "advantage": row.get("advantage"), "trained": is_trained(row.get("kept"), row.get("advantage") or 0.0),
        "harness_version": row.get("harness_version"), "policy_version": row.get("policy_version"),
        "turns": [{"turn": t.get("turn"), "role": t.get("role") or "", "tool": t.get("tool") or "",
                   "args_json": t.get("args_json") or "", "content": t.get("content") or "", "tokens": t.get("tokens")}
                  for t in turns],
    }


def records(store: Store, page: int = PAGE) -> Iterator[dict]:
    """Every rollout of the run as an export record, in id order, `page` rows at a time."""
    after = 0
    while rows := store.rollouts_page(after, page):
        ids = [r["id"] for r in rows]
        diags: dict[int, list[dict]] = {}
        for d in store.diagnoses_of(ids):
            diags.setdefault(d["rollout_id"], []).append(d)
        turns: dict[int, list[dict]] = {}
        for t in store.turns_of(ids):
            turns.setdefault(t["rollout_id"], []).append(t)
        for r in rows:
            yield record(r, diags.get(r["id"], []), turns.get(r["id"], []))
        after = ids[-1]


def export(run_dir: Path, fmt: str, out: Path | None = None) -> tuple[Path, int]:
    """Write the run's rollouts to `out` (default RUN_DIR/export/rollouts.FORMAT); returns (path, count)."""
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got '{fmt}'")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UsageError("--format parquet needs pyarrow (pip install 'evotui[export]'); "
                             "--format jsonl needs nothing") from None
    out = Path(out) if out else Path(run_dir) / "export" / f"rollouts.{fmt}"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    store = Store.open(run_dir, readonly=True)
    try:
        n = (_write_jsonl if fmt == "jsonl" else _write_parquet)(records(store), tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        store.close()
    os.replace(tmp, out)
    return out, n


def _write_jsonl(recs: Iterator[dict], path: Path) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
            n += 1
    return n


def _schema():
    import pyarrow as pa

    text, i64, f64, flag = pa.string(), pa.int64(), pa.float64(), pa.bool_()
    return pa.schema([
        ("id", i64), ("step", i64), ("domain", text), ("task_id", text), ("group_idx", i64), ("idx", i64),
        ("question", text), ("answer", text), ("prompt", text), ("completion", text), ("prompt_tokens", i64),
        ("completion_tokens", i64), ("finish", text), ("status", text), ("error", text), ("reward", f64),
        ("reward_terms", pa.list_(pa.struct([("name", text), ("value", f64)]))),
        ("verdict", text), ("correct", flag), ("verdict_score", f64), ("verdict_json", text),
        ("labels", pa.list_(text)),
        ("diagnoses", pa.list_(pa.struct([("label", text), ("evidence", text), ("validity", flag)]))),
        ("advantage", f64), ("trained", flag), ("harness_version", i64), ("policy_version", i64),
        ("turns", pa.list_(pa.struct([("turn", i64), ("role", text), ("tool", text), ("args_json", text),
                                      ("content", text), ("tokens", i64)]))),
    ])


def _write_parquet(recs: Iterator[dict], path: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema, n, batch = _schema(), 0, []
    with pq.ParquetWriter(str(path), schema) as writer:
        for r in recs:
            batch.append(r)
            if len(batch) >= PAGE:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                n, batch = n + len(batch), []
        if batch or not n:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            n += len(batch)
    return n
