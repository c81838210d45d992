"""Bad input at the shell: each mistake or broken environment gets one clear line
on stderr, a non-zero exit, no traceback, and loses nothing already stored.

Covered here (test_config, test_store and test_compare_report cover bad config
values, bad TOML, a missing harness file and `report` on an empty folder): a
read-only run (disk or folder), a run database another process keeps locked,
corrupt and hostile skill files, model paths that are not models, an LLM
proposer whose endpoint is down, and `open` / `report` / `runs` / `approve`
on folders that are not runs.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from backend.evolve import interventions as iv
from synthetic_run import build_run
from backend.harness.loader import default_harness_path
from backend.store.schema import TABLES
from conftest import set_flags
from engine_waits import communicate, run_process
from evotui.cli import SHELL_BUSY_S


def evotui(*args) -> subprocess.CompletedProcess:
    return run_process([sys.executable, "-m", "evotui", *args])


def one_line_error(p: subprocess.CompletedProcess, *needles: str) -> str:
    """The process failed with exactly one clear line on stderr containing `needles`."""
    err = p.stderr.strip()
    assert p.returncode != 0, (p.stdout, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("evotui: error: "), err
    for n in needles:
        assert n in err, err
    return err


def make_run(run_dir: Path) -> Path:
    """A real run (real migrations, scored rollouts) with one intervention waiting for approval."""
    store = build_run(run_dir / "run.db", steps=2)
    code = default_harness_path("math").read_text()
    iid = iv.record(store, None, iv.Candidate(title="more format weight", parent_version=1, parent_code=code,
                                              code=code.replace('"format": 0.1', '"format": 0.2'), proposer="test"))
    for status in ("backtesting", "passed"):  # waiting for the operator: an approval is a valid command
        iv.transition(store, iid, status, "test")
    store.close()
    return run_dir


def counts(run_dir: Path) -> dict:
    # immutable: also readable on a read-only disk, and takes no lock
    db = sqlite3.connect(f"file:{run_dir / 'run.db'}?mode=ro&immutable=1", uri=True)
    try:
        return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    finally:
        db.close()


# ---------------------------------------------------------------- read-only runs


@pytest.fixture
def readonly_run(tmp_path):
    """A run whose folder and database cannot be written: a read-only tmpfs as root (where
    file modes do not stop writes), else mode 0o555 on the folder and 0o444 on run.db."""
    home = tmp_path / f"ro-{uuid.uuid4().hex[:6]}"
    home.mkdir()
    if os.geteuid() == 0:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(home)], capture_output=True)
        if r.returncode != 0:
            pytest.skip("running as root but cannot mount a tmpfs here, so nothing can be made read-only")
    run_dir = make_run(home / "runs" / "r")
    before = counts(run_dir)
    if os.geteuid() == 0:
        subprocess.run(["mount", "-o", "remount,ro", str(home)], check=True)
    else:
        os.chmod(run_dir / "run.db", 0o444)
        os.chmod(run_dir, 0o555)
    yield run_dir, before
    if os.geteuid() == 0:
        subprocess.run(["umount", "-l", str(home)], capture_output=True)
    else:
        os.chmod(run_dir, 0o755)


def test_read_only_run(readonly_run, tmp_path, monkeypatch):
    run_dir, before = readonly_run
    lib = tmp_path / "lib.json"
    lib.write_text(json.dumps({"name": "ok", "trigger": {"labels": ["no_answer_tag"]}, "change": {
        "op": "replace", "name": "extract_answer", "source": "def extract_answer(r):\n    return None\n"}}))
    for args in (["approve", run_dir, 1], ["pause", run_dir], ["skills", "import", run_dir, lib],
                 ["run", "--headless", "--resume", run_dir]):
        one_line_error(evotui(*args), "read-only")
    # reading still works (no WAL index can be made there), and writing elsewhere too
    one_line_error(evotui("report", run_dir), "Read-only file system" if os.geteuid() == 0 else "Permission denied")
    p = evotui("report", run_dir, "--out", tmp_path / "rep")
    assert p.returncode == 0 and (tmp_path / "rep" / "report.md").exists(), p.stderr
    assert evotui("skills", "list", run_dir).returncode == 0
    monkeypatch.setenv("EVOTUI_HOME", str(run_dir.parent.parent))
    p = evotui("runs")
    assert p.returncode == 0 and str(run_dir) in p.stdout and "unreadable" not in p.stdout, p.stdout
    assert counts(run_dir) == before


# ---------------------------------------------------------------- a locked database

HOLDER = textwrap.dedent("""
    import sqlite3, sys, time
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    db.execute("COMMIT")
""")


def _hold(db: Path, seconds: float) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db), str(seconds)], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_locked_database_waits_then_fails_clearly_or_succeeds(tmp_path):
    """A shell command waits SHELL_BUSY_S for a lock: released in time, it succeeds; held
    longer, one line says the run is locked and nothing is written."""
    long_run, short_run = make_run(tmp_path / "long"), make_run(tmp_path / "short")
    before_long, before_short = counts(long_run), counts(short_run)
    # the long lock outlasts the shell however slowly it starts (a loaded machine); it is
    # released once the shell has given up
    holders = [_hold(long_run / "run.db", SHELL_BUSY_S + 600), _hold(short_run / "run.db", 2)]
    shells = [subprocess.Popen([sys.executable, "-m", "evotui", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
              for args in (["approve", str(long_run), "1"], ["pause", str(short_run)])]
    (out_long, err_long), (out_short, err_short) = [communicate(s) for s in shells]
    holders[0].kill()  # an exclusive transaction that never commits: nothing of it is kept
    for h in holders:
        communicate(h)
    one_line_error(subprocess.CompletedProcess([], shells[0].returncode, out_long, err_long),
                   "is locked by another process")
    assert shells[1].returncode == 0 and "command 1 queued: pause" in out_short, err_short
    assert counts(long_run) == before_long
    assert counts(short_run) == dict(before_short, commands=before_short["commands"] + 1)


# ---------------------------------------------------------------- skill files

HOSTILE = {"evotui_skills": 1, "skills": [
    {"name": "fine", "trigger": {"labels": ["no_answer_tag"]},
     "change": {"op": "replace", "name": "extract_answer", "source": "def extract_answer(r):\n    return None\n"}},
    {"name": "evil", "trigger": {"labels": ["no_answer_tag"]},
     "change": {"op": "replace", "name": "extract_answer",
                "source": "def extract_answer(r):\n    import os\n    os.system('touch /tmp/pwned')\n"}},
    {"name": "sneaky", "trigger": {"labels": ["no_answer_tag"]},
     "change": {"op": "add", "name": "diagnose_x",
                "source": "def diagnose_x(r):\n    return ().__class__.__bases__[0].__subclasses__()\n"}},
]}


@pytest.mark.parametrize("content, needle", [
    (os.urandom(256) + b"\xff", "not a valid JSON skill file"),
    (json.dumps(HOSTILE).encode()[:150], "not a valid JSON skill file"),
    (b"", "not a valid JSON skill file"),
    (json.dumps(HOSTILE).encode(), "skill 'evil' change fails the harness check: line 2: import of 'os'"),
    (json.dumps(dict(HOSTILE, skills=[HOSTILE["skills"][2]])).encode(), "private attribute '.__"),
    (json.dumps([1, 2]).encode(), "must be a JSON object"),
], ids=["garbage", "truncated", "empty", "hostile-import", "hostile-dunder", "not-a-card"])
def test_corrupt_or_hostile_skill_file_imports_nothing(tmp_path, content, needle):
    run_dir = make_run(tmp_path / "run")
    before = counts(run_dir)
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    one_line_error(evotui("skills", "import", run_dir, bad), str(bad), needle)
    assert counts(run_dir) == before  # all or nothing: the good card in the file is not imported either


# ---------------------------------------------------------------- models and endpoints


@pytest.mark.parametrize("model, needle", [
    ("/nope", "no such model path '/nope'"),
    ("EMPTY_DIR", "cannot load model"),
])
def test_model_path_that_is_not_a_model(tmp_path, model, needle):
    if model == "EMPTY_DIR":
        model = tmp_path / "empty-model"
        model.mkdir()
    one_line_error(evotui("run", "--headless", "--steps", "1", "--run-dir", tmp_path / "r", "--set",
                          f"model.name={model}"), needle)
    assert not (tmp_path / "r").exists()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


def test_unreachable_llm_endpoint_fails_at_start_up(tmp_path):
    """An LLM proposer that cannot be reached when the run starts is a mistake to fix now, not
    a run whose every round silently proposes nothing (outages later in a run stay recorded
    failed proposals: test_evolve_llm)."""
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    llm = ["--set", "evolve.proposer=llm", "--set", f"evolve.llm.base_url={url}", "--set", "evolve.llm.model=m"]
    one_line_error(evotui("run", "--headless", "--steps", "1", "--run-dir", tmp_path / "r", *llm),
                   f"cannot reach the LLM endpoint {url}", "evolve.proposer=offline")
    assert not (tmp_path / "r").exists()
    one_line_error(evotui("run", "--headless", "--run-dir", tmp_path / "r", "--set", "evolve.proposer=llm",
                          "--set", "evolve.llm.base_url=", "--set", "evolve.llm.model=m"), "no endpoint is set")
    run_dir = make_run(tmp_path / "existing")
    before = counts(run_dir)
    one_line_error(evotui("run", "--headless", "--resume", run_dir, *llm), "cannot reach the LLM endpoint")
    assert counts(run_dir) == before


# ---------------------------------------------------------------- not a run


def test_folders_that_are_not_runs(tmp_path, monkeypatch):
    home = tmp_path / "home"
    runs = home / "runs"
    good = make_run(runs / "good")
    (runs / "empty").mkdir()
    (runs / "empty" / "run.db").touch()
    (runs / "garbage").mkdir()
    (runs / "garbage" / "run.db").write_bytes(b"not sqlite at all " * 100)
    (runs / "foreign").mkdir()
    db = sqlite3.connect(runs / "foreign" / "run.db")
    db.execute("CREATE TABLE invoices (id int)")
    db.commit()
    db.close()
    plain = tmp_path / "plain"
    plain.mkdir()
    before = counts(good)
    for args, needle in [
        (["open", plain], "not an evotui run directory"),
        (["open", runs / "garbage"], "file is not a database"),
        (["open", runs / "empty"], "is not an evotui run database"),
        (["report", runs / "empty"], "is not an evotui run database"),
        (["report", runs / "garbage"], "file is not a database"),
        (["report", plain / "missing"], "not an evotui run directory"),
        (["approve", runs / "foreign", 1], "is not an evotui run database"),
        (["pause", plain], "not an evotui run directory"),
        (["skills", "list", runs / "garbage"], "file is not a database"),
        (["run", "--headless", "--resume", runs / "empty"], "is not an evotui run database"),
    ]:
        one_line_error(evotui(*args), needle)
    # `runs` lists what it can: a broken folder is a row saying why, not a failed listing
    monkeypatch.setenv("EVOTUI_HOME", str(home))
    p = evotui("runs")
    assert p.returncode == 0 and not p.stderr, p.stderr
    lines = {line.split()[-1]: line for line in p.stdout.splitlines()[1:]}
    assert set(lines) == {str(runs / n) for n in ("good", "empty", "garbage", "foreign")}
    assert all(lines[str(runs / n)].startswith("unreadable:") for n in ("empty", "garbage", "foreign"))
    assert counts(good) == before


def fresh_cli(*args) -> tuple[subprocess.CompletedProcess, bool]:
    """`evotui ARGS` in a fresh interpreter; also whether torch was imported by the time it returned."""
    code = ("import sys\nfrom evotui.cli import main\ntry:\n    rc = main(sys.argv[1:])\nfinally:\n"
            "    print('TORCH-IMPORTED', 'torch' in sys.modules)\nsys.exit(rc)")
    p = run_process([sys.executable, "-c", code, *args])
    assert "TORCH-IMPORTED" in p.stdout, (p.stdout, p.stderr)
    return p, "TORCH-IMPORTED True" in p.stdout


@pytest.mark.parametrize("sets, needles", [
    (["math.datasets=[nope"], ["--set math.datasets: cannot parse '[nope'"]),
    (["train.group_size=1"], ["group_size must be at least 2"]),
])
def test_config_errors_come_before_torch(sets, needles):
    """Under the default `--profile auto` a bad config is reported without importing torch (the
    device question comes after validation); a broken TOML list is a parse error, not a name."""
    args = ["run", "--headless", "--steps", "1", *set_flags(*sets)]
    p, torch_imported = fresh_cli(*args)
    err = one_line_error(p, *needles)
    assert "unknown reasoning-gym" not in err
    assert not torch_imported


def test_broken_harness_file_is_named_before_torch(tmp_path):
    bad = tmp_path / "my_harness.py"
    bad.write_text("DOMAIN = 'math'\ndef reward(r:\n")
    p, torch_imported = fresh_cli("run", "--headless", "--steps", "1", "--set", f"harness={bad}")
    one_line_error(p, str(bad), "syntax error")
    assert not torch_imported


def test_bench_help_without_torch():
    p, torch_imported = fresh_cli("bench", "--help")
    assert p.returncode == 0 and "--only" in p.stdout and "--quick" in p.stdout, p.stderr
    assert not torch_imported


def test_bare_evotui_takes_run_options(monkeypatch, tmp_path):
    """`evotui --steps 60` is `evotui run --steps 60` (the TUI on a new run), as the help says."""
    import evotui.launch
    from evotui.cli import main

    seen = {}
    monkeypatch.setattr(evotui.launch, "start_and_open", lambda run_dir, args: seen.update(args=args) or 0)
    assert main(["--steps", "60", "--run-dir", str(tmp_path / "r")]) == 0
    assert seen["args"][:2] == ["--steps", "60"] and "--supervised" in seen["args"]


def test_report_on_a_folder_that_is_no_run_nor_compare(tmp_path):
    """A folder of unrelated runs is no comparison: one line, exit 2, nothing written."""
    make_run(tmp_path / "some" / "a")
    p = evotui("report", tmp_path / "some")
    one_line_error(p, "not an evotui run directory or compare folder", str(tmp_path / "some"))
    assert not (tmp_path / "some" / "report").exists() and not (tmp_path / "report").exists()


def without_terminal(*args) -> subprocess.CompletedProcess:
    """`evotui ARGS` with standard input at its end and output to a pipe (`nohup`, cron, CI). A
    TUI opened there would never return (Textual re-reads the input's end without pause): the
    timeout fails the test instead of hanging it."""
    return subprocess.run([sys.executable, "-m", "evotui", *map(str, args)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)


def test_the_tui_refuses_to_start_without_a_terminal(tmp_path, monkeypatch):
    """Every way into the TUI says, in one line and before anything starts, that it needs a
    terminal and what to run instead; nothing stored changes and no engine is started."""
    monkeypatch.setenv("EVOTUI_HOME", str(tmp_path / "home"))
    good = make_run(tmp_path / "good")
    (tmp_path / "pop").mkdir()
    (tmp_path / "pop" / "population.sqlite").touch()
    before = counts(good)
    for args, hint in [
        (["open", good], f"evotui report {good}"),
        (["run", "--resume", good], f"evotui report {good}"),
        (["open", tmp_path / "pop"], f"evotui report {tmp_path / 'pop'}"),
        (["--steps", "1", "--run-dir", tmp_path / "new"], "evotui run --headless"),
        (["run", "--steps", "1", "--run-dir", tmp_path / "new"], "evotui run --headless"),
    ]:
        one_line_error(without_terminal(*args), "the TUI needs a terminal", hint)
    assert counts(good) == before
    assert not (tmp_path / "new").exists() and not (tmp_path / "home" / "runs").exists()  # no engine started


def test_resume_refuses_to_change_what_the_run_is_measured_against(tmp_path):
    """`--resume` with another adapter shape, domain, held-out set or seed is one line, exit 2,
    before any model loads (tests/test_config.py: what a resume may change)."""
    good = make_run(tmp_path / "good")
    before = counts(good)
    for args, needle in [
        (["--set", "model.lora_r=4"], "model.lora_r (this run: 16, asked: 4)"),
        (["--set", "domain='code'"], "domain (this run: 'math', asked: 'code')"),
        (["--set", "eval.n_test=7"], "eval.n_test"),
        (["--seed", "5"], "seed (this run: 0, asked: 5)"),
    ]:
        one_line_error(evotui("run", "--headless", "--resume", good, "--steps", "9", *args),
                       "--resume cannot change", needle)
    assert counts(good) == before


def test_a_stop_for_an_engine_that_is_gone_is_refused_and_a_restart_expires_one(tmp_path):
    """`evotui stop|pause` where the run says it runs but its engine's process is gone: one line,
    nothing queued. A stop that was queued anyway (the engine died before it took it) is expired
    when the run starts again, so the resume is not stopped at once; an approval still waits."""
    from backend.store import Store

    good = make_run(tmp_path / "good")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid no process has now
    store = Store.open(good, create=False)
    store.set_run(status="running", pid=dead.pid)
    before = counts(good)
    for verb in ("stop", "pause"):
        one_line_error(evotui(verb, good), "the run's engine is not running", f"process {dead.pid} is gone",
                       f"evotui run --headless --resume {good}")
    assert counts(good) == before
    stop = store.send_command("stop", {}, source="cli")
    approve = store.send_command("approve", {"id": 1}, source="cli")
    store.fail_interrupted()  # what an engine does first when it starts
    status = {c["id"]: c["status"] for c in store.rows("SELECT id, status FROM commands")}
    assert status == {stop: "expired", approve: "pending"}
    store.close()
