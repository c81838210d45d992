"""The warm sandbox pool contains what a fresh sandbox contains, and loses no verdict.

The hostile-code tests of test_sandbox.py run again with every job on pool
workers; the code canaries get the same verdicts pooled as in fresh processes;
a worker that dies is replaced (its job retried once, or reported crashed);
closing a pool leaves no process and no folder behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import uuid
from pathlib import Path

import pytest
import test_sandbox as fresh
from test_code_canaries import CANARIES, TASK, F, block

from backend.config import CodeConfig
from backend.envs.code import CodeEnv, data_dir
from backend.sandbox import isolation_report, run_python, sandbox_mode
from backend.sandbox.pool import SandboxPool, Worker

pytestmark = pytest.mark.skipif(not sandbox_mode().namespaces,
                                reason="the pool runs only where the sandbox has namespaces")


class Pools:
    """One pool per (hide, pythonpath), so every job of the hostile tests runs pooled."""

    def __init__(self):
        self.pools: dict[tuple, SandboxPool] = {}

    def pool(self, job: dict) -> SandboxPool:
        key = (tuple(job.get("hide") or ()), tuple(job.get("pythonpath") or ()))
        if key not in self.pools:
            self.pools[key] = SandboxPool(2, hide=list(key[0]), pythonpath=list(key[1]))
        pool = self.pools[key]
        assert pool.fits(job), job
        return pool

    def run_python(self, code: str, **kw):
        job = dict(kw, code=code)
        return self.pool(job).run(job)

    def run_many(self, jobs, max_workers=None):
        return [self.pool(j).run(j) for j in jobs]

    def close(self):
        for p in self.pools.values():
            p.close()


@pytest.fixture
def pooled(monkeypatch):
    pools = Pools()
    monkeypatch.setattr(fresh, "run_python", pools.run_python)
    monkeypatch.setattr(fresh, "run_many", pools.run_many)
    yield pools
    pools.close()


@pytest.fixture(scope="module")
def report():
    return isolation_report()


SIMPLE = ["test_statuses_and_output", "test_infinite_loop_times_out", "test_fork_bomb_is_contained",
          "test_ten_gigabyte_allocation_is_a_memory_error", "test_file_size_limit", "test_output_is_bounded",
          "test_pythonpath_makes_project_importable"]


@pytest.mark.parametrize("name", SIMPLE)
def test_hostile_code_is_contained_on_the_pool(pooled, name):
    getattr(fresh, name)()
    assert pooled.pools, "no job ran on the pool"


def test_files_stdin_env_on_the_pool(pooled, monkeypatch):
    fresh.test_files_argv_stdin_and_scrubbed_env(monkeypatch)


def test_daemon_network_and_hidden_paths_on_the_pool(pooled, report, tmp_path):
    fresh.test_daemonised_child_does_not_outlive_the_run(report)
    fresh.test_network_is_unreachable(report)
    fresh.test_hidden_paths_are_invisible(tmp_path, report)


def test_decoy_and_shell_on_the_pool(pooled, report, tmp_path, monkeypatch):
    home = tmp_path / "decoy-home"
    home.mkdir()
    (home / "keep.txt").write_text("keep me")
    monkeypatch.setenv("HOME", str(home))
    fresh.test_decoy_directory_outside_is_untouched(home, report)
    fresh.test_spawning_a_shell(home, report)


def test_a_job_cannot_see_or_signal_its_worker():
    code = ("import os, signal\nprint(os.getpid(), os.getppid(), sorted(os.listdir('/tmp')), "
            "open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n"
            "for pid in range(1, 200):\n    try:\n        os.kill(pid, signal.SIGKILL) if pid != 1 else None\n"
            "    except OSError:\n        pass\nos.kill(-1, signal.SIGKILL)\n")
    with SandboxPool(1) as pool:
        first = pool.run({"code": code})
        again = pool.run({"code": "print('alive')"})
        assert pool.restarts == 0
    pid, ppid, tmp, caps = first.stdout.split(" ", 3)
    # /tmp is the job's own: empty but for the mount points of the interpreter's paths, as in a
    # fresh sandbox (a checkout under /tmp shows its top folder there)
    fresh_tmp = run_python("import os\nprint(sorted(os.listdir('/tmp')))").stdout.strip()
    assert (pid, ppid, tmp) == ("1", "0", fresh_tmp) and int(caps, 16) == 0, (first.stdout, fresh_tmp)
    assert again.stdout == "alive\n"


def test_jobs_leave_nothing_for_the_next_job():
    leave = ("import os\nopen('/tmp/left', 'w').write('x')\nopen('left', 'w').write('x')\n"
             "import socket; socket.sethostname('dirty')\n")
    look = "import os, socket\nprint(os.path.exists('/tmp/left'), os.path.exists('left'), socket.gethostname())\n"
    with SandboxPool(1) as pool:
        pool.run({"code": leave})
        r = pool.run({"code": look})
    assert r.stdout.split()[:2] == ["False", "False"] and r.stdout.split()[2] != "dirty", r.stdout


# ------------------------------------------------------------ verdicts equal a fresh process's

HOSTILE = {
    "loops_forever": block(f"def {F}(n):\n    while True:\n        pass\n"),
    "exhausts_memory": block(f"def {F}(n):\n    x = bytearray(10 ** 10)\n    return n\n"),
    "kills_its_parent": block(f"import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef {F}(n):\n"
                              "    return n\n"),
    "forks": block(f"import os\nif os.fork() == 0:\n    import time; time.sleep(30)\ndef {F}(n):\n    return n\n"),
    "reads_hidden_files": block(f"import os\nprint(os.listdir({data_dir()!r}))\ndef {F}(n):\n    return n\n"),
}


def verdicts(pool: bool) -> list[tuple]:
    env = CodeEnv(CodeConfig(timeout_s=2, sandbox_pool=pool))
    task = env.task(TASK.id)
    texts = [c for c, _ in CANARIES.values()] + list(HOSTILE.values()) + [block(TASK.solution)]
    try:
        out = env.evaluate_many([(task, t) for t in texts])
    finally:
        env.close()
    keys = ("error_type", "passed", "total", "limit")
    return [(v.correct, v.status, tuple(v.detail.get(k) for k in keys)) for v in out]


def test_pooled_code_verdicts_equal_fresh_ones():
    pooled, plain = verdicts(True), verdicts(False)
    names = list(CANARIES) + list(HOSTILE) + ["reference"]
    assert dict(zip(names, pooled)) == dict(zip(names, plain))
    assert pooled[-1][0] and not any(v[0] for v in pooled[:-1])


# ------------------------------------------------------------ dead workers, close


def _worker_pids(pool: SandboxPool) -> list[int]:
    return [w.proc.proc.pid for w in pool.workers()]


def test_a_dead_worker_is_replaced():
    with SandboxPool(1) as pool:
        assert pool.run({"code": "print(1)"}).status == "passed"
        (old,) = _worker_pids(pool)
        os.killpg(old, signal.SIGKILL)
        r = pool.run({"code": "print(2)"})
        assert r.stdout == "2\n" and pool.restarts == 1 and _worker_pids(pool) != [old]


def test_a_job_whose_worker_dies_is_retried_once_then_reported(monkeypatch):
    real = Worker.run
    calls = []

    def dies_first(self, job):
        if job["code"] != "print('ok')":  # not the pool's one probe
            calls.append(self)
            if len(calls) == 1 or job["code"] == "print('never')":
                os.killpg(self.proc.proc.pid, signal.SIGKILL)
        return real(self, job)

    monkeypatch.setattr(Worker, "run", dies_first)
    with SandboxPool(1) as pool:
        r = pool.run({"code": "print('once')"})
        assert r.stdout == "once\n" and len(calls) == 2 and calls[0] is not calls[1]
        lost = pool.run({"code": "print('never')"})
    assert lost.status == "crashed" and "pool worker failed" in lost.detail["sandbox_error"]


def test_a_pool_whose_workers_cannot_start_runs_jobs_fresh(monkeypatch, tmp_path):
    monkeypatch.setattr("backend.sandbox.pool.FORKSERVER", str(tmp_path / "missing.py"))
    with SandboxPool(1) as pool:
        r = pool.run({"code": "print('fresh')"})
    assert r.stdout == "fresh\n" and "did not start" in pool.start_error


def test_a_pool_whose_jobs_cannot_run_here_runs_them_fresh(monkeypatch):
    real = Worker.run

    def setup_fails(self, job):
        return real(self, dict(job, code="import os; os._exit(121)"))

    monkeypatch.setattr(Worker, "run", setup_fails)
    with SandboxPool(1) as pool:
        r = pool.run({"code": "print('fresh')"})
    assert r.stdout == "fresh\n" and "probe job" in pool.start_error


def _running(marker: str) -> list[int]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(int(pid))
        except OSError:
            pass
    return out


def test_close_leaves_no_process_and_no_folder():
    pool = SandboxPool(2)
    marker = "pooljob-" + uuid.uuid4().hex
    jobs = [{"code": "import time; time.sleep(0.2)", "argv": [marker]} for _ in range(4)]
    assert [r.status for r in pool.run_many(jobs)] == ["passed"] * 4
    homes = [w.home for w in pool.workers()]
    assert homes and _running(str(homes[0]))  # the workers run while the pool is open
    pool.close()
    assert not any(_running(str(h)) for h in homes) and not _running(marker)
    assert not any(h.exists() for h in homes)
    assert pool.run({"code": "print(1)"}).status == "crashed"  # closed: no new workers


def test_workers_end_when_their_host_dies_without_closing():
    import subprocess
    import sys
    import time

    code = ("import os\nfrom backend.sandbox.pool import SandboxPool\np = SandboxPool(2)\n"
            "p.run_many([{'code': 'print(1)'}] * 2)\nprint(*[w.home for w in p.workers()], flush=True)\nos._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=fresh.ROOT, check=True)
    homes = out.stdout.split()
    assert len(homes) == 2
    for _ in range(600):  # a worker sees its requests pipe close and ends, with its jobs' namespace
        if not any(_running(h) for h in homes):
            break
        time.sleep(0.1)
    assert not any(_running(h) for h in homes)
    for h in homes:  # what a host that dies cannot remove
        shutil.rmtree(h, ignore_errors=True)


def test_a_dropped_pool_closes_its_workers():
    import gc

    pool = SandboxPool(1)
    pool.run({"code": "print(1)"})
    (home,) = [w.home for w in pool.workers()]
    del pool
    gc.collect()
    assert not _running(str(home)) and not home.exists()

