"""`evotui compare` with tiny budgets on the CPU, then `evotui report`: the
path stays working in CI (the real GPU results are in the README). The arms'
configs, the profiles and the report's statistics on made-up runs are in
tests/test_compare_arms.py."""

import json
import os
import signal
import sqlite3
import subprocess
import sys

from conftest import set_flags
from engine_waits import communicate, either, run_files, run_process, wait_for


def test_compare_then_report(tmp_path, tiny_overrides, tiny_model):
    out = tmp_path / "cmp"
    sets = set_flags(*tiny_overrides, f"model.name='{tiny_model}'")
    sets += ["--set", "evolve.every=2", "--set", "evolve.candidates=2", "--set", "evolve.probe_tasks=1"]
    # evaluation answers shorter than TINY's 16 tokens: no check below reads an accuracy
    sets += ["--set", "eval.max_new_tokens=8"]
    # the parallel path (arms as processes; the control waits for its seed's coevolve arm); the
    # static arm is killed (-9) once its engine runs: compare must not pass it off as finished.
    # coevolve-expert runs here too: next to coevolve it takes a slot that would idle (the static
    # arm is killed early, the control waits for coevolve), where the sequential call below ran
    # it on its own. (Its static twin runs there: a step's arithmetic does not depend on the
    # thread count, so twins still train bit-identically.)
    first = ("static", "coevolve", "coevolve-expert", "control")
    proc = subprocess.Popen([sys.executable, "-m", "evotui", "compare", "--steps", "2", "--seeds", "0", "--out",
                             str(out), "--jobs", "2", "--quiet", "--arms", ",".join(first), "--profile",
                             "cpu", *sets], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _kill_when_running(proc, out / "static-s0")
    stdout, stderr = communicate(proc, "the parallel compare to end",
                                 either(*(run_files(out / f"{a}-s0") for a in first)))
    assert proc.returncode == 1, stderr[-3000:]
    assert "profile: cpu" in stdout
    rows = {r["arm"]: r for r in json.loads((out / "compare.json").read_text())}
    assert set(rows) == set(first)
    killed = rows["static"]["steps_done"]
    assert not rows["static"]["complete"] and killed < 2
    assert f"arm static-s0: killed by signal 9 at step {killed} of 2" in stderr and "last log line:" in stderr
    assert "the same command again resumes them" in stderr
    assert all(rows[a]["complete"] and rows[a]["status"] == "finished" for a in first[1:]), rows
    report = (out / "report" / "report.md").read_text()
    assert "| static (1 incomplete, not counted) | 0 |" in report  # marked, and no seed counted in its means
    assert f"**static s0: crashed? at step {killed} of 2**" in report.split("## Incomplete runs")[1]
    assert f"INCOMPLETE static s0: crashed? at step {killed} of 2 (not counted)" in stdout
    from backend.runs import run_dirs_in
    from backend.tools.report import write_report

    counted = write_report(run_dirs_in(out), tmp_path / "r-all",
                           include_incomplete=True)[0].read_text()
    assert "| static (1 incomplete, counted) | 1 |" in counted
    # run again over the same folder, sequentially, with every arm: the killed arm resumes and
    # finishes, the finished arms are kept, not re-run; static-expert, the one arm not run yet,
    # starts now (with this call's profile) and merges into compare.json and the report
    steps_before = {a: _steps(out / f"{a}-s0") for a in first[1:]}
    p = run_process([sys.executable, "-m", "evotui", "compare", "--steps", "2", "--seeds", "0", "--out", str(out),
                     *sets], "the sequential compare to end")
    assert p.returncode == 0, p.stderr[-3000:]
    assert {a: _steps(out / f"{a}-s0") for a in steps_before} == steps_before
    assert _steps(out / "static-s0") == (2, 2)  # resumed after the kill, no step twice
    arms = ("static", "static-expert", "coevolve", "coevolve-expert", "control")
    rows = json.loads((out / "compare.json").read_text())
    assert [r["arm"] for r in rows] == list(arms) and all(r["status"] == "finished" for r in rows), rows
    for arm in arms:
        cfg = _config(out / f"{arm}-s0")
        assert cfg["profile"] == ("cpu" if arm in ("static", *steps_before) else _auto())
        assert cfg["harness"].endswith("math_expert.py") == arm.endswith("-expert")
        assert cfg["evolve"]["enabled"] == arm.startswith("coevolve")
    report = (out / "report" / "report.md").read_text()
    for arm in arms:
        assert f"| {arm} |" in report
    # the statistics: intervals over seeds (n/a with one seed), differences paired with static-expert, budget
    assert "| arm | seeds | final test | final 95% CI | test AUC | AUC 95% CI |" in report
    assert "| static-expert | 1 | " in report and "n/a (under 2 seeds)" in report
    paired = report.split("## Paired difference against static-expert")[1].split("##")[0]
    assert "| coevolve-expert | 1 |" in paired and "| static-expert |" not in paired
    budget = report.split("## Budget")[1].split("##")[0]
    assert "| rollouts used |" in budget
    row = next(x for x in budget.splitlines() if x.startswith("| coevolve |")).split("|")
    assert int(row[5]) > 0 and int(row[7]) == int(row[5]) + int(row[6])  # probes counted as budget
    for svg in ("test.svg", "validation.svg", "dead_groups.svg", "agreement.svg"):
        assert (out / "report" / svg).read_text().startswith("<svg")
    # evolving runs against their static twins, step by step (the static run was killed and resumed)
    invariance = report.split("## Invariance")[1].split("##")[0]
    assert "| coevolve-expert | static-expert | 0 | 2 | all steps | - | yes |" in invariance, invariance
    assert "| coevolve | static | 0 | 2 |" in invariance and "**no**" not in invariance, invariance
    assert "## Repeated promotions (must be 0)\n\n- 0\n" in report
    assert "## Test accuracy against the static harness" in report and "## Decisions" in report
    vs_control = report.split("## Co-evolution against its budget-matched control")[1].split("##")[0]
    assert "- **coevolve - control**:" in vs_control and "- per seed: s0 " in vs_control
    # the planted trap was submitted; a random tiny model never copies the question's numbers, so
    # nothing flags it here (tests/test_traps.py blocks it on rollouts that do, report included)
    assert "## Blocked by validity diagnostics" in report
    assert "arm" in p.stdout and "report:" in p.stdout
    # report also works on its own, on the run folders
    q = run_process([sys.executable, "-m", "evotui", "report", str(out), "--out", str(tmp_path / "r2")])
    assert q.returncode == 0, q.stderr
    assert (tmp_path / "r2" / "report.md").exists()


def _kill_when_running(compare: subprocess.Popen, run_dir) -> None:
    """SIGKILL an arm's engine as soon as its run row shows it running."""
    def running_pid():
        try:
            db = sqlite3.connect(f"file:{run_dir / 'run.db'}?mode=ro", uri=True, timeout=1)
            try:
                pid, status = db.execute("SELECT pid, status FROM runs").fetchone()
            finally:
                db.close()
        except (sqlite3.Error, TypeError):
            return None
        return pid if status == "running" else None

    pid = wait_for("the static arm to run", running_pid, compare, progress=run_files(run_dir))
    os.kill(pid, signal.SIGKILL)


def _config(run_dir):
    import sqlite3

    db = sqlite3.connect(run_dir / "run.db")
    try:
        return json.loads(db.execute("SELECT config_json FROM runs").fetchone()[0])
    finally:
        db.close()


def _auto():
    from backend.profiles import resolve

    return resolve("auto")


def _steps(run_dir):
    import sqlite3

    db = sqlite3.connect(run_dir / "run.db")
    try:
        return db.execute("SELECT count(*), max(step) FROM steps").fetchone()
    finally:
        db.close()


def test_report_rejects_non_run(tmp_path):
    p = run_process([sys.executable, "-m", "evotui", "report", str(tmp_path)])
    assert p.returncode == 2 and "not an evotui run" in p.stderr
