"""What a headless run tells its terminal: the status line (phase, time left; plain lines at a
sane rate on a pipe), the outcome lines of evaluations and rounds as they happen, and the end
summary (whether the policy was updated, what changed in the harness, the next commands).
Deterministic: a fake clock, string streams, synthetic runs built with the real migrations."""

from __future__ import annotations

import io
import json

from conftest import set_flags
from synthetic_run import add_eval, build_run, context, make_probe, outcomes as right_of

from backend import outcomes
from backend.end_summary import end_summary
from backend.evolve import rollback, run_round
from backend.progress import StepProgress

ROW = {"step": 1, "reward_mean": 0.5, "verdict_acc": 0.25, "agreement": 0.9, "dead_group_frac": 0.5,
       "loss": 0.01, "total_ms": 60_000.0}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _progress(tty: bool, total: int = 10):
    out, err, clock = io.StringIO(), io.StringIO(), Clock()
    return StepProgress(total, out=out, err=err, tty=tty, clock=clock, every_s=30.0), out, err, clock


def test_pipe_gets_plain_status_lines_at_a_sane_rate_and_the_time_left():
    p, out, err, clock = _progress(tty=False)
    p.start(1).phase("generate")
    clock.t = 5.0
    p.phase("filter")  # 5 s later: not another line on a pipe
    clock.t = 40.0
    p.activity("held-out eval 16/64 at step 1")
    clock.t = 60.0
    p.done(ROW)
    assert err.getvalue().splitlines() == ["step 1/10: generate", "held-out eval 16/64 at step 1"]
    assert "\r" not in err.getvalue() and "\x1b" not in err.getvalue()
    # one step took 60 s (the evaluation included): nine are left
    assert out.getvalue().strip().endswith("60.0s, ~9m00s left")
    clock.t = 61.0
    p.start(2).phase("generate")  # within 30 s of the last status line
    clock.t = 100.0
    p.phase("train")
    # 60 s a step, nine left, the current one 40 s along
    assert err.getvalue().splitlines()[-1] == "step 2/10: train, ~8m20s left"
    assert len(err.getvalue().splitlines()) == 3
    # a new kind of work shows at once; the counter inside it at most once per 30 s
    for t, text in ((101.0, "round at step 2: proposing"), (102.0, "round at step 2: backtesting 1/4"),
                    (103.0, "round at step 2: backtesting 2/4"), (140.0, "round at step 2: backtesting 3/4")):
        clock.t = t
        p.activity(text)
    assert [x.split(",")[0] for x in err.getvalue().splitlines()[3:]] == [
        "round at step 2: proposing", "round at step 2: backtesting 1/4", "round at step 2: backtesting 3/4"]


def test_terminal_status_line_is_redrawn_and_cleared_before_a_line():
    p, out, err, clock = _progress(tty=True)
    p.start(1).phase("generate", "batch 3")
    p.phase("filter")
    assert err.getvalue() == "\r\x1b[Kstep 1/10: generate (batch 3)\r\x1b[Kstep 1/10: score"
    p.outcome(["validation accuracy at step 1: 0.250 (8 of 32, 95% CI 0.133-0.421; read by the gate)"])
    assert err.getvalue().endswith("\r\x1b[K") and out.getvalue().startswith("validation accuracy at step 1")


def test_quiet_prints_nothing():
    out, err = io.StringIO(), io.StringIO()
    p = StepProgress(3, quiet=True, out=out, err=err, tty=False)
    p.start(1).phase("generate")
    p.done(ROW)
    p.outcome(["round at step 1: ..."])
    assert out.getvalue() == err.getvalue() == ""


def test_eval_lines_name_the_set_its_count_and_interval():
    results = {"validation": [{"correct": i < 8} for i in range(32)], "test": [{"correct": i < 3} for i in range(32)]}
    assert outcomes.eval_lines(0, results) == [
        "validation accuracy at start: 0.250 (8 of 32, 95% CI 0.133-0.421; read by the gate)",
        "test accuracy at start: 0.094 (3 of 32, 95% CI 0.032-0.242; reported only)"]


def test_round_outcome_lines_say_what_was_proposed_decided_promoted_and_rolled_back(tmp_path):
    store = build_run(tmp_path / "run.db", steps=6)
    store.set_run(auto_promote=1)
    before = outcomes.mark(store)
    run_round(context(store, step=6, probe=make_probe()))
    lines = outcomes.changes(store, before)
    assert lines[0].startswith("round at step 6: ") and "proposed" in lines[0]
    decided = [x for x in lines if x.startswith("  #")]
    assert decided and len(decided) == len(store.interventions())
    # a decision by statistics shows its effect, interval and sample size; a retirement its reason
    judged = [x for x in decided if "(replay): " in x and " [" in x.split("(replay): ")[1]]
    assert judged and all(", n " in x for x in judged), decided
    assert any(": passed (replay): " in x for x in decided), decided
    promoted = [x for x in lines if x.startswith("  promoted #")]
    assert promoted and "as harness v2" in promoted[0], lines  # in the order they were promoted

    iid = int(promoted[0].split("#")[1].split()[0])
    before = outcomes.mark(store)
    rollback(context(store, step=8), iid, "validation fell")
    lines = outcomes.changes(store, before)
    assert [x for x in lines if x.startswith(f"  rolled back #{iid} ")], lines
    assert outcomes.changes(store, outcomes.mark(store)) == []  # nothing new: nothing printed


def _steps_trained(store, trained: dict[int, int]) -> None:
    for step, n in trained.items():
        store.update("steps", step, {"metrics_json": json.dumps({"trained_sequences": n})})


def test_end_summary_says_no_update_when_every_group_was_dead(tmp_path):
    store = build_run(tmp_path / "r" / "run.db", steps=3, mix={"correct": 0.0, "tagged": 0.0})
    store.update("steps", 1, {"dead_group_frac": 1.0})
    for s in (1, 2, 3):
        store.update("steps", s, {"dead_group_frac": 1.0})
    _steps_trained(store, {1: 0, 2: 0, 3: 0})
    for split, right in (("validation", 2), ("test", 3)):
        add_eval(store, 0, right_of(32, right), split)
        add_eval(store, 3, right_of(32, right), split)
    store.set_run(status="finished", steps_total=3)
    store.close()
    text = end_summary(tmp_path / "r")
    assert "policy:      no update was taken: every group was dead" in text
    assert "test:        0.094 at step 0 -> 0.094 at step 3 (3 of 32, 95% CI" in text and "reported only" in text
    assert "validation:  0.062 at step 0 -> 0.062 at step 3 (2 of 32" in text and "read by the gate" in text
    assert "heldout_acc" not in text and "None" not in text
    assert "harness:     v1, unchanged; 0 candidate(s)" in text
    run = str(tmp_path / "r")
    for cmd in (f"evotui open {run}", f"evotui report {run}", f"evotui export {run}",
                f"evotui run --headless --resume {run} --steps 6"):
        assert cmd in text, text


def test_end_summary_counts_updates_and_lists_promotions(tmp_path):
    store = build_run(tmp_path / "r" / "run.db", steps=6)
    _steps_trained(store, {1: 0, 2: 4, 3: 0, 4: 6, 5: 0, 6: 2})
    store.set_run(auto_promote=1)
    run_round(context(store, step=6, probe=make_probe()))
    store.set_run(status="stopped")
    promoted = [iv for iv in store.interventions() if iv.status == "promoted"]
    store.close()
    text = end_summary(tmp_path / "r", wall_s=12.3)
    assert "(stopped, 6 of 6 steps, 12 s)" in text
    assert "policy:      updated at 3 of 6 steps" in text
    assert "harness:     v1 -> v" in text and f"{len(promoted)} promoted" in text
    assert f"  promoted #{promoted[0].id} at step 6: " in text and "passed (replay): " in text
    assert f"  evotui run --headless --resume {tmp_path / 'r'}    # train on" in text.splitlines()
    assert "test:        not evaluated" in text


def test_each_runs_report_goes_in_its_own_folder(tmp_path):
    """Two report calls on different runs leave two reports (they shared one folder before)."""
    from evotui.cli import main

    for name in ("a", "b"):
        build_run(tmp_path / name / "run.db", steps=2).close()
    assert main(["report", str(tmp_path / "a")]) == 0 and main(["report", str(tmp_path / "b")]) == 0
    assert (tmp_path / "a" / "report" / "report.md").is_file() and (tmp_path / "b" / "report" / "report.md").is_file()
    assert not (tmp_path / "report").exists()


def test_headless_run_prints_evaluations_rounds_and_the_summary(tmp_path, tiny_overrides, tiny_model):
    """A real run of a tiny random Llama, piped: each evaluation's and the round's outcome lines reach stdout as
    they happen (not only the database), then the summary with the next commands."""
    import sys

    from engine_waits import run_files, run_process

    run = tmp_path / "run"
    sets = set_flags(*tiny_overrides, "evolve.every=1", "evolve.candidates=1", "evolve.probe_tasks=1", "eval.every=1",
                     f"model.name='{tiny_model}'")
    p = run_process([sys.executable, "-m", "evotui", "run", "--headless", "--steps", "1", "--run-dir", str(run),
                     *sets], "the run to end", run_files(run))
    assert p.returncode == 0, p.stderr[-2000:]
    out = p.stdout.splitlines()
    first = [i for i, x in enumerate(out) if x.startswith(("validation accuracy at", "test accuracy at",
                                                            "step    1/1", "round at step 1:", "policy:"))]
    kinds = [out[i].split(" at ")[0].split(":")[0][:8] for i in first]
    assert kinds[:3] == ["validati", "test acc", "step    "], out  # the start's evaluation, then the step
    assert "round" in kinds and kinds[-1] == "policy", out
    assert any(x.startswith("  #") for x in out), out  # each candidate with its decision
    assert "heldout_acc" not in p.stdout and "policy_version: None" not in p.stdout
    assert f"evotui report {run}" in p.stdout and "held-out eval 0/4 at start" in p.stderr  # the status, plain
