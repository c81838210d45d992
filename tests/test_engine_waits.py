"""The stall rule every wait in the tests follows (tests/engine_waits.py): a wait lasts as long
as something progresses, and fails on a stall, not on a total time. A fake clock and a fake
progress source: nothing here sleeps."""

from __future__ import annotations

import os
import time

import pytest

from engine_waits import EngineGone, Stalled, Watch, cpu, either, files, wait_for

STALL_S, CEILING_S, POLL_S = 60.0, 3600.0, 1.0


class FakeTime:
    """A clock that moves only when the waiter sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def _wait(t: FakeTime, condition, progress):
    return wait_for("the fake engine", condition, poll_s=POLL_S, progress=progress, stall_s=STALL_S,
                    ceiling_s=CEILING_S, clock=t.clock, sleep=t.sleep)


def test_slow_progress_is_waited_through_far_past_any_fixed_deadline():
    t = FakeTime()
    progress = lambda: f"rows {int(t.now // (STALL_S * 0.9))}"  # noqa: E731 -- changes just inside the window
    assert _wait(t, lambda: t.now >= 20 * STALL_S and "done", progress) == "done"
    assert t.now >= 20 * STALL_S


def test_a_stall_fails_one_window_after_the_last_change_and_says_what_it_saw():
    t = FakeTime()
    progress = lambda: f"rows {min(int(t.now // 10), 30)}"  # noqa: E731 -- grows until 300 s, then never
    with pytest.raises(Stalled) as e:
        _wait(t, lambda: False, progress)
    assert 300 + STALL_S < t.now <= 300 + STALL_S + 2 * POLL_S
    assert "the fake engine" in str(e.value) and "last seen: rows 30" in str(e.value)


def test_an_engine_that_keeps_changing_but_never_gets_there_meets_the_ceiling():
    t = FakeTime()
    with pytest.raises(Stalled, match="ceiling"):
        _wait(t, lambda: False, lambda: f"tick {t.now}")
    assert CEILING_S < t.now <= CEILING_S + 2 * POLL_S


def test_without_a_progress_source_only_the_ceiling_applies():
    t = FakeTime()
    watch = Watch("nothing in particular", None, STALL_S, CEILING_S, t.clock)
    t.now = CEILING_S  # no stall window without a source
    watch.check()
    t.now += 1
    with pytest.raises(Stalled, match="ceiling"):
        watch.check()


def test_an_exited_engine_is_reported_at_once_unless_it_got_there():
    class Exited:
        returncode, stderr, pid = 3, None, os.getpid()

        def poll(self):
            return 3

    t = FakeTime()
    with pytest.raises(EngineGone, match="status 3"):
        wait_for("step 1", lambda: False, Exited(), progress=lambda: "", clock=t.clock, sleep=t.sleep)
    assert t.now == 0.0
    done = iter([False, True])
    assert wait_for("step 1", lambda: next(done), Exited(), progress=lambda: "", clock=t.clock, sleep=t.sleep)


def test_the_real_sources_change_with_cpu_work_and_writes(tmp_path):
    mine, log = cpu(os.getpid()), tmp_path / "run.log"
    seen = either(mine, files(log))
    before = seen()
    assert "no run.log" in before
    start = time.process_time()
    while time.process_time() - start < 0.03:  # CPU work, not a sleep: deterministic
        pass
    assert mine() != before.split("; ")[0]
    log.write_text("step 1\n")
    assert "run.log 7 B" in seen()
    assert "gone" in cpu(2**22 + 12345)()


def test_the_source_is_asked_at_most_once_a_sample_however_fast_the_poll():
    t, asked = FakeTime(), []

    def source() -> str:
        asked.append(t.now)
        return "same"

    with pytest.raises(Stalled):
        wait_for("a fast poll", lambda: False, poll_s=0.05, progress=source, stall_s=10.0, clock=t.clock,
                 sleep=t.sleep)
    assert 10 <= len(asked) <= 12 and all(b - a >= 1.0 - 1e-9 for a, b in zip(asked, asked[1:]))
