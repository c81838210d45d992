"""Tiny in-process engine runs for the dead-group tests: the tiny random Llama of
tests/tiny_llama.py, a harness file, a few steps, and a fingerprint of what the steps
stored (rollout token ids, rewards, advantages, losses) to compare runs by."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from backend.config import load_config
from backend.loop import Engine
from backend.progress import StepProgress
from backend.runs import create_run, harness_code

TINY_RUN = ["train.tasks_per_step=2", "train.group_size=2", "train.max_new_tokens_cap=6", "eval.n_val=1",
            "eval.n_test=1", "eval.max_new_tokens=4", "evolve.enabled=false", "model.threads=1",
            "train.keep_checkpoints=0", "steps=4"]


def engine(run: Path, model: str, harness: str, extra: list[str] = ()) -> Engine:
    """A tiny engine run at `run` (created, or resumed when it exists)."""
    cfg = load_config(None, [f"model.name='{model}'", f"harness='{harness}'", *TINY_RUN, *extra])
    if (run / "run.db").exists():
        from backend.store import Store

        return Engine(run, cfg, Store.open(run, create=False), quiet=True)
    return Engine(run, cfg, create_run(run, cfg, harness_code(cfg)), quiet=True)


def train(eng: Engine, steps) -> list[dict]:
    """Train `steps` in order; returns the step rows the engine returned."""
    return [eng.train_step(s, StepProgress(max(steps), quiet=True).start(s)) for s in steps]


def fingerprint(eng: Engine) -> dict:
    """What the run's stored steps hold that a change of the engine could move: every rollout's
    task, token ids, reward and advantage, and every step's loss, KL and counts."""
    rows = eng.store.rows("SELECT step, group_idx, idx, task_id, token_ids_json, reward, advantage, kept "
                          "FROM rollouts ORDER BY step, group_idx, idx")
    steps = eng.store.rows("SELECT step, n_rollouts, n_groups, dead_group_frac, loss, kl, tokens FROM steps "
                           "ORDER BY step")
    rollouts = [[r["step"], r["group_idx"], r["idx"], r["task_id"], json.loads(r["token_ids_json"]),
                 round(float(r["reward"]), 6), round(float(r["advantage"]), 6), r["kept"]] for r in rows]
    steps_out = [[s["step"], s["n_rollouts"], s["n_groups"], s["dead_group_frac"],
                  None if s["loss"] is None else round(float(s["loss"]), 5),
                  None if s["kl"] is None else round(float(s["kl"]), 6), s["tokens"]] for s in steps]
    return {"rollouts": rollouts, "steps": steps_out,
            "sha": hashlib.sha256(json.dumps([rollouts, steps_out]).encode()).hexdigest()[:16]}


if __name__ == "__main__":  # python tests/dead_group_runs.py OUT.json: the fingerprint of a 2-step run
    import sys
    import tempfile

    sys.path.insert(0, str(Path(__file__).parent))
    from tiny_llama import save_tiny_llama, write_spread_harness

    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        model = save_tiny_llama(t / "model")
        harness = write_spread_harness(t / "spread.py")
        eng = engine(t / "run", model, harness)
        train(eng, [1, 2])
        Path(sys.argv[1]).write_text(json.dumps(fingerprint(eng)))
        print(fingerprint(eng)["sha"])
