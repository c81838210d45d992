"""A private CUDA MPS daemon for runs that share a card (`evotui compare --jobs N --mps`,
`evotui bench --only card --card-mps`).

Processes that share a GPU without MPS take turns on it: one process's kernels run at a
time. Runs of a small model launch small kernels that fill a fraction of the card, so
several runs on one card leave most of it idle. NVIDIA's Multi-Process Service lets the
kernels of several processes run at once. The daemon here is the user's own: it serves only
the processes given its environment (`MpsDaemon.env`: its pipe and log folders under
`root`), leaves the card's settings (compute mode, MIG) as they are, and is told to quit
when the block ends.

    with MpsDaemon.start() as mps:     # mps.env: {} when it could not start
        subprocess.Popen(args, env={**os.environ, **mps.env})

A card whose driver has no `nvidia-cuda-mps-control`, or a daemon that does not answer, gives
`env == {}` and `why` says what happened: the runs then share the card as before.

The server renumbers the devices it was started with from 0, so a client that kept the
daemon's `CUDA_VISIBLE_DEVICES=2` would ask for a device the server does not have ("no CUDA
GPU"; measured on an H200): `env` gives clients the renumbered list, and `client_env(pinned)`
the server's numbers for a client pinned to some of the daemon's GPUs:

    daemon started with CUDA_VISIBLE_DEVICES=2,3:   client_env(["3"]) -> CUDA_VISIBLE_DEVICES=1
    daemon started without it (the machine's ids):  client_env(["1"]) -> CUDA_VISIBLE_DEVICES=1
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CONTROL = "nvidia-cuda-mps-control"
START_S = 10.0


@dataclass
class MpsDaemon:
    env: dict[str, str] = field(default_factory=dict)
    """What a process needs in its environment to be served by this daemon; {} when not running."""
    why: str = ""
    """Why the daemon is not running (empty when it is)."""
    control: str = ""
    """The control binary it was started with (what `stop` tells to quit)."""
    pipes: dict[str, str] = field(default_factory=dict)
    """The daemon's pipe and log folders (what `stop` needs to reach it)."""
    devices: list[str] = field(default_factory=list)
    """The entries of the CUDA_VISIBLE_DEVICES it was started with, in the server's order (the
    server numbers them from 0); empty: started without it, the server numbers GPUs as the machine does."""

    @classmethod
    def start(cls, root: Path | None = None, control: str = CONTROL) -> MpsDaemon:
        """The daemon, its pipe and log folders under `root`; without `root`, under a new
        `evotui-mps-*` temp folder (the pipe is a unix socket, whose path may hold about 108
        characters), removed again when the daemon does not start."""
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="evotui-mps-"))
            mps = cls.start(root, control)
            if not mps.env:
                shutil.rmtree(root, ignore_errors=True)
            return mps
        exe = shutil.which(control)
        if exe is None:
            return cls(why=f"{control} is not on PATH: runs share the card without MPS")
        pipe, log = root / "mps-pipe", root / "mps-log"
        pipe.mkdir(parents=True, exist_ok=True)
        log.mkdir(parents=True, exist_ok=True)
        env = {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(log)}
        devices = entries(os.environ.get("CUDA_VISIBLE_DEVICES"))
        running = cls(env={**env, **client_devices(devices)}, control=exe, pipes=env, devices=devices)
        try:
            done = subprocess.run([exe, "-d"], env={**os.environ, **env}, capture_output=True, text=True,
                                  timeout=START_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            return cls(why=f"{control} -d did not start: {type(e).__name__}: {e}"[:300])
        if done.returncode != 0:
            return cls(why=f"{control} -d exited {done.returncode}: {(done.stderr or done.stdout).strip()[:200]}")
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:  # the control pipe appears once the daemon listens
            if any(pipe.iterdir()):
                return running
            time.sleep(0.1)
        running.stop()  # it may listen late: told to quit all the same
        return cls(why=f"{control} started but made no pipe in {pipe} within {START_S:.0f} s")

    def stop(self) -> None:
        """Tell the daemon to quit (its clients should have exited); nothing when not running."""
        if not self.env or not self.control:
            return
        try:
            subprocess.run([self.control], input="quit\n", env={**os.environ, **self.pipes}, capture_output=True,
                           text=True, timeout=START_S)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.env = {}

    def client_env(self, pinned: list[str]) -> dict[str, str]:
        """What a process pinned to GPUs `pinned` needs in its environment to be served by this
        daemon: its pipe and log folders, and CUDA_VISIBLE_DEVICES as the server numbers those GPUs.
        `pinned` names GPUs as the daemon's own CUDA_VISIBLE_DEVICES does (or as the machine does,
        when it was started without one); no pins: all of its GPUs (`env`). {} when not running;
        a GPU the daemon does not serve raises ValueError."""
        if not self.env:
            return {}
        if not pinned:
            return dict(self.env)
        return {**self.pipes, "CUDA_VISIBLE_DEVICES": ",".join(server_index(self.devices, g) for g in pinned)}

    def __enter__(self) -> MpsDaemon:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def entries(visible: str | None) -> list[str]:
    """The GPU ids of a CUDA_VISIBLE_DEVICES value, in order ([] when unset or empty)."""
    return [d.strip() for d in (visible or "").split(",") if d.strip()]


def client_devices(devices: list[str]) -> dict[str, str]:
    """A client's CUDA_VISIBLE_DEVICES under a daemon started with `devices`: the same number of
    devices, numbered from 0 as the server numbers them ({} when the daemon had no list)."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(devices)))} if devices else {}


def server_index(devices: list[str], gpu: str) -> str:
    """GPU `gpu` as a server started with CUDA_VISIBLE_DEVICES entries `devices` numbers it: its
    place in that list; without a list, the machine's own number.

    >>> server_index(["2", "3"], "3"), server_index([], "1")
    ('1', '1')
    """
    gpu = gpu.strip()
    if not devices:
        if not gpu.isdigit():
            raise ValueError(f"GPU {gpu!r} is not a device number; the MPS daemon was started without "
                             "CUDA_VISIBLE_DEVICES, so it numbers GPUs as the machine does")
        return gpu
    if gpu not in devices:
        raise ValueError(f"GPU {gpu!r} is not one the MPS daemon serves (it was started with "
                         f"CUDA_VISIBLE_DEVICES={','.join(devices)})")
    return str(devices.index(gpu))
