"""benchmarks/step_split.py: the per-arm split of a step, read from real run stores."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import step_split  # noqa: E402
from synthetic_run import build_run  # noqa: E402


def _timed(store, ms: dict[str, float]) -> None:
    for step in (1, 2, 3):
        store.conn.execute("UPDATE steps SET gen_ms = ?, score_ms = ?, diagnose_ms = ?, train_ms = ?, store_ms = ?, "
                           "total_ms = ? WHERE step = ?", (*(ms[c] * step for c in step_split.PARTS),
                                                           ms["total_ms"] * step, step))
    store.conn.commit()


def test_arm_medians_and_the_untimed_rest(tmp_path, capsys):
    parts = {"gen_ms": 1000.0, "score_ms": 100.0, "diagnose_ms": 0.0, "train_ms": 2000.0, "store_ms": 50.0,
             "total_ms": 4000.0}
    for seed in (0, 1):
        s = build_run(tmp_path / "grid" / f"static-expert-s{seed}" / "run.db", steps=3, seed=seed)
        _timed(s, parts)
        s.close()
    out = tmp_path / "steps.json"
    assert step_split.main([str(tmp_path / "grid"), "--json", str(out)]) == 0
    (row,) = step_split.arm_table([step_split.run_steps(p) for p in sorted((tmp_path / "grid").iterdir())])
    assert row["arm"] == "static-expert" and row["steps"] == 6
    assert row["total_ms"] == 8.0 and row["train_ms"] == 4.0  # medians of 1x, 2x, 3x: 2x, in seconds
    assert abs(row["other"] - (8.0 - 2.0 - 0.2 - 0.0 - 4.0 - 0.1)) < 1e-9
    assert "| static-expert | 6 | 8.00 |" in capsys.readouterr().out
    assert [r["run"] for r in json.loads(out.read_text())] == ["static-expert-s0", "static-expert-s1"]


def test_no_runs_is_one_message_and_exit_2(tmp_path, capsys):
    assert step_split.main([str(tmp_path)]) == 2
    assert "no run directory" in capsys.readouterr().err
