"""The active harness failing as a whole stops the run with one clear line and its state
saved; `--resume` goes on once it is fixed or rolled back."""

from backend.config import RunConfig
from backend.dispatch import Control
from backend.harness.client import WorkerFailure
from backend.harness.loader import Harness
from backend.loop import Engine
from backend.metrics_export import MetricsExport
from backend.progress import StepProgress
from synthetic_run import build_run


def test_a_failing_active_harness_stops_the_run_with_one_line(tmp_path, monkeypatch):
    store = build_run(tmp_path / "run.db", steps=2)
    engine = Engine.__new__(Engine)  # the run loop only: no model
    engine.store, engine.run_dir, engine.quiet, engine.stop_requested = store, tmp_path, True, False
    engine.cfg, engine.control = RunConfig(), Control(store)
    engine.metrics = MetricsExport.open(tmp_path, [], store)  # no sinks
    engine.progress = StepProgress(2, quiet=True)
    engine.harness_version = store.run()["harness_version"]
    engine.harness = Harness.from_code(store.get("harness_versions", engine.harness_version)["code"])
    rows_before = store.count("rollouts")
    monkeypatch.setattr(Engine, "_evaluate_and_judge", lambda self, step: None)

    def hang(self, step, progress):
        raise WorkerFailure("harness worker did not answer in time")
    monkeypatch.setattr(Engine, "train_step", hang)
    out = engine.run()
    run = store.run()
    assert out["status"] == "stopped" and run["status"] == "stopped"
    assert run["error"].startswith(f"active harness v{engine.harness_version} failed: harness worker did not")
    assert "--resume" in run["error"] and "\n" not in run["error"]
    assert store.count("rollouts") == rows_before  # nothing stored is lost
