"""Metrics where users already look: TensorBoard event files written from a run's
store and read back, a cursor that neither repeats nor skips across a resume, harness changes as
text, Trackio/W&B through their shared API, and sinks that fail without stopping anything.
(The real engine's hook is exercised in tests/test_retention.py's 30-step run.)"""

from __future__ import annotations

import sys
import types

from backend.metrics_export import MetricsExport, read_scalars, read_texts, reward_term_means, step_metrics
from backend.store import dumps


def _run(tmp_path, steps=4):
    from synthetic_run import build_run

    return build_run(tmp_path / "run" / "run.db", steps=steps), tmp_path / "run"


def test_tensorboard_scalars_and_notes_from_the_store(tmp_path):
    from synthetic_run import add_eval, add_steps

    store, run = _run(tmp_path)
    store.update("steps", 3, {"metrics_json": dumps({"reward_terms": {"correct": 0.5, "format": 0.25}}),
                              "gen_ms": 1500.0, "total_ms": 4000.0})
    add_eval(store, 0, [False, False])
    add_eval(store, 4, [True, False])
    add_eval(store, 4, [True, True, True, False], split="test")
    code = store.harness_version(1)["code"] + "\n# promoted\n"
    v2 = store.add_harness_version(code, 1, "", "active", "sha2", note="lenient extraction")
    store.set_run(harness_version=v2)
    add_steps(store, 5, 6)
    exp = MetricsExport.open(run, ["tensorboard"], store)
    exp.publish()
    exp.publish()  # nothing new: nothing written twice
    exp.close()
    sc = read_scalars(run / "tensorboard")
    rows = {r["step"]: r for r in store.window_steps(1, 6)}
    assert sc["reward/mean"] == [(s, _f32(rows[s]["reward_mean"])) for s in range(1, 7)]
    assert [s for s, _ in sc["groups/dead_frac"]] == list(range(1, 7))
    assert sc["reward/correct/mean"] == [(3, 0.5)] and sc["reward/format/mean"] == [(3, 0.25)]
    assert sc["time/gen_s"] == [(3, 1.5)] and sc["time/step_s"] == [(3, 4.0)]
    assert sc["eval/val/acc"] == [(0, 0.0), (4, 0.5)] and sc["eval/test/acc"] == [(4, 0.75)]
    assert [v for _, v in sc["harness/version"]] == [1, 1, 1, 1, 2, 2]
    notes = read_texts(run / "tensorboard")["harness"]
    assert notes == [(5, "harness v2 active, was v1: lenient extraction")]
    # a resumed engine: the cursor file says what was exported, so only the new step goes out; a
    # rollback after its last step is annotated at that step, and once
    add_steps(store, 7, 7)
    store.update("harness_versions", v2, {"status": "rolled_back"})
    store.set_run(harness_version=1)
    exp = MetricsExport.open(run, ["tensorboard"], store)
    exp.publish()
    exp.close()
    assert [s for s, _ in read_scalars(run / "tensorboard")["reward/mean"]] == list(range(1, 8))
    assert read_texts(run / "tensorboard")["harness"][1:] == [(7, "rolled back harness v2 to v1")]


def _f32(x: float) -> float:
    import struct

    return struct.unpack("f", struct.pack("f", x))[0]  # TensorBoard stores float32


def test_step_metrics_are_plain_numbers_under_namespaced_names():
    row = {"reward_mean": 0.5, "dead_group_frac": 0.25, "loss": float("nan"), "gen_ms": 2000.0, "harness_version": 3,
           "metrics_json": dumps({"reward_terms": {"correct": 1.0}})}
    m = step_metrics(row)
    assert m == {"reward/mean": 0.5, "groups/dead_frac": 0.25, "time/gen_s": 2.0, "harness/version": 3.0,
                 "reward/correct/mean": 1.0}  # NaN loss left out, not exported as NaN
    assert reward_term_means([{"a": 1.0, "b": True, "c": "x"}, {"a": 0.0, "d": float("inf")}]) == {"a": 0.5}


def test_trackio_and_wandb_get_each_step_once(tmp_path, monkeypatch):
    calls = []

    class Table:
        def __init__(self, columns, data):
            self.columns, self.data = columns, data

    fake = types.SimpleNamespace(init=lambda **kw: calls.append(("init", kw)),
                                 log=lambda values, step: calls.append(("log", step, values)),
                                 finish=lambda: calls.append(("finish",)), Table=Table)
    monkeypatch.setitem(sys.modules, "trackio", fake)
    store, run = _run(tmp_path, steps=2)
    exp = MetricsExport.open(run, ["trackio"], store)
    exp.publish()
    exp.close()
    assert calls[0][0] == "init" and calls[0][1]["project"] == "evotui" and calls[0][1]["name"] == "synthetic"
    assert [c[1] for c in calls if c[0] == "log"] == [1, 2]
    assert all("reward/mean" in c[2] for c in calls if c[0] == "log")
    assert calls[-1] == ("finish",)


def test_a_missing_or_failing_sink_is_a_warning_not_a_stop(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed
    store, run = _run(tmp_path, steps=2)
    said = []
    exp = MetricsExport.open(run, ["wandb", "tensorboard"], store, warn=said.append)
    assert said == ["report_to wandb: wandb is not installed (pip install 'evotui[wandb]'); skipped"]

    class Broken:
        name = "broken"

        def scalars(self, step, values):
            raise OSError("disk full")

    exp.sinks.append(Broken())
    exp.publish()  # the TensorBoard sink still gets everything
    assert said[-1] == "report_to broken: OSError: disk full; no longer reporting to it"
    assert [s.name for s in exp.sinks] == ["tensorboard"]
    exp.close()
    assert [s for s, _ in read_scalars(run / "tensorboard")["reward/mean"]] == [1, 2]


def test_unknown_report_target_is_a_config_error():
    import pytest

    from backend.config import ConfigError, load_config

    assert load_config(None, ["report_to=tensorboard,wandb"]).report_to == ["tensorboard", "wandb"]
    with pytest.raises(ConfigError, match="report_to: unknown target"):
        load_config(None, ["report_to=tensorbored"])
