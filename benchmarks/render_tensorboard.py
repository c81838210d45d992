"""Render a run's TensorBoard scalars to a PNG, headless: the README's TensorBoard screenshot.

TensorBoard's own web UI needs a browser to screenshot, which this machine has not; this
script reads the event files the run wrote (`--report-to tensorboard`) with
`backend.metrics_export.read_scalars`, the same bytes TensorBoard reads, and plots the
scalars with matplotlib in a grid of TensorBoard-like panels, one per tag, with the harness
annotations (text summaries) listed underneath.

    python benchmarks/render_tensorboard.py RUN_DIR screenshots/tensorboard.png
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

PANELS = ("reward/mean", "groups/dead_frac", "eval/val/acc", "eval/test/acc", "evaluator/agreement",
          "completions/mean_tokens", "train/loss", "train/entropy", "harness/version", "time/step_s")
"""Tags shown, in this order (those the run has); the reward terms follow."""


def render(run_dir: Path, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from backend.metrics_export import read_scalars, read_texts

    logdir = Path(run_dir) / "tensorboard"
    scalars, texts = read_scalars(logdir), read_texts(logdir)
    tags = [t for t in PANELS if t in scalars] + sorted(t for t in scalars if t.startswith("reward/") and
                                                         t.endswith("/mean") and t != "reward/mean")
    cols = 4
    rows = -(-len(tags) // cols)
    # older event files carry a "step N: " prefix in the text itself; TensorBoard shows the step anyway
    notes = [f"step {s}: {t.split(': ', 1)[1] if t.startswith('step ') else t}" for s, t in texts.get("harness", [])]
    fig = plt.figure(figsize=(4 * cols, 2.6 * rows + 0.35 * (len(notes) + 2)), facecolor="white")
    grid = fig.add_gridspec(rows + 1, cols, height_ratios=[2.6] * rows + [0.35 * (len(notes) + 2)])
    for i, tag in enumerate(tags):
        ax = fig.add_subplot(grid[i // cols, i % cols])
        steps, values = zip(*sorted(scalars[tag]))
        ax.plot(steps, values, color="#ff7043", linewidth=1.6, marker="o" if len(steps) < 12 else None,
                markersize=3)
        ax.set_title(tag, fontsize=10, loc="left")
        ax.grid(True, color="#e0e0e0", linewidth=0.6)
        ax.tick_params(labelsize=8)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    text_ax = fig.add_subplot(grid[rows, :])
    text_ax.axis("off")
    body = "\n".join(textwrap.shorten(n, 150) for n in notes) or "(no harness changes)"
    text_ax.text(0, 1, "TEXT  harness\n" + body, va="top", family="monospace", fontsize=8)
    fig.suptitle(f"TensorBoard scalars of {Path(run_dir).name} (event files rendered with matplotlib)",
                 fontsize=11, x=0.01, ha="left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    render(Path(sys.argv[1]), Path(sys.argv[2]))
