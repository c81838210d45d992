"""A run's metrics in the tools users already look at: TensorBoard, Trackio, W&B.

Off by default; `--report-to tensorboard,trackio,wandb` (config `report_to`)
turns sinks on. After each step the engine calls `publish()`, which reads what
the store gained since the last call (steps, held-out evaluations, harness
version changes), turns it into plain numbers under namespaced names and hands
them to every sink. Nothing but floats and strings reaches a sink, and only in
the engine process. A sink that fails is dropped with one warning: the run
never stops for an exporter. The cursor (last step and evaluation exported)
lives in RUN_DIR/metrics_export.json, so a resumed run neither repeats nor
skips, and a run that turns a sink on at `--resume` exports its history first.

Names (per step; `eval/*` at evaluation steps):

    reward/mean, reward/std, reward/<term>/mean     the harness's reward and its terms
    groups/dead_frac, groups/kept                   GRPO groups whose rewards tie; groups trained on
    evaluator/acc, evaluator/agreement              the evaluator's verdicts on training rollouts
    eval/val/acc, eval/test/acc                     held-out accuracy (validation: the gate's; test: reported)
    train/loss, train/kl, train/entropy, train/clip_frac, train/grad_norm
    completions/mean_tokens, completions/truncated_frac, tokens/per_s
    time/gen_s, time/score_s, time/train_s, time/step_s
    harness/version, policy/version

Annotations (text, tag `harness`): each change of the active harness version,
with the intervention that made it (a promotion) or the version it left (a
rollback). TensorBoard files go to RUN_DIR/tensorboard (`tensorboard --logdir
RUN_DIR/tensorboard`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import time
from pathlib import Path

from backend.store import loads
STEP_COLUMNS = {
    "reward/mean": "reward_mean", "reward/std": "reward_std", "groups/dead_frac": "dead_group_frac",
    "groups/kept": "kept_groups", "evaluator/acc": "verdict_acc", "evaluator/agreement": "agreement",
    "train/loss": "loss", "train/kl": "kl", "train/entropy": "entropy", "train/clip_frac": "clip_frac",
    "train/grad_norm": "grad_norm", "completions/mean_tokens": "mean_completion_tokens",
    "completions/truncated_frac": "truncated_frac", "tokens/per_s": "tokens_per_s",
    "harness/version": "harness_version", "policy/version": "policy_version",
}
"""Metric name -> `steps` column (taken as is)."""
TIME_COLUMNS = {"time/gen_s": "gen_ms", "time/score_s": "score_ms", "time/train_s": "train_ms",
                "time/step_s": "total_ms"}
"""Metric name -> `steps` column in milliseconds (exported in seconds)."""
EVAL_SPLITS = {"validation": "eval/val/acc", "test": "eval/test/acc"}


def reward_term_means(components: list[dict]) -> dict[str, float]:
    """Mean of each reward term over a step's rollouts (non-finite and non-numeric values skipped).

    >>> reward_term_means([{"correct": 1.0, "format": 0.0}, {"correct": 0.0}])
    {'correct': 0.5, 'format': 0.0}
    """
    values: dict[str, list[float]] = {}
    for comp in components:
        for k, v in comp.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                values.setdefault(k, []).append(float(v))
    return {k: statistics.fmean(v) for k, v in values.items()}


def _number(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def step_metrics(row: dict) -> dict[str, float]:
    """The namespaced metrics of one `steps` row (missing or non-finite values left out)."""
    out = {name: _number(row.get(col)) for name, col in STEP_COLUMNS.items()}
    out |= {name: (_number(row.get(col)) or 0.0) / 1000 for name, col in TIME_COLUMNS.items()
            if _number(row.get(col)) is not None}
    terms = (loads(row.get("metrics_json"), {}) or {}).get("reward_terms") or {}
    out |= {f"reward/{k}/mean": _number(v) for k, v in terms.items()}
    return {k: v for k, v in out.items() if v is not None}


def harness_note(store, old: int | None, new: int) -> str:
    """One line on a change of the active harness version (a promotion or a rollback)."""
    row = store.harness_version(new) or {}
    before = store.harness_version(old) if old else None
    if before and before.get("status") == "rolled_back":
        return f"rolled back harness v{old} to v{new}"
    why = row.get("note") or ""
    by = f" (intervention #{row['intervention_id']})" if row.get("intervention_id") else ""
    return f"harness v{new} active, was v{old}{by}: {why}".rstrip(": ")


class MetricsExport:
    """The sinks of one run and the cursor of what they have been given."""

    def __init__(self, run_dir: Path, store, sinks: list, warn=print):
        self.run_dir, self.store, self.sinks, self.warn = Path(run_dir), store, sinks, warn
        self.cursor_file = self.run_dir / "metrics_export.json"
        self.cursor = (loads(self.cursor_file.read_text(), {}) if self.cursor_file.exists() else {}) or {}

    @classmethod
    def open(cls, run_dir: Path, targets: list[str], store, warn=print) -> MetricsExport:
        """Start the sinks named in `targets`; one that cannot start is reported through `warn`
        (the engine passes its own, which records the line in the run's events) and left out."""
        run = store.run()
        sinks = []
        for name in targets:
            try:
                sinks.append(_SINK_OPENERS[name](Path(run_dir), run["name"], loads(run["config_json"], {})))
            except ImportError as e:
                warn(f"report_to {name}: {e.name or name} is not installed (pip install 'evotui[{name}]'); skipped")
            except Exception as e:  # a tracker that needs a login or a server is not a reason to stop training
                warn(f"report_to {name}: could not start ({type(e).__name__}: {e}); skipped")
        return cls(run_dir, store, sinks, warn)

    def publish(self) -> None:
        """Hand every sink what the store gained since the last call, step by step."""
        if not self.sinks:
            return
        last_step, last_eval = int(self.cursor.get("step", -1)), int(self.cursor.get("eval_id", 0))
        by_step: dict[int, dict[str, float]] = {}
        notes: list[tuple[int, str]] = []
        version = self.cursor.get("harness_version")
        for row in self.store.window_steps(last_step + 1, 1 << 62):
            by_step.setdefault(row["step"], {}).update(step_metrics(row))
            if version is not None and row["harness_version"] != version:  # history exported after the fact
                notes.append((row["step"], harness_note(self.store, version, row["harness_version"])))
            version = row["harness_version"]
            last_step = row["step"]
        current = self.store.run()["harness_version"]
        if version is not None and current != version:  # promoted or rolled back after the last step
            notes.append((last_step, harness_note(self.store, version, current)))
            version = current
        for ev in self.store.evals_after(last_eval):
            if ev["split"] in EVAL_SPLITS and _number(ev["accuracy"]) is not None:
                by_step.setdefault(ev["step"], {})[EVAL_SPLITS[ev["split"]]] = float(ev["accuracy"])
            last_eval = ev["id"]
        for step in sorted(by_step):
            self._each("scalars", step, by_step[step])
        for step, text in notes:
            self._each("text", step, "harness", text)
        self._each("flush")
        self.cursor = {"step": last_step, "eval_id": last_eval, "harness_version": version}
        tmp = self.cursor_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.cursor))
        os.replace(tmp, self.cursor_file)

    def close(self) -> None:
        """Publish what is left and close the sinks (never raises)."""
        try:
            self.publish()
        except Exception as e:
            self.warn(f"metrics export: {type(e).__name__}: {e}")
        self._each("close")
        self.sinks = []

    def _each(self, method: str, *args) -> None:
        for sink in list(self.sinks):
            try:
                getattr(sink, method)(*args)
            except Exception as e:
                self.sinks.remove(sink)
                self.warn(f"report_to {sink.name}: {type(e).__name__}: {e}; no longer reporting to it")


class TensorBoardSink:
    """Event files under RUN_DIR/tensorboard (tensorboardX: protobuf only, no TensorFlow)."""

    name = "tensorboard"

    def __init__(self, run_dir: Path, run_name: str, config: dict):
        from tensorboardX import SummaryWriter

        # a unique suffix: a resume within the same second must not reuse (and truncate) a file name
        self.writer = SummaryWriter(logdir=str(run_dir / "tensorboard"), flush_secs=30,
                                    filename_suffix=f".{os.getpid()}.{time.time_ns()}")
        self.writer.add_text("config", "```\n" + json.dumps(config, indent=1) + "\n```", 0)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        for k, v in values.items():
            self.writer.add_scalar(k, v, step)

    def text(self, step: int, tag: str, text: str) -> None:
        self.writer.add_text(tag, text, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class TrackerSink:
    """Trackio or W&B: both take `init(project, name, config)`, `log(dict, step=)`, `finish()`."""

    def __init__(self, module, sink: str, **init):
        self.m, self.name = module, sink
        self.m.init(**init)
        self.notes: list[list] = []

    def scalars(self, step: int, values: dict[str, float]) -> None:
        self.m.log(dict(values), step=step)

    def text(self, step: int, tag: str, text: str) -> None:
        self.notes.append([step, text])  # the whole table each time: trackers keep the last one logged
        self.m.log({f"annotations/{tag}": self.m.Table(columns=["step", "text"], data=list(self.notes))}, step=step)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.m.finish()


def _trackio(run_dir: Path, run_name: str, config: dict) -> TrackerSink:
    import trackio

    return TrackerSink(trackio, "trackio", project="evotui", name=run_name, config=config, resume="allow")


def _wandb(run_dir: Path, run_name: str, config: dict) -> TrackerSink:
    import wandb

    return TrackerSink(wandb, "wandb", project="evotui", name=run_name, config=config, dir=str(run_dir),
                       id="evotui-" + hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:12], resume="allow")


_SINK_OPENERS = {"tensorboard": TensorBoardSink, "trackio": _trackio, "wandb": _wandb}


def _events(logdir: Path):
    """The Event records of the TensorBoard files under `logdir`, file by file in name order.
    Reads the TFRecord framing (length, its CRC, payload, its CRC) and tensorboardX's Event proto."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    for f in sorted(Path(logdir).rglob("events.out.tfevents.*")):
        data, pos = f.read_bytes(), 0
        while pos + 12 <= len(data):
            (n,) = struct.unpack("<Q", data[pos:pos + 8])
            yield Event.FromString(data[pos + 12:pos + 12 + n])
            pos += 12 + n + 4


def read_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the TensorBoard event files under `logdir`: {tag: [(step, value), ...]}."""
    out: dict[str, list[tuple[int, float]]] = {}
    for ev in _events(logdir):
        for v in ev.summary.value:
            if v.HasField("simple_value"):
                out.setdefault(v.tag, []).append((ev.step, v.simple_value))
    return out


def read_texts(logdir: Path) -> dict[str, list[tuple[int, str]]]:
    """Every text summary (annotation) under `logdir`: {tag: [(step, text), ...]}."""
    out: dict[str, list[tuple[int, str]]] = {}
    for ev in _events(logdir):
        for v in ev.summary.value:
            if v.metadata.plugin_data.plugin_name == "text" and v.tensor.string_val:
                tag = v.tag.removesuffix("/text_summary")
                out.setdefault(tag, []).append((ev.step, v.tensor.string_val[0].decode("utf-8", "replace")))
    return out
