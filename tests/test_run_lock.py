"""One engine a run (backend/run_lock.py): a second `--resume` of a run an engine holds is one
line, exit 2, before anything is written; the lock goes with its process, however it ends."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from backend import run_lock
from backend.store import Store, StoreError
from test_bad_input_cli import counts, evotui, make_run, one_line_error

HOLDER = textwrap.dedent("""
    import sys, time
    from backend import run_lock
    with run_lock.held(sys.argv[1]):
        print("held", flush=True)
        time.sleep(600)
""")


def hold(run_dir) -> subprocess.Popen:
    """Another process holding the run's engine lock (an engine still loading its model)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_engine_is_refused_before_it_writes_anything(tmp_path):
    run = make_run(tmp_path / "run")
    store = Store.open(run, create=False)
    store.set_run(status="stopped", pid=None)  # resumable, and no pid to tell that an engine starts
    store.close()
    before = counts(run)
    holder = hold(run)
    try:
        one_line_error(evotui("run", "--headless", "--resume", run, "--steps", "9"), "is already running",
                       f"engine pid {holder.pid} holds it", f"evotui stop {run}")
        assert counts(run) == before
        assert Store.open(run, readonly=True).run()["status"] == "stopped"  # not marked crashed by the refused one
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_goes_with_its_process_and_is_not_held_twice(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    holder = hold(run)
    with pytest.raises(StoreError, match=f"engine pid {holder.pid} holds it"):
        with run_lock.held(run):
            pass
    holder.send_signal(signal.SIGKILL)  # no clean-up runs: the kernel releases it
    holder.wait()
    with run_lock.held(run):  # free again
        pass
