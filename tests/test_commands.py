"""Operator commands: the one check (backend/commands.py) and the one dispatcher (backend/dispatch.py).

The engine's side is driven over a synthetic run after a real round (candidates built on v1);
the CLI's side over the TUI's frozen fixture run, through `evotui.cli.main`.
"""

from __future__ import annotations

import json
import shutil
import pytest

from backend.commands import CommandRefused, check, stale_base
from backend.dispatch import Control, apply_one, apply_pending
from backend.evolve import promote, run_round
from backend.evolve import interventions as iv
from backend.evolve.edit import set_definition
from backend.store import Store, loads
from evotui.cli import main
from synthetic_run import add_eval, build_run, context, make_probe, outcomes

RUN = {"harness_version": 2, "status": "running"}


# ---------------------------------------------------------------- the check, without any run


def test_check_states_intent_and_refuses_at_once():
    passed = {"id": 3, "status": "passed", "parent_version": 2}
    assert check("approve", {"id": "#3"}, RUN, passed) == {"id": 3, "base": 2}
    assert check("auto_promote", {"on": False}, RUN) == {"on": False}
    with pytest.raises(CommandRefused, match="on: true or false"):
        check("auto_promote", {"value": "toggle"}, RUN)
    with pytest.raises(CommandRefused, match="a veto needs a reason"):
        check("veto", {"id": 3, "reason": "  "}, RUN, passed)
    assert check("veto", {"id": 3, "reason": " too small "}, RUN, passed) == {"id": 3, "reason": "too small"}
    for status in ("failed", "vetoed", "promoted"):
        with pytest.raises(CommandRefused, match=f"#3 is {status}; only a passed"):
            check("approve", {"id": 3}, RUN, dict(passed, status=status))
    with pytest.raises(CommandRefused, match="approve it explicitly"):
        check("approve", {"id": 3}, RUN, dict(passed, status="inconclusive"))
    with pytest.raises(CommandRefused, match="no intervention #9"):
        check("approve", {"id": 9}, RUN, None)
    with pytest.raises(CommandRefused, match="the run is finished; there is nothing to stop"):
        check("stop", {}, dict(RUN, status="finished"))


def test_a_stale_base_is_refused_unless_a_rebase_is_confirmed():
    old = {"id": 6, "status": "passed", "parent_version": 2}
    run = dict(RUN, harness_version=3)
    assert stale_base(old, 3) == "built on v2; v3 is active: approving drops v3's change"
    with pytest.raises(CommandRefused, match="built on v2; v3 is active: approving drops v3's change"):
        check("approve", {"id": 6}, run, old)
    assert check("approve", {"id": 6, "rebase": True}, run, old) == {"id": 6, "base": 2, "rebase": True}
    with pytest.raises(CommandRefused, match="was rebased"):  # the operator looked at another base
        check("approve", {"id": 6, "base": 1}, run, old)


# ---------------------------------------------------------------- the engine's dispatcher


@pytest.fixture(scope="module")
def after_round(tmp_path_factory):
    """A supervised run after one round: #1 (retire a diagnostic) and #3 (lenient extraction)
    passed, both built on v1. Built once; each test gets a copy."""
    path = tmp_path_factory.mktemp("round") / "run.db"
    store = build_run(path, steps=6)
    add_eval(store, 5, outcomes(40, 12))
    run_round(context(store, probe=make_probe()))
    store.close()
    return path


@pytest.fixture
def run(after_round, tmp_path):
    shutil.copy(after_round, tmp_path / "run.db")
    store = Store.open(tmp_path / "run.db", create=False)
    yield store, context(store, probe=make_probe())
    store.close()


def _by_title(store, text):
    return next(r for r in store.rows("SELECT * FROM interventions") if text in r["title"])


def _send(store, ctx, verb, **arg):
    cid = store.send_command(verb, arg, source="test")
    return apply_one(Control(store), store.get("commands", cid), ctx)


def test_approving_a_stale_candidate_is_refused_then_rebased_and_promoted(run):
    store, ctx = run
    retire, lenient = _by_title(store, "Retire"), _by_title(store, "Lenient")
    assert promote(ctx, retire["id"], "test") == 2
    status, result = _send(store, ctx, "approve", id=lenient["id"])
    assert status == "rejected" and "built on v1; v2 is active: approving drops v2's change" in result
    assert store.get("interventions", lenient["id"])["status"] == "passed" and store.run()["harness_version"] == 2
    status, result = _send(store, ctx, "approve", id=lenient["id"], rebase=True)
    assert status == "applied" and "rebased onto v2, backtest passed" in result and "harness v3" in result
    row = store.get("interventions", lenient["id"])
    assert row["status"] == "promoted" and row["parent_version"] == 2
    v3 = store.get("harness_versions", 3)
    assert v3["parent"] == 2 and "def diagnose_empty" not in v3["code"]  # v2's change is kept
    assert v3["code"] != store.get("harness_versions", 2)["code"]
    steps = [h["to"] for h in loads(row["history_json"])]
    assert steps[-5:] == ["passed", "backtesting", "passed", "approved", "promoted"]
    assert loads(row["params_json"])["rebased"][0]["from"] == 1


def test_a_rebase_that_does_not_apply_fails_with_the_reason(run):
    store, ctx = run
    lenient = _by_title(store, "Lenient")
    base = store.get("harness_versions", 1)["code"]
    rival = set_definition(base, "extract_answer", "def extract_answer(text):\n    return text.strip()[-8:]\n")
    twin = iv.Candidate(title="Another extraction", code=rival, parent_version=1, parent_code=base, proposer="test")
    tid = iv.record(store, None, twin)
    assert promote(ctx, lenient["id"], "test") == 2  # v2 changed extract_answer
    for to in ("backtesting", "passed"):
        iv.transition(store, tid, to, "test")
    status, result = _send(store, ctx, "approve", id=tid, rebase=True)
    assert status == "rejected" and "changed 'extract_answer' too" in result
    row = store.get("interventions", tid)
    assert row["status"] == "failed" and "rebase from v1 onto v2 failed" in row["reason"]
    assert store.run()["harness_version"] == 2


def test_auto_mode_rebases_a_stale_candidate_before_promoting_it(run):
    store, ctx = run
    retire, lenient = _by_title(store, "Retire"), _by_title(store, "Lenient")
    promote(ctx, retire["id"], "test")
    status, result = _send(store, ctx, "auto_promote", on=True)
    assert status == "applied" and "promoted harness v3" in result
    row = store.get("interventions", lenient["id"])
    assert row["status"] == "promoted" and row["parent_version"] == 2
    assert store.get("harness_versions", 3)["parent"] == 2


def test_only_the_newest_value_of_a_setting_is_applied(run):
    """`p` pressed twice: on, then off. Applying "on" would promote a candidate for a moment."""
    store, ctx = run
    for on in (True, False):
        store.send_command("auto_promote", {"on": on}, source="tui")
    acked = apply_pending(Control(store), lambda: ctx)
    assert [(c["status"], c["result"]) for c in acked] == [
        ("superseded", f"superseded by command {acked[1]['id']}"), ("applied", "auto-promote off")]
    assert store.run()["auto_promote"] == 0 and store.run()["harness_version"] == 1
    assert store.pending_commands() == []


def test_each_command_is_acknowledged_once_and_harness_verbs_wait_for_a_step_boundary(run):
    store, ctx = run
    lenient = _by_title(store, "Lenient")
    store.send_command("approve", {"id": f"#{lenient['id']}", "base": 1}, source="cli")  # "#3" names #3 too
    store.send_command("pause", {}, source="cli")
    control = Control(store)
    assert [c["verb"] for c in apply_pending(control)] == ["pause"]  # inside a step: control verbs only
    assert [c["verb"] for c in store.pending_commands()] == ["approve"]
    assert [c["verb"] for c in apply_pending(control, lambda: ctx)] == ["approve"]
    events = store.rows("SELECT message FROM events WHERE kind = 'command'")
    assert len(events) == 2 and store.pending_commands() == []
    assert store.get("interventions", lenient["id"])["status"] == "promoted"


# ---------------------------------------------------------------- the CLI runs the same check


@pytest.fixture
def tui_run(tmp_path):
    from tui_fixtures import build_run as build_tui_run

    return build_tui_run(tmp_path / "run")


def _commands(run_dir) -> list[tuple[str, dict]]:
    s = Store.open(run_dir / "run.db", readonly=True)
    try:
        return [(c["verb"], json.loads(c["arg_json"])) for c in s.rows("SELECT * FROM commands ORDER BY id")]
    finally:
        s.close()


def test_cli_refuses_at_once_what_the_engine_would_refuse(tui_run, capsys):
    with pytest.raises(SystemExit) as e:  # a veto needs a reason here as in the TUI
        main(["veto", str(tui_run), "3"])
    assert e.value.code == 2 and "--reason" in capsys.readouterr().err
    assert main(["veto", str(tui_run), "3", "--reason", " "]) == 2
    assert "a veto needs a reason" in capsys.readouterr().err
    assert main(["approve", str(tui_run), "4"]) == 2  # #4 failed
    assert "evotui: error: intervention #4 is failed" in capsys.readouterr().err
    assert main(["approve", str(tui_run), "6"]) == 2  # inconclusive, not explicit
    assert "--inconclusive" in capsys.readouterr().err
    assert _commands(tui_run) == []
    assert main(["approve", str(tui_run), "3"]) == 0
    assert main(["veto", str(tui_run), "6", "--reason", "probe too small"]) == 0
    assert _commands(tui_run) == [("approve", {"id": 3, "base": 2}),
                                  ("veto", {"id": 6, "reason": "probe too small"})]


def test_cli_approve_of_a_stale_candidate_needs_rebase(tui_run, capsys):
    s = Store.open(tui_run / "run.db")
    s.update("interventions", 3, {"parent_version": 1})
    s.close()
    assert main(["approve", str(tui_run), "3"]) == 2
    assert "built on v1; v2 is active: approving drops v2's change" in capsys.readouterr().err
    assert main(["approve", str(tui_run), "3", "--rebase"]) == 0
    assert _commands(tui_run) == [("approve", {"id": 3, "base": 1, "rebase": True})]


def test_help_says_bare_evotui_starts_a_run_and_every_option_is_explained(capsys):
    from evotui.cli import _parser

    with pytest.raises(SystemExit):
        main(["--help"])
    assert "Bare `evotui` starts a new run" in " ".join(capsys.readouterr().out.split())

    def undocumented(parser, path):
        for action in parser._actions:
            if action.dest == "help":
                continue
            if getattr(action, "choices", None) and isinstance(action.choices, dict):  # subcommands
                for name, sub in action.choices.items():
                    yield from undocumented(sub, f"{path} {name}")
            elif not action.help:
                yield f"{path} {'/'.join(action.option_strings) or action.dest}"
    assert list(undocumented(_parser(), "evotui")) == []


def test_unknown_math_dataset_is_a_config_error_and_creates_nothing(tmp_path, capsys):
    run_dir = tmp_path / "new"
    code = main(["run", "--headless", "--run-dir", str(run_dir), "--set", "math.datasets=['chain_sum', 'nope']"])
    assert code == 2 and not run_dir.exists()
    assert "math.datasets: unknown reasoning-gym dataset(s): nope" in capsys.readouterr().err
