"""The private MPS daemon of `evotui bench --only card --card-mps` (backend/mps.py).

No CPU machine has NVIDIA's control binary, so the tests put stand-ins on PATH: a script that,
like the real one, forks a daemon on `-d` that makes its control pipe in
CUDA_MPS_PIPE_DIRECTORY and exits on `quit`; one that never makes a pipe; and none at all."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from backend.mps import CONTROL, MpsDaemon

DAEMON = r"""#!/bin/sh
if [ "$1" = "-d" ]; then
    pipe="$CUDA_MPS_PIPE_DIRECTORY/control"
    echo "${CUDA_VISIBLE_DEVICES-unset}" > "$CUDA_MPS_LOG_DIRECTORY/devices"
    ( mkfifo "$pipe"; while [ -p "$pipe" ]; do sleep 0.05; done ) >/dev/null 2>&1 &
    exit 0
fi
read cmd
[ "$cmd" = "quit" ] && rm -f "$CUDA_MPS_PIPE_DIRECTORY/control" && echo quit >> "$CUDA_MPS_LOG_DIRECTORY/control.log"
"""


def _on_path(tmp: Path, body: str, monkeypatch) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    exe = bin_dir / CONTROL
    exe.write_text(body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return exe


def test_no_control_binary_means_no_daemon_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with MpsDaemon.start(tmp_path / "mps") as mps:
        assert mps.env == {} and CONTROL in mps.why and "without MPS" in mps.why


def test_the_daemon_serves_its_own_folders_and_quits_at_the_end(tmp_path, monkeypatch):
    _on_path(tmp_path, DAEMON, monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    root = tmp_path / "mps"
    with MpsDaemon.start(root) as mps:
        assert mps.why == "" and mps.env == {"CUDA_MPS_PIPE_DIRECTORY": str(root / "mps-pipe"),
                                             "CUDA_MPS_LOG_DIRECTORY": str(root / "mps-log")}
        assert (root / "mps-pipe" / "control").exists()
    assert mps.env == {}  # told to quit
    assert (root / "mps-log" / "control.log").read_text().strip() == "quit"
    deadline = time.monotonic() + 5
    while (root / "mps-pipe" / "control").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (root / "mps-pipe" / "control").exists()


def test_clients_see_the_daemons_devices_numbered_from_0(tmp_path, monkeypatch):
    """The server renumbers the devices it was started with: a client that kept "2" would find
    no GPU (as on an H200 of a 4-card host), so clients get "0" while the daemon keeps "2"."""
    _on_path(tmp_path, DAEMON, monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    root = tmp_path / "mps"
    with MpsDaemon.start(root) as mps:
        assert mps.env["CUDA_VISIBLE_DEVICES"] == "0,1"
        assert (root / "mps-log" / "devices").read_text().strip() == "2,3"
    assert (root / "mps-log" / "control.log").read_text().strip() == "quit"


def test_a_client_pinned_to_some_gpus_gets_their_numbers_on_the_server(tmp_path, monkeypatch):
    """Started with "2,3", the server calls card 3 "1": a client pinned to card 3 is given "1"
    (as it kept "3", it would find no GPU); no pins: all of the daemon's cards, as `env`."""
    _on_path(tmp_path, DAEMON, monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    root = tmp_path / "mps"
    pipes = {"CUDA_MPS_PIPE_DIRECTORY": str(root / "mps-pipe"), "CUDA_MPS_LOG_DIRECTORY": str(root / "mps-log")}
    with MpsDaemon.start(root) as mps:
        assert mps.devices == ["2", "3"]
        assert mps.client_env(["3"]) == {**pipes, "CUDA_VISIBLE_DEVICES": "1"}
        assert mps.client_env(["3", "2"])["CUDA_VISIBLE_DEVICES"] == "1,0"
        assert mps.client_env([]) == mps.env == {**pipes, "CUDA_VISIBLE_DEVICES": "0,1"}
        with pytest.raises(ValueError, match="'5' is not one the MPS daemon serves.*=2,3"):
            mps.client_env(["5"])
    assert mps.client_env(["3"]) == {}  # told to quit: nothing serves a client now


def test_a_daemon_started_without_visible_devices_numbers_gpus_as_the_machine(tmp_path, monkeypatch):
    _on_path(tmp_path, DAEMON, monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with MpsDaemon.start(tmp_path / "mps") as mps:
        assert mps.devices == [] and mps.client_env(["1"])["CUDA_VISIBLE_DEVICES"] == "1"
        assert "CUDA_VISIBLE_DEVICES" not in mps.client_env([])
        with pytest.raises(ValueError, match="not a device number"):
            mps.client_env(["GPU-8f2a"])


def test_no_daemon_gives_no_client_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert MpsDaemon.start(tmp_path / "mps").client_env(["0"]) == {}


def test_a_daemon_that_never_listens_is_given_up(tmp_path, monkeypatch):
    import backend.mps as mps_module

    _on_path(tmp_path, "#!/bin/sh\nexit 0\n", monkeypatch)
    monkeypatch.setattr(mps_module, "START_S", 0.5)
    mps = MpsDaemon.start(tmp_path / "mps")
    assert mps.env == {} and "made no pipe" in mps.why


def test_a_control_binary_that_fails_to_start_is_reported(tmp_path, monkeypatch):
    _on_path(tmp_path, "#!/bin/sh\necho 'permission denied' >&2\nexit 3\n", monkeypatch)
    mps = MpsDaemon.start(tmp_path / "mps")
    assert mps.env == {} and "exited 3" in mps.why and "permission denied" in mps.why


def test_the_card_bench_runs_its_new_setting_under_the_daemon_and_says_so(tmp_path, monkeypatch):
    """`--card-mps`: the new setting's runs get the daemon's environment and the row says MPS;
    without the control binary the row says MPS was asked for and why it is not running."""
    from types import SimpleNamespace

    from backend.tools import bench_card

    seen = {}

    def measure(b, label, extra, budget_s, env=None):
        seen[label] = env
        run = bench_card.Progress(seen=[(t, 2 + k, 512 * k, 100 * k) for k, t in enumerate((0.0, 5.0, 9.0, 15.0))])
        return {"label": label, "runs": [run], "window_s": 60.0, "started_s": 5.0}

    monkeypatch.setattr(bench_card, "measure", measure)
    b = SimpleNamespace(a=SimpleNamespace(card_new="", card_deadline=100.0, card_runs=1, card_share=0.15,
                                          card_mps=True), cuda=True, log=lambda m: None)
    _on_path(tmp_path, DAEMON, monkeypatch)
    row = bench_card.card_rows(b)[0]
    assert seen["today"] is None and set(seen["new"]) == {"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"}
    assert row["note"].endswith("new: MPS") and "timed over steps 2-5" in row["note"]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    row = bench_card.card_rows(b)[0]
    assert seen["new"] == {} and "MPS asked for, not running" in row["note"]
