"""Hostile candidate harnesses (tests/hostile_harnesses.py) go through the real path and change
nothing they must not.

Each case runs in its own "engine": a process forked from this one, so a candidate that hangs,
kills or poisons the process it runs in cannot take the test run with it, and the engine's pid
can be watched. On a fresh copy of a real synthetic run database, with a sentinel file in the
run dir, a decoy HOME holding a secret and a decoy secret in the environment, the engine
records the candidate (`interventions.record`), backtests it (`backtest.backtest`: replay or
probe), approves it through the engine's dispatcher when it passed (`apply_one`), reloads the active
harness and scores a synthetic training batch under it for four steps (`score_batch`), scores
the same batch under a fresh default harness and, for a promoted candidate, replays the
promoted code alone over the batch. A candidate refused before any of its code ran skips the
training part. Afterwards this process checks:

- the engine finished within BOUND_S, exited by itself, raised nothing, left no process behind
  and kept its working directory, environment, signal handlers, threads and memory;
- the sentinel and HOME are unchanged, the run dir holds only the run's own files, harness.py is
  the active version's code;
- neither secret (nor the checkout's .git/HEAD) appears in any file of the run dir (the database
  and its WAL read as bytes, the engine log) or in any table;
- the harness version changed only by promoting this candidate after it passed, and the stored
  rows from before are untouched;
- a case expected to be rejected ends failed, with a reason of at most REASON_MAX characters;
- labels, evidence, rewards and verdicts stored by training are capped, finite and the
  evaluator's; training scored exactly what a fresh replay of the active code scores (so no
  state was smuggled), and the default harness still scores as in a pristine process.

    .venv/bin/pytest tests/test_hostile_harness.py -q        # EVOTUI_HOSTILE_BOUND_S=60 per case
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import math
import os
import resource
import secrets
import shutil
import signal
import sqlite3
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from backend.config import RunConfig, to_toml
from backend.dispatch import Control, apply_one
from backend.envs.base import Task, Verdict
from backend.envs.math import answers_match, extract_lenient
from backend.evolve import interventions as iv
from backend.evolve.backtest import backtest
from backend.evolve.replay import replay
from backend.harness.loader import Harness
from backend.rollout import Scored, diagnosis_rows, group_stats, rollout_row, score_all
from backend.store import Store, now
from hostile_harnesses import BASE, CASES, ENV_SECRET, HOME_SECRET, LONG, RUN_DIR

try:
    from synthetic_run import build_run, context, make_probe
except ImportError:  # before the synthetic run moved to tests/
    from backend.evolve.synthetic import build_run, context, make_probe

ROOT = Path(__file__).resolve().parents[1]
BOUND_S = float(os.environ.get("EVOTUI_HOSTILE_BOUND_S", "60"))
"""Per case. A contained hang legitimately takes the worker's wall deadline for a training batch
(up to about 22 s for 16 rollouts) plus the reference replay's, on a loaded machine."""
LIMIT_S = 1.0
"""The backtest's per-harness time limit (evolve.backtest_timeout_s)."""
REFERENCE_LIMIT_S = 1.0
FIRST_STEP, STEPS = 4, 4
"""The template run has steps 1-3; the engine trains steps 4-7 under the active harness."""
MAX_NEW_TOKENS = 128
REASON_MAX, LABEL_MAX, EVIDENCE_MAX, CELL_MAX = 300, 64, 500, 256_000
RSS_GROWTH_MAX_MB = 512
"""How far the engine's resident memory may rise above what it held when forked. A forked child
starts with its parent's resident pages, and pytest's process has grown by whatever ran before
this module, so the bound is on the rise, not on the peak (a hostile format spec allocates 2.5 GB)."""
ENGINE_MEMORY = 4 * 2**30
"""Address-space limit of the forked engine: keeps a runaway allocation off the shared machine."""
DB_GROWTH_MAX = 20 * 2**20
RUN_FILES = {"run.db", "run.db-wal", "run.db-shm", "run.db-journal", "harness.py", "config.toml",
             "engine.log", "engine.lock", "sentinel.txt", "checkpoints"}
"""What a run dir legitimately holds (backend/runs.py)."""
ENV_TOKEN = "envsecret-" + secrets.token_hex(12)
HOME_TOKEN = "homesecret-" + secrets.token_hex(12)
_git_head = ROOT / ".git" / "HEAD"
CHECKOUT_TOKEN = (_git_head.read_text().strip() or None) if _git_head.is_file() else None

# ---------------------------------------------------------------- the training batch

LONG_COMPLETION = "Let me think step by step. " * 120 + "So the total is " + "1" * 40 + "!"
assert len(LONG_COMPLETION) > LONG
RAMBLE = "I am not sure how to solve this problem, let me think about it more carefully"
BATCH = [
    ((12, 7), ["12 + 7 = 19. The answer is 19", "12 + 7 = 19. <answer>19</answer>", "The answer is 12", RAMBLE]),
    ((23, 5), ["23 + 5 = 28. <answer>28</answer>", "23 + 5 = 27. The answer is 27", "We add 23 and 5.\nThe answer is 28",
               LONG_COMPLETION]),
    ((31, 9), ["31 + 9 = 40. The answer is 40", "31 + 9 = 41. <answer>41</answer>", "31 + 9 = 40. <answer>40</answer>",
               "The answer is 9"]),
    ((8, 16), ["8 + 16 = 24. The answer is 24", "8 + 16 = 22. The answer is 22", RAMBLE,
               "8 + 16 = 24. <answer>24</answer>"]),
]


class Evaluator:
    """The synthetic runs' evaluator: the math env's lenient extraction and comparison."""

    def evaluate(self, task: Task, completion: str) -> Verdict:
        pred = extract_lenient(completion)
        ok = bool(answers_match(task.answer, pred))
        return Verdict(ok, float(ok), "correct" if ok else "no_answer" if pred is None else "wrong", {})

    def observe(self, task: Task, completion: str, verdict: Verdict) -> dict:
        return {}


EVALUATOR = Evaluator()
TRUTH = [EVALUATOR.evaluate(Task("t", "math", "", str(a + b)), text).correct for (a, b), texts in BATCH for text in texts]


def make_batch(harness) -> list[Scored]:
    """The batch a training step generates (always the same completions; prompts from `harness`)."""
    items = []
    for g, ((a, b), texts) in enumerate(BATCH):
        task = Task(f"hostile:{g}", "math", f"What is {a} + {b}?", str(a + b), {})
        prompt = "\n".join(m["content"] for m in harness.messages(task))
        for i, text in enumerate(texts):
            n = MAX_NEW_TOKENS if text is LONG_COMPLETION else len(text.split())
            items.append(Scored(task=task, group=g, idx=i, prompt_text=prompt, prompt_ids=[1] * 8, completion=text,
                                completion_ids=list(range(n)), loss_mask=[1] * n,
                                finish="length" if n == MAX_NEW_TOKENS else "stop", verdict=None, obs={}))
    return items


def score_batch(harness, items: list[Scored]) -> dict:
    """One training step's scoring of `items` under `harness` (evaluator, rewards, labels, filters,
    advantages), as the loop does it: the one call to change when the engine's apply function does."""
    score_all(items, harness, EVALUATOR, MAX_NEW_TOKENS)
    return group_stats(items, harness)


def scores(items: list[Scored]) -> list:
    return [[s.reward, sorted({label for label, _ in s.labels})] for s in items]


def train_step(store, harness, version: int, step: int) -> list:
    """Score a fresh batch under the active harness and commit it like the loop's train_step."""
    items = make_batch(harness)
    stats = score_batch(harness, items)
    rows = [rollout_row(s, step, version, step, MAX_NEW_TOKENS) for s in items]
    diags = [diagnosis_rows(s, step, version, harness.validity) for s in items]
    store.commit_step(dict(stats, step=step, created_at=now(), harness_version=version, policy_version=step,
                           n_rollouts=len(items)), rows, diags)
    return scores(items)


# ---------------------------------------------------------------- forked processes


def _redirect(log: Path) -> None:
    """The engine's stdout and stderr go to its log (pytest's capture objects are replaced too)."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for std in (1, 2):
        os.dup2(fd, std)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def fork_call(fn, report_path: Path, *, log: Path | None = None, cwd: Path | None = None) -> dict:
    """Run `fn(report)` in a forked child (its own process group) for at most BOUND_S; returns the
    report with `_exit` (exit code, negative for a signal), `_hung` and `_left` (processes of its
    group still alive after it ended, then killed)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns
        report: dict = {}
        try:
            os.setpgid(0, 0)
            atexit._clear()  # this process's exit handlers only (the harness worker's, for one)
            if log:
                _redirect(log)
            if cwd:
                os.chdir(cwd)
            resource.setrlimit(resource.RLIMIT_AS, (ENGINE_MEMORY, ENGINE_MEMORY))
            report["rss_at_fork_mb"] = resident_mb()
            fn(report)
        except BaseException as e:  # noqa: BLE001 - whatever a harness raised ends up here
            report["engine_error"] = f"{type(e).__name__}: {e}"[:300]
        with contextlib.suppress(BaseException):
            report["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            report_path.write_text(json.dumps(report, default=str))
            sys.stdout.flush()
            sys.stderr.flush()
            atexit._run_exitfuncs()
        os._exit(0)
    status: list = []
    waiter = threading.Thread(target=lambda: status.append(os.waitpid(pid, 0)[1]), daemon=True)
    waiter.start()
    waiter.join(BOUND_S)
    hung = waiter.is_alive()
    if hung:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        waiter.join()
    left = _reap_group(pid)
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return dict(report, _exit=os.waitstatus_to_exitcode(status[0]), _hung=hung, _left=left)


def resident_mb() -> float:
    """This process's resident memory now (a forked child's peak starts here, not at zero)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**20


def _reap_group(pgid: int) -> int:
    """Processes of group `pgid` still alive (then killed): a fork that outlived its engine."""
    alive = 0
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if proc.name.isdigit() and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                alive += 1
    if alive:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    return alive


def engine_state() -> dict:
    return {"cwd": os.getcwd(), "env": hashlib.sha256(repr(sorted(os.environ.items())).encode()).hexdigest(),
            "sigterm": repr(signal.getsignal(signal.SIGTERM)), "sigint": repr(signal.getsignal(signal.SIGINT)),
            "profile": sys.getprofile() is not None, "trace": sys.gettrace() is not None,
            "threads": sorted(t.name for t in threading.enumerate())}


# ---------------------------------------------------------------- the engine's side of one case


def write_harness_file(run_dir: Path, store) -> None:
    """What the engine does at start and whenever the active version changes."""
    (run_dir / "harness.py").write_text(store.get("harness_versions", store.run()["harness_version"])["code"])


def run_engine(report: dict, run_dir: Path, code: str) -> None:
    """The real path for one candidate, in the engine process; fills `report` as it goes."""
    report["state_before"] = engine_state()
    store = Store.open(run_dir / "run.db")
    cfg = RunConfig()
    cfg.evolve.backtest_timeout_s = LIMIT_S
    ctx = context(store, cfg=cfg, probe=make_probe())
    write_harness_file(run_dir, store)
    iid = iv.record(store, None, iv.Candidate(title="hostile candidate", code=code, parent_version=ctx.harness_version,
                                              parent_code=ctx.harness.code, proposer="hostile"))
    report["iid"] = iid
    if store.get("interventions", iid)["status"] == "proposed":
        backtest(ctx, [iid])
        report["after_backtest"] = [store.run()["harness_version"], store.count("harness_versions")]
        if store.get("interventions", iid)["status"] == "passed":
            cid = store.send_command("approve", {"id": iid}, source="test")
            report["approve"] = list(apply_one(Control(store), store.get("commands", cid), ctx))
        write_harness_file(run_dir, store)
        report["steps"] = train(store)
        report["default_after"] = default_scores()
        if store.get("interventions", iid)["status"] == "promoted":
            report["reference"] = replay_reference(code)
    # else: refused before any of its code ran; nothing it could have changed to look for
    report["state_after"] = engine_state()
    store.close()


def train(store) -> list:
    """STEPS training steps under the active harness; a step that raises ends training (the loop
    would pause the run) and is reported with the exception's type."""
    vid = store.run()["harness_version"]
    out = []
    try:
        harness = Harness.from_code(store.get("harness_versions", vid)["code"])
        for k in range(STEPS):
            out.append({"ok": train_step(store, harness, vid, FIRST_STEP + k)})
    except Exception as e:
        out.append({"error": f"{type(e).__name__}: {e}"[:300], "type": type(e).__name__})
    return out


def default_scores():
    try:
        h = Harness.from_code(BASE)
        items = make_batch(h)
        score_batch(h, items)
        return scores(items)
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:300]


def replay_reference(code: str) -> dict:
    """The active code replayed alone over the training batch: the backtest's replay (a sandbox
    subprocess before the harness worker, a fresh request of the worker after it), which sees
    neither the engine's memory nor its secrets."""
    try:
        h = Harness.from_code(code)
    except Exception as e:
        return {"error": f"does not load: {type(e).__name__}: {e}"[:300]}
    rows = [{"id": k + 1, "step": FIRST_STEP, "group_idx": s.group, "idx": s.idx, "prompt": s.prompt_text,
             "completion": s.completion, "finish": s.finish, "completion_tokens": len(s.completion_ids),
             "task_json": json.dumps(s.task.to_dict()), "obs_json": json.dumps({"_max_new_tokens": MAX_NEW_TOKENS}),
             "domain": "math", "task_id": s.task.id, "correct": 0, "reward": 0.0, "verdict": "", "labels": "",
             "advantage": 0.0} for k, s in enumerate(make_batch(h))]
    res = replay([code], rows, REFERENCE_LIMIT_S)[0]
    if isinstance(res, dict):  # replay before the harness worker
        return {"error": res.get("error"), "scores": [[r[0], sorted(r[1])] for r in res.get("rows") or []]}
    return {"error": res.error or (None if res.out is not None else "no output"),
            "scores": [[o.reward, sorted(o.label_set)] for o in res.out.rollouts] if res.out else []}


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A real synthetic run (3 steps, 48 rollouts) and the default harness's scores of the
    training batch in a pristine process, both made in a forked child."""
    d = tmp_path_factory.mktemp("hostile-template")

    def build(report):
        build_run(d / "run.db", steps=FIRST_STEP - 1).close()
        report["pristine"] = default_scores()

    out = fork_call(build, d / "report.json")
    assert isinstance(out.get("pristine"), list) and not out.get("engine_error"), out
    with contextlib.closing(sqlite3.connect(d / "run.db")) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return {"db": d / "run.db", "pristine": out["pristine"], "digest": stored_digest(d / "run.db"),
            "size": (d / "run.db").stat().st_size}


@pytest.fixture
def run_dir(tmp_path, template, monkeypatch):
    """A run dir on a copy of the template, a sentinel in it, a decoy HOME and an environment secret."""
    home = tmp_path / "home"
    home.mkdir()
    (home / HOME_SECRET).write_text(HOME_TOKEN + "\n")
    (home / ".netrc").write_text(f"machine example.com login me password {HOME_TOKEN}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv(ENV_SECRET, ENV_TOKEN)
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(template["db"], run / "run.db")
    (run / "config.toml").write_text(to_toml(RunConfig()))
    (run / "sentinel.txt").write_text("sentinel " + secrets.token_hex(8))
    return run


@pytest.fixture(scope="module")
def tally(request):
    """Per-category results, printed as one table at the end of the module."""
    rows: dict = {}
    yield rows
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if not (reporter and capture and rows):
        return
    with capture.global_and_fixture_disabled():  # a summary, not test output
        reporter.write_line("\nhostile harnesses: category, cases, failed (case names)")
        for cat in sorted({c for c, _ in rows.values()}):
            bad = [n for n, (c, ok) in rows.items() if c == cat and not ok]
            reporter.write_line(f"  {cat:22s} {sum(c == cat for c, _ in rows.values()):3d} {len(bad):3d}  "
                                f"{' '.join(bad)}")


# ---------------------------------------------------------------- checks (each returns violations)


def stored_digest(db_path: Path) -> str:
    """Everything the template stored (steps 1-3): a promotion or a candidate may not touch it."""
    h = hashlib.sha256()
    with contextlib.closing(sqlite3.connect(db_path)) as db:
        for sql in ("SELECT * FROM rollouts WHERE step < ? ORDER BY id", "SELECT * FROM diagnoses WHERE step < ? "
                    "ORDER BY id", "SELECT * FROM steps WHERE step < ? ORDER BY step"):
            for row in db.execute(sql, (FIRST_STEP,)):
                h.update(repr(row).encode())
    return h.hexdigest()


def check_engine(out: dict) -> list[str]:
    v = []
    if out["_hung"]:
        v.append(f"engine hung: killed after {BOUND_S:.0f}s")
    elif out["_exit"] != 0 or "state_after" not in out and "engine_error" not in out:
        v.append(f"engine died (exit {out['_exit']}) before finishing the path")
    if out.get("engine_error"):
        v.append(f"engine raised {out['engine_error'][:160]}")
    if out["_left"]:
        v.append(f"{out['_left']} process(es) of the engine outlived it")
    before, after = out.get("state_before"), out.get("state_after")
    if before and after:
        v += [f"engine state changed: {k} {before[k]!r} -> {after[k]!r}"[:200] for k in before if before[k] != after[k]]
    rise = out.get("maxrss_mb", 0) - out.get("rss_at_fork_mb", 0)
    if rise > RSS_GROWTH_MAX_MB:
        v.append(f"engine memory rose by {rise:.0f} MB (peak {out['maxrss_mb']:.0f} MB)")
    return v


def files_of(d: Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() if p.is_file() else None for p in sorted(d.rglob("*"))}


def check_files(run: Path, home: tuple[Path, dict], sentinel: bytes, db_code: str | None) -> list[str]:
    v = []
    now_sentinel = (run / "sentinel.txt").read_bytes() if (run / "sentinel.txt").exists() else None
    if now_sentinel != sentinel:
        v.append("sentinel changed or deleted")
    extra = sorted(p.name for p in run.iterdir() if p.name not in RUN_FILES)
    if extra:
        v.append(f"new files in the run dir: {extra}")
    if db_code is not None and (run / "harness.py").exists() and (run / "harness.py").read_text() != db_code:
        v.append("harness.py is not the active version's code")
    if files_of(home[0]) != home[1]:
        v.append(f"HOME changed: {sorted(files_of(home[0]))}")
    for p in sorted(run.rglob("*")):
        data = p.read_bytes() if p.is_file() else b""
        for label, token in (("environment", ENV_TOKEN), ("HOME", HOME_TOKEN), ("checkout", CHECKOUT_TOKEN)):
            if token and token.encode() in data:
                v.append(f"{label} secret in {p.name}")
    return v


def dump(db) -> dict[str, list[tuple]]:
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {t: [tuple(r) for r in db.execute(f'SELECT * FROM "{t}"')] for t in tables}


def check_tables(tables: dict) -> list[str]:
    v = []
    for t, rows in tables.items():
        text = "\n".join(str(x) for r in rows for x in r)
        for label, token in (("environment", ENV_TOKEN), ("HOME", HOME_TOKEN), ("checkout", CHECKOUT_TOKEN)):
            if token and token in text:
                v.append(f"{label} secret in table {t}")
        big = max((len(x) for r in rows for x in r if isinstance(x, (str, bytes))), default=0)
        if big > CELL_MAX:
            v.append(f"a {big}-character value in table {t}")
    return v


def check_training_rows(db) -> list[str]:
    v = []
    rows = db.execute("SELECT reward, labels, correct FROM rollouts WHERE step >= ? ORDER BY id", (FIRST_STEP,)).fetchall()
    if any(r[0] is None or not math.isfinite(r[0]) for r in rows):
        v.append("a stored training reward is not a finite number")
    if any(len(label) > LABEL_MAX for r in rows for label in (r[1] or "").split(",")):
        v.append(f"a stored label is longer than {LABEL_MAX}")
    if any(len(r[0] or "") > LABEL_MAX or len(r[1] or "") > EVIDENCE_MAX
           for r in db.execute("SELECT label, evidence FROM diagnoses")):
        v.append(f"a diagnosis label or evidence over {LABEL_MAX}/{EVIDENCE_MAX} characters")
    n = len(TRUTH)
    for k in range(0, len(rows) - n + 1, n):
        if [bool(r[2]) for r in rows[k:k + n]] != TRUTH:
            v.append("stored verdicts differ from the evaluator's")
            break
    return v


def check_versions(db, iid: int | None, code: str, out: dict) -> tuple[list[str], str]:
    """The version changes only by promoting this candidate after it passed; returns (violations,
    the intervention's status)."""
    v = []
    if out.get("after_backtest") not in (None, [1, 1]):
        v.append(f"harness version/count changed before any promotion: {out['after_backtest']}")
    versions = db.execute("SELECT id, code, status, intervention_id FROM harness_versions ORDER BY id").fetchall()
    active = db.execute("SELECT harness_version FROM runs").fetchone()[0]
    if iid is None:  # the engine died before reporting it: the run's only intervention
        iid = (db.execute("SELECT max(id) FROM interventions").fetchone() or [None])[0]
    row = db.execute("SELECT status, reason, history_json FROM interventions WHERE id = ?", (iid or -1,)).fetchone()
    status = row[0] if row else "missing"
    steps = [h.get("to") for h in json.loads(row[2] or "[]")] if row else []
    if versions[0][1] != BASE:
        v.append("harness v1's code was changed")
    if status == "promoted":
        ok = len(versions) == 2 and active == 2 and versions[1][1] == code and versions[1][3] == iid \
            and "passed" in steps and steps.index("passed") < steps.index("promoted")
        if not ok:
            v.append(f"promotion is not exactly this passed candidate: versions {[x[0] for x in versions]}, active {active}")
    elif len(versions) != 1 or active != 1:
        v.append(f"harness versions {[x[0] for x in versions]}, active v{active}, yet the candidate is {status}")
    if row and status == "failed" and not (0 < len(row[1] or "") <= REASON_MAX):
        v.append(f"failure reason of {len(row[1] or '')} characters")
    long_reasons = db.execute("SELECT count(*) FROM backtests WHERE length(reason) > ?", (REASON_MAX,)).fetchone()[0]
    if long_reasons:
        v.append(f"backtest reason over {REASON_MAX} characters")
    return v, status


def check_behaviour(out: dict, reference: dict | None, pristine: list) -> list[str]:
    """Training scored what the active code scores alone; other harnesses are unaffected."""
    v = []
    if "state_after" not in out:  # the engine never got to the end (reported by check_engine)
        return v
    steps = out.get("steps") or []
    failed = [s for s in steps if "error" in s]
    if out.get("default_after") not in (None, pristine):
        v.append("the default harness scores differently after this candidate (state smuggled into the engine)")
    if failed and failed[0].get("type") not in ("HarnessError", "WorkerFailure"):
        v.append(f"a training step crashed the engine: {failed[0]['error'][:160]}")
    expected = pristine if reference is None else reference.get("scores")
    ref_error = None if reference is None else reference.get("error") or ("no reference" if not expected else None)
    if status_promoted(out) and reference is None:
        v.append("no replay of the promoted code to compare training with")
    if ref_error and not failed and steps:
        v.append(f"training scored a batch the active code cannot score alone ({ref_error[:120]})")
    elif not ref_error and failed:
        v.append(f"training failed where a replay of the active code did not: {failed[0]['error'][:120]}")
    elif not ref_error:
        bad = [k for k, s in enumerate(steps) if not same_scores(s["ok"], expected)]
        if bad:
            v.append(f"training steps {[FIRST_STEP + k for k in bad]} scored differently from a replay of the active code")
    return v


def status_promoted(out: dict) -> bool:
    return bool(out.get("approve")) and out["approve"][0] == "applied"


def same_scores(a: list, b: list) -> bool:
    return len(a) == len(b) and all(abs(x[0] - y[0]) < 1e-9 and x[1] == y[1] for x, y in zip(a, b))


# ---------------------------------------------------------------- the test


@pytest.mark.timeout(3 * BOUND_S + 120)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_candidate(case, run_dir, template, tally, tmp_path):
    code = case.code.replace(RUN_DIR, str(run_dir))
    sentinel = (run_dir / "sentinel.txt").read_bytes()
    home = Path(os.environ["HOME"])
    home_before = files_of(home)
    out = fork_call(lambda report: run_engine(report, run_dir, code), tmp_path / "engine.json",
                    log=run_dir / "engine.log", cwd=run_dir)
    violations = check_engine(out)
    with contextlib.closing(sqlite3.connect(run_dir / "run.db")) as db:
        active = db.execute("SELECT code FROM harness_versions WHERE id = (SELECT harness_version FROM runs)").fetchone()
        violations += check_files(run_dir, (home, home_before), sentinel, active[0] if active else None)
        violations += check_tables(dump(db))
        violations += check_training_rows(db)
        found, status = check_versions(db, out.get("iid"), code, out)
        violations += found
    if stored_digest(run_dir / "run.db") != template["digest"]:
        violations.append("rows stored before the candidate were changed")
    size = sum(p.stat().st_size for p in run_dir.glob("run.db*"))
    if size > template["size"] + DB_GROWTH_MAX:
        violations.append(f"the database grew to {size / 2**20:.0f} MB")
    if case.expect == "reject" and status != "failed":
        violations.append(f"expected a failed intervention, got {status}")
    violations += check_behaviour(out, out.get("reference"), template["pristine"])
    tally[case.name] = (case.category, not violations)
    assert not violations, f"{case.name} ({case.category}, {case.why}):\n  " + "\n  ".join(violations)


def test_corpus_covers_every_escape_of_the_issue():
    cats = Counter(c.category for c in CASES)
    assert len(CASES) >= 60 and len({c.name for c in CASES}) == len(CASES)
    for cat in ("verdict_read", "frame_walk", "annotation_eval", "format_walk", "globals_merge", "match_attr",
                "constant_side_effect", "duplicate_def", "time_bomb", "long_hang", "huge_alloc", "run_dir_write",
                "secret_read", "probe_top_level", "base_exception", "recursion", "output_flood", "engine_state",
                "db_tamper"):
        assert cats[cat] >= 3, (cat, cats[cat])
    assert all(c.expect in ("reject", "contain") for c in CASES)
