"""`evotui compare --jobs N --mps`: the grid's runs share their cards through one private MPS
daemon (backend/mps.py), each launched with the daemon's pipe folder and its GPUs as the server
numbers them, and the daemon is told to quit when the grid ends.

The control binary is the stand-in of tests/test_mps.py; the runs are not started: `Popen` of
`evotui run` gives a process that has already exited, and the rows say the runs failed."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from backend.config import RunConfig, load_config
from backend.grid import Stopping
from backend.population import members
from backend.tools import compare
from test_mps import DAEMON, _on_path


class _Exited:
    returncode = 0

    def poll(self) -> int:
        return 0

    def send_signal(self, sig: int) -> None:
        pass


def _fake_runs(monkeypatch) -> list[dict[str, str]]:
    """The env of every `evotui run` launched from now on, with whether the daemon's control
    pipe was there when it was launched; other commands (the control binary) run for real."""
    launched: list[dict[str, str]] = []
    real = subprocess.Popen

    def popen(args, *a, **kw):
        if list(args[1:3]) != ["-m", "evotui"]:
            return real(args, *a, **kw)
        env = dict(kw["env"])
        pipe = env.get("CUDA_MPS_PIPE_DIRECTORY")
        env["pipe_there"] = str(bool(pipe) and (Path(pipe) / "control").exists())
        launched.append(env)
        return _Exited()

    monkeypatch.setattr(subprocess, "Popen", popen)
    return launched


@pytest.fixture
def tmp_root(tmp_path, monkeypatch) -> Path:
    """Where `tempfile.mkdtemp` makes the daemon's folder."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def test_every_run_is_served_by_one_daemon_that_quits_at_the_end(tmp_path, tmp_root, monkeypatch, capsys):
    """Cards 2 and 3: the population (two members at once) is pinned to both, the static run to
    card 2; they are given the server's numbers "0,1" and "0", and one daemon's pipe folder."""
    _on_path(tmp_path, DAEMON, monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    launched = _fake_runs(monkeypatch)
    cfg = load_config(None, ["population.size=2"])
    compare.run_parallel(cfg, [0], tmp_path / "cmp", jobs=3, arms=["static", "population"], mps=True)
    printed = capsys.readouterr().out
    (root,) = tmp_root.glob("evotui-mps-*")
    assert "--mps: the runs share their cards through an MPS daemon" in printed
    assert "population      seed 0: started on GPU 2,3" in printed
    assert "static          seed 0: started on GPU 2\n" in printed
    assert [e["CUDA_VISIBLE_DEVICES"] for e in launched] == ["0,1", "0"]
    assert {e["CUDA_MPS_PIPE_DIRECTORY"] for e in launched} == {str(root / "mps-pipe")}
    assert {e["CUDA_MPS_LOG_DIRECTORY"] for e in launched} == {str(root / "mps-log")}
    assert [e["pipe_there"] for e in launched] == ["True", "True"]
    assert (root / "mps-log" / "devices").read_text().strip() == "2,3"  # the daemon saw the machine's ids
    assert (root / "mps-log" / "control.log").read_text().strip() == "quit"


def test_a_population_passes_the_servers_numbers_on_to_its_members(tmp_path, monkeypatch):
    """A population coordinator given the server's "0,1" pins each member to one of them, and the
    members inherit its pipe folder: the coordinator's environment is all MPS needs."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/evotui-mps-x/mps-pipe")
    launched = _fake_runs(monkeypatch)
    (tmp_path / "pop").mkdir()
    members.run_segment(tmp_path / "pop", RunConfig(), [RunConfig(), RunConfig()], 1, 2, Stopping())
    assert [e["CUDA_VISIBLE_DEVICES"] for e in launched] == ["0", "1"]
    assert {e["CUDA_MPS_PIPE_DIRECTORY"] for e in launched} == {"/tmp/evotui-mps-x/mps-pipe"}


def test_a_daemon_that_cannot_start_is_reported_and_the_runs_go_on_without_it(tmp_path, tmp_root, monkeypatch,
                                                                               capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    launched = _fake_runs(monkeypatch)
    compare.run_parallel(RunConfig(), [0], tmp_path / "cmp", jobs=2, arms=["static", "coevolve"], mps=True)
    assert "--mps: nvidia-cuda-mps-control is not on PATH" in capsys.readouterr().out
    assert sorted(e["CUDA_VISIBLE_DEVICES"] for e in launched) == ["2", "3"]  # the machine's ids, no daemon
    assert not any("CUDA_MPS_PIPE_DIRECTORY" in e for e in launched)
    assert not list(tmp_root.iterdir())  # its folder removed


def test_mps_on_cpu_runs_is_ignored_and_says_so(tmp_path, tmp_root, monkeypatch, capsys):
    _on_path(tmp_path, DAEMON, monkeypatch)
    monkeypatch.setattr(compare, "visible_gpus", lambda: [])
    launched = _fake_runs(monkeypatch)
    compare.run_parallel(RunConfig(), [0], tmp_path / "cmp", jobs=2, arms=["static"], mps=True)
    assert "--mps applies to GPU runs only" in capsys.readouterr().out
    assert len(launched) == 1 and "CUDA_MPS_PIPE_DIRECTORY" not in launched[0]
    assert not list(tmp_root.iterdir())  # no daemon started


@pytest.mark.parametrize("extra", [["--ray"], ["--jobs", "1"], []], ids=["ray", "jobs-1", "no-jobs"])
def test_mps_without_parallel_runs_is_a_usage_error(tmp_path, capsys, extra):
    from evotui.cli import main

    out = tmp_path / "cmp"
    assert main(["compare", "--mps", *extra, "--arms", "static", "--seeds", "0", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("evotui: error: --mps shares the cards"), err
    assert ("not with --ray" in err[0]) == (extra == ["--ray"])
    assert not out.exists()
