"""A process that lives for one run freezes its heap before the loop (backend/heap.py); one
that builds engine after engine (tests, compare's in-process arms) does not."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest

from backend import runs


@pytest.fixture
def unfrozen(monkeypatch):
    monkeypatch.setattr(runs, "summary", lambda store, seconds: {})  # no run database here
    gc.unfreeze()
    yield
    gc.unfreeze()


def _engine(seen: list[int]):
    return SimpleNamespace(run=lambda: seen.append(gc.get_freeze_count()), run_dir=".")


def test_a_run_in_its_own_process_trains_with_its_heap_frozen(unfrozen):
    seen: list[int] = []
    runs._drive(_engine(seen), store=None, quiet=True, own_process=True)
    assert seen[0] > 1000  # the interpreter, torch and the test's modules at least


def test_an_in_process_run_leaves_the_heap_alone(unfrozen):
    seen: list[int] = []
    runs._drive(_engine(seen), store=None, quiet=True)
    assert seen == [0]
