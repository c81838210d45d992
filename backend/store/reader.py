"""Read queries for the TUI: paged rollouts with filters, run deltas, details.

Everything the TUI shows is read here (no textual import; the only SQL outside
`backend/store/__init__.py`). Rollouts are paged newest first with keyset
paging (`id < before`), never loaded whole; `read_delta` returns only rows
newer than a cursor, so a poll costs the same at step 10 and at step 10 000.

Reads go through `RunDB`, plain sqlite3 opened read-only: this module imports
neither sqlite-utils nor the rest of the store (sqlite-utils pulls in pandas
when it is installed, a second of start-up the TUI does not need). Every
function also accepts a `Store`, which has the same read methods.

    >>> reader = RunReader.open("runs/x")
    >>> rows = reader.call(rollout_page, RolloutFilter(verdict="wrong"))
    >>> delta = reader.call(read_delta, PollCursor())
"""

from __future__ import annotations

import re
import sqlite3
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from backend.errors import EvoError
from .base import loads  # one JSON reader for the package

PAGE = 50
FTS_TABLE = "rollouts_fts"
"""Full-text index of rollouts' prompt, completion and task id (FTS5 with external content: the
text lives once, in `rollouts`; schema m007_rollouts_fts creates it and its triggers)."""
FTS_TOKENIZE = "unicode61 tokenchars '_'"
WORD = re.compile(r"\w+")
"""A word as FTS_TOKENIZE splits text: letters, digits and '_' (so `test_ops` is one word)."""
MIX_WINDOW = 300  # steps of failure mix kept for the dashboard plot
EVENTS_BACKLOG = 500

ROLLOUT_COLS = (
    "r.id, r.step, r.domain, r.task_id, r.group_idx, r.idx, r.reward, r.verdict, r.correct, r.finish, "
    "r.status, r.harness_version, r.policy_version, r.completion_tokens, r.labels"
)
STEP_COLS = (
    "step, harness_version, policy_version, n_rollouts, reward_mean, reward_std, verdict_acc, "
    "agreement, dead_group_frac, mean_completion_tokens, truncated_frac, entropy, loss, kl, "
    "tokens, tokens_per_s, gen_ms, score_ms, diagnose_ms, train_ms, store_ms, total_ms"
)
VERSION_COLS = "id, parent, created_at, sha, status, intervention_id, note"
INTERVENTION_COLS = (
    "id, round_id, created_at, updated_at, kind, target, title, status, score, proposer, "
    "parent_version, child_version, promoted_step, reason"
)


class RunNotReadable(EvoError, RuntimeError):
    """The folder holds no readable evotui run (the message says why, in one line)."""


class RunDB:
    """A run database opened read-only with sqlite3: the read methods of `Store`, nothing else."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if path.is_dir():
            path = path / "run.db"
        if not path.is_file():
            raise RunNotReadable(f"not an evotui run: {path} does not exist")
        self.path = path
        try:
            self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30, check_same_thread=False)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute("PRAGMA busy_timeout = 30000")
            tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as e:
            raise RunNotReadable(f"cannot read {path}: {e}") from None
        if not {"runs", "rollouts", "commands"} <= tables:
            raise RunNotReadable(f"{path} is not an evotui run database")

    def rows(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute(sql, tuple(params)).fetchall()]

    def scalar(self, sql: str, params: Any = ()) -> Any:
        row = self.conn.execute(sql, tuple(params)).fetchone()
        return row[0] if row else None

    def get(self, table: str, pk: Any) -> dict[str, Any] | None:
        row = self.conn.execute(f"SELECT * FROM {table} WHERE rowid = ?", (pk,)).fetchone()
        return dict(row) if row else None

    def data_version(self) -> int:
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        self.conn.close()


class RunReader:
    """One read-only connection with a lock, shared by worker threads.

    `interrupt()` aborts the query in flight (a newer filter supersedes it).
    """

    def __init__(self, store: RunDB) -> None:
        self.store = store
        self._lock = threading.Lock()

    @classmethod
    def open(cls, run_dir: str | Path) -> "RunReader":
        return cls(RunDB(run_dir))

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return fn(self.store, *args, **kwargs)

    def interrupt(self) -> None:
        self.store.conn.interrupt()

    def close(self) -> None:
        with self._lock:
            self.store.close()


# ---------------------------------------------------------------- rollouts


@dataclass(frozen=True)
class RolloutFilter:
    """What the rollouts table shows; empty fields do not filter.

    `text` searches prompt, completion and task id for its words in that order ("calc/ops"
    finds "calc/ops.py"; "need*" finds "needle") through the full-text index (schema
    m007_rollouts_fts); text without a word character, or a run written before that
    migration, is searched as a plain substring.
    """

    domain: str | None = None
    label: str | None = None
    verdict: str | None = None
    harness_version: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    text: str = ""

    def is_empty(self) -> bool:
        return self == RolloutFilter()

    def sql(self, fts: bool = True) -> tuple[str, str, list[Any]]:
        """(FROM clause, WHERE conditions, params). One table drives the scan newest first and
        stops at the page's LIMIT: the text index when searching words, else the label's index,
        else rollouts; every other condition is checked on the rows it yields."""
        source = "rollouts r"
        conds: list[str] = []
        params: list[Any] = []
        phrase = fts_phrase(self.text) if fts else None
        if phrase:
            source = f"{FTS_TABLE} f JOIN rollouts r ON r.id = f.rowid"
            conds.append(f"{FTS_TABLE} MATCH ?")
            params.append(phrase)
        if self.label and phrase:
            conds.append("EXISTS (SELECT 1 FROM diagnoses d WHERE d.rollout_id = r.id AND d.label = ?)")
            params.append(self.label)
        elif self.label:
            source = "diagnoses d JOIN rollouts r ON r.id = d.rollout_id"
            conds.append("d.label = ?")
            params.append(self.label)
        for col, value in (("domain", self.domain), ("verdict", self.verdict),
                           ("harness_version", self.harness_version)):
            if value is not None and value != "":
                conds.append(f"r.{col} = ?")
                params.append(value)
        if self.reward_min is not None:
            conds.append("r.reward >= ?")
            params.append(self.reward_min)
        if self.reward_max is not None:
            conds.append("r.reward <= ?")
            params.append(self.reward_max)
        if self.text.strip() and not phrase:
            like = "%" + self.text.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            conds.append("(r.completion LIKE ? ESCAPE '\\' OR r.prompt LIKE ? ESCAPE '\\' "
                         "OR r.task_id LIKE ? ESCAPE '\\')")
            params += [like, like, like]
        return source, " AND ".join(conds) or "1", params

    def key_col(self, fts: bool = True) -> str:
        # Order by the driving table's key so SQLite walks its index and stops at LIMIT.
        if fts and fts_phrase(self.text):
            return "f.rowid"
        return "d.rollout_id" if self.label else "r.id"


def fts_phrase(text: str) -> str | None:
    """The FTS5 query for what the operator typed: its words as one phrase (whole words, so a
    common word is a page of index reads, not a merge of every word it begins); a trailing `*`
    makes the last word a prefix. None when the text has no word to search.

    >>> fts_phrase("calc/ops"), fts_phrase("need*"), fts_phrase("%")
    ('"calc ops"', '"need"*', None)
    """
    words = WORD.findall(text)
    if not words:
        return None
    return '"' + " ".join(words) + '"' + ("*" if text.rstrip().endswith("*") else "")


def has_fts(store: RunDB) -> bool:
    """Whether the run has the text index (a run written before m007_rollouts_fts, opened by a
    reader that never migrates, is searched by substring instead)."""
    return store.scalar("SELECT 1 FROM sqlite_master WHERE name = ?", (FTS_TABLE,)) is not None


def rollout_page(store: RunDB, flt: RolloutFilter, before: int | None = None,
                 after: int | None = None, limit: int = PAGE) -> list[dict[str, Any]]:
    """Rollouts matching `flt`, newest first: older than `before` or newer than `after`."""
    fts = bool(flt.text.strip()) and has_fts(store)
    source, where, params = flt.sql(fts)
    key = flt.key_col(fts)
    if before is not None:
        where += f" AND {key} < ?"
        params.append(before)
    if after is not None:
        where += f" AND {key} > ?"
        params.append(after)
    rows = store.rows(f"SELECT {ROLLOUT_COLS} FROM {source} WHERE {where} ORDER BY {key} DESC LIMIT ?",
                      [*params, limit])
    seen: set[int] = set()
    out = []
    for r in rows:
        if r["id"] not in seen:
            seen.add(r["id"])
            out.append(r)
    return out


def rollout_detail(store: RunDB, rid: int) -> dict[str, Any] | None:
    """One rollout with its labels and evidence, its group, and its turns."""
    row = store.get("rollouts", rid)
    if row is None:
        return None
    row.pop("token_ids_json", None)
    diagnoses = store.rows("SELECT label, evidence, validity FROM diagnoses WHERE rollout_id = ? ORDER BY id",
                           (rid,))
    group = store.rows(
        "SELECT id, idx, reward, verdict, finish, labels FROM rollouts "
        "WHERE step = ? AND group_idx = ? AND coalesce(task_id, '') = coalesce(?, '') ORDER BY idx",
        (row["step"], row["group_idx"], row["task_id"]))
    turns = store.rows("SELECT turn, role, tool, args_json, content, tokens, ms FROM turns "
                       "WHERE rollout_id = ? ORDER BY turn, id", (rid,))
    return {"rollout": row, "diagnoses": diagnoses, "group": group, "turns": turns,
            "rewards": loads(row.get("rewards_json"), {}) or {},
            "verdict": loads(row.get("verdict_json"), {}) or {}}


def distinct_values(store: RunDB, table: str, column: str, limit: int = 200) -> list[Any]:
    """Distinct values of an indexed column by skipping through the index (no full scan)."""
    out: list[Any] = []
    value = store.scalar(f"SELECT min({column}) FROM {table}")
    while value is not None and len(out) < limit:
        out.append(value)
        value = store.scalar(f"SELECT min({column}) FROM {table} WHERE {column} > ?", (value,))
    return out


@dataclass(frozen=True)
class FilterChoices:
    domains: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    harness_versions: list[int] = field(default_factory=list)


def filter_choices(store: RunDB) -> FilterChoices:
    run = store.get("runs", 1) or {}
    domains = [d.strip() for d in (run.get("domain") or "").split(",") if d.strip()]
    return FilterChoices(
        domains=domains or distinct_values(store, "rollouts", "domain", 20),
        labels=distinct_values(store, "diagnoses", "label"),
        verdicts=distinct_values(store, "rollouts", "verdict", 50),
        harness_versions=distinct_values(store, "rollouts", "harness_version"),
    )


# ---------------------------------------------------------------- details

DECISION_COLS = ("metric", "effect", "ci_low", "ci_high", "p_value", "n", "underpowered")
"""A decision's statistics on its backtests row (schema m003_gate)."""


def has_columns(store: RunDB, table: str, cols: tuple[str, ...]) -> bool:
    """Whether `table` has these columns: a run written before a migration is read as it is
    (readers never migrate), so newer columns are asked for only where they exist."""
    have = {r["name"] for r in store.rows(f"PRAGMA table_info({table})")}
    return set(cols) <= have


def decisions(store: RunDB) -> dict[int, dict[str, Any]]:
    """{intervention id: the statistics of its latest backtest} (empty before m003_gate)."""
    if not has_columns(store, "backtests", DECISION_COLS):
        return {}
    rows = store.rows(f"SELECT intervention_id, {', '.join(DECISION_COLS)} FROM backtests WHERE id IN "
                      "(SELECT max(id) FROM backtests GROUP BY intervention_id) AND effect IS NOT NULL")
    return {r.pop("intervention_id"): r for r in rows}



def intervention_detail(store: RunDB, iid: int) -> dict[str, Any] | None:
    row = store.get("interventions", iid)
    if row is None:
        return None
    row["history"] = loads(row.get("history_json"), []) or []
    row["skills"] = loads(row.get("skills_json"), []) or []
    row["params"] = loads(row.get("params_json"), {}) or {}
    row["backtests"] = [dict(b, metrics=loads(b.get("metrics_json"), {}) or {}) for b in store.rows(
        "SELECT * FROM backtests WHERE intervention_id = ? ORDER BY id", (iid,))]
    return row


def harness_version(store: RunDB, vid: int) -> dict[str, Any] | None:
    return store.get("harness_versions", vid)


def harness_code_known(store: RunDB, code: str) -> bool:
    """Whether `code` is the text of some stored harness version (not a hand edit)."""
    return store.scalar("SELECT 1 FROM harness_versions WHERE code = ? LIMIT 1", (code,)) is not None


def code_proposed(store: RunDB, code: str) -> bool:
    """Whether `code` is already some intervention's candidate (a hand edit proposed before)."""
    return store.scalar("SELECT 1 FROM interventions WHERE code = ? LIMIT 1", (code,)) is not None


def skills(store: RunDB, text: str = "") -> list[dict[str, Any]]:
    """Skill cards, most used first; `text` searches name, domain, trigger, change, evidence."""
    cols = "id, name, domain, uses, helped, source, created_at, trigger_json, change_json"
    if not text.strip():
        return store.rows(f"SELECT {cols} FROM skills ORDER BY uses DESC, name")
    like = f"%{text.strip()}%"
    return store.rows(
        f"SELECT {cols} FROM skills WHERE name LIKE ? OR domain LIKE ? OR trigger_json LIKE ? "
        "OR change_json LIKE ? OR evidence_json LIKE ? ORDER BY uses DESC, name", [like] * 5)


def skill(store: RunDB, sid: int) -> dict[str, Any] | None:
    row = store.get("skills", sid)
    if row:
        for key in ("trigger", "change", "evidence"):
            row[key] = loads(row.get(f"{key}_json"), {})
    return row


def label_rollouts(store: RunDB, label: str, step_lo: int, step_hi: int, limit: int = PAGE) -> list[dict[str, Any]]:
    """Rollouts of a round's window carrying `label`, newest first."""
    return store.rows(
        f"SELECT {ROLLOUT_COLS}, d.evidence FROM diagnoses d JOIN rollouts r ON r.id = d.rollout_id "
        "WHERE d.label = ? AND d.step BETWEEN ? AND ? ORDER BY d.rollout_id DESC LIMIT ?",
        (label, step_lo, step_hi, limit))


def rollouts_by_ids(store: RunDB, ids: list[int]) -> list[dict[str, Any]]:
    """Rollouts by id, newest first (a failure table's examples)."""
    ids = [int(i) for i in ids][:PAGE]
    marks = ",".join("?" * len(ids))
    return store.rows(f"SELECT {ROLLOUT_COLS} FROM rollouts r WHERE r.id IN ({marks}) ORDER BY r.id DESC", ids)


# ---------------------------------------------------------------- polling


@dataclass(frozen=True)
class PollCursor:
    """What a poll has already seen; `read_delta` returns only what is newer."""

    data_version: int | None = None
    step: int = 0
    mix_step: int = 0
    eval: int = 0
    event: int = 0
    round: int = 0
    command: int = 0
    pending: tuple[int, ...] = ()
    open_rounds: tuple[int, ...] = ()  # rounds seen while still running: read again until finished
    versions_stamp: tuple[Any, ...] = ()
    interventions_stamp: tuple[Any, ...] = ()
    skills_stamp: tuple[Any, ...] = ()


@dataclass(frozen=True)
class RunDelta:
    """New rows since the last poll (an immutable snapshot for the UI thread)."""

    cursor: PollCursor
    run: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)
    mix: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    versions: list[dict[str, Any]] | None = None  # every version, when any was added or changed status; else None
    interventions: list[dict[str, Any]] | None = None  # likewise for interventions (with their decision)
    skills_changed: bool = False
    max_rollout_id: int = 0


# A stamp changes whenever a row of its (small) table is added or changes state, so a poll
# re-reads the table then and only then: an old version superseded by a promotion, an
# intervention moving from passed to promoted, a new backtest behind a decision.
def versions_stamp(store: RunDB) -> tuple[Any, ...]:
    return tuple(store.rows("SELECT count(*) AS n, group_concat(id || ':' || coalesce(status, ''), ',') AS s "
                            "FROM harness_versions")[0].values())


def interventions_stamp(store: RunDB) -> tuple[Any, ...]:
    row = store.rows("SELECT count(*) AS n, max(updated_at) AS t, "
                     "group_concat(id || ':' || coalesce(status, '') || ':' || coalesce(child_version, ''), ',') AS s "
                     "FROM interventions")[0]
    return (row["n"], row["t"], hash(row["s"]), store.scalar("SELECT max(id) FROM backtests"))


def skills_stamp(store: RunDB) -> tuple[Any, ...]:
    return tuple(store.rows("SELECT count(*) AS n, max(updated_at) AS t, sum(uses) AS u FROM skills")[0].values())


ROUND_RUNNING = "running"  # a round's summary from `add_round` until `finish_round` writes the real one


def read_delta(store: RunDB, cursor: PollCursor, force: bool = False) -> RunDelta | None:
    """Rows newer than `cursor`; None when nothing was committed since (PRAGMA data_version)."""
    dv = store.data_version()
    if dv == cursor.data_version and not force:
        return None
    run = store.get("runs", 1) or {}
    steps = store.rows(f"SELECT {STEP_COLS} FROM steps WHERE step > ? ORDER BY step", (cursor.step,))
    last_step = steps[-1]["step"] if steps else cursor.step
    mix_lo = max(cursor.mix_step, last_step - MIX_WINDOW)
    mix = store.rows("SELECT step, label, count(*) AS n FROM diagnoses WHERE step > ? AND step <= ? "
                     "GROUP BY step, label ORDER BY step", (mix_lo, last_step))
    split = "split" if has_columns(store, "evals", ("split",)) else "'validation' AS split"
    evals = store.rows(f"SELECT id, step, {split}, accuracy, agreement, n, policy_version, harness_version "
                       "FROM evals WHERE id > ? ORDER BY id", (cursor.eval,))
    events = store.rows("SELECT * FROM (SELECT id, ts, step, level, kind, message FROM events WHERE id > ? "
                        "ORDER BY id DESC LIMIT ?) ORDER BY id", (cursor.event, EVENTS_BACKLOG))
    open_marks = ",".join("?" * len(cursor.open_rounds))
    rounds = store.rows(f"SELECT * FROM rounds WHERE id > ? OR id IN ({open_marks}) ORDER BY id",
                        (0 if force else cursor.round, *cursor.open_rounds))  # force: every round again
    marks = ",".join("?" * len(cursor.pending))
    commands = store.rows(f"SELECT * FROM commands WHERE id > ? OR id IN ({marks}) ORDER BY id",
                          (cursor.command, *cursor.pending))
    v_stamp, i_stamp, s_stamp = versions_stamp(store), interventions_stamp(store), skills_stamp(store)
    versions = None
    if v_stamp != cursor.versions_stamp:
        versions = store.rows(f"SELECT {VERSION_COLS} FROM harness_versions ORDER BY id")
    interventions = None
    if i_stamp != cursor.interventions_stamp:
        stats = decisions(store)
        interventions = [dict(r, decision=stats.get(r["id"])) for r in
                         store.rows(f"SELECT {INTERVENTION_COLS} FROM interventions ORDER BY id DESC")]
    max_id = store.scalar("SELECT max(id) FROM rollouts") or 0
    new_cursor = replace(
        cursor, data_version=dv, step=last_step, mix_step=last_step,
        eval=evals[-1]["id"] if evals else cursor.eval,
        event=events[-1]["id"] if events else cursor.event,
        round=max([cursor.round] + [r["id"] for r in rounds]),
        open_rounds=tuple(r["id"] for r in rounds if r.get("summary") == ROUND_RUNNING),
        command=max([cursor.command] + [c["id"] for c in commands]),
        pending=tuple(c["id"] for c in commands if c["status"] == "pending"),
        versions_stamp=v_stamp, interventions_stamp=i_stamp, skills_stamp=s_stamp)
    return RunDelta(cursor=new_cursor, run=run, steps=steps, mix=mix, evals=evals, events=events,
                    rounds=rounds, versions=versions, commands=commands, interventions=interventions,
                    skills_changed=s_stamp != cursor.skills_stamp, max_rollout_id=max_id)


def tail_file(path: str | Path, n: int = 40, max_bytes: int = 64_000) -> list[str]:
    """The last `n` lines of a text file (reads at most `max_bytes` from its end)."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # the first line is probably cut
    return lines[-n:]
