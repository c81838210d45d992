"""A step's checkpoint and its commit: one after the other against side by side, in one run.

What the loop does after training: the checkpoint (peft adapter, optimizer state, random states)
and the SQLite commit of a step of --rollouts scored math rollouts, into a real run's store. The
policy is the embedded model with its LoRA adapter (`model.*` defaults, or --device cuda), one
AdamW step taken so the optimizer holds both moments.

- before: `checkpoint.save` with peft's and torch's writers, then `Store.commit_step`;
- beside, peft: `checkpoint.begin_save` with those writers, the commit's inserts while its thread
  writes the files, and the commit once they are in place (`commit_step(..., ready=...)`);
- beside (today, the loop's): the same, with the tensors taken to the host first and written
  by `checkpoint_tensors.py`.

Each path runs --repeats + 1 times, in rotating order (the first apart); prints milliseconds (mean +-
95% interval), and the steps, policy versions and checkpoint folders stored (every path stores
every one).

    .venv/bin/python benchmarks/checkpoint_save.py --repeats 20
    python3 benchmarks/checkpoint_save.py --device cuda --repeats 20      # on a GPU
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def step_rows(n: int) -> tuple[list[dict], list[list[dict]]]:
    """Rollout and diagnosis rows of `n` scored math rollouts (benchmarks/score_overlap.py's batch)."""
    from backend.envs.math import MathEnv
    from backend.harness.loader import load_default
    from backend.rollout import diagnosis_rows, rollout_row, score_all
    from benchmarks.score_overlap import batch

    harness = load_default("math")
    items = batch(max(1, n // 8), 8)[:n]
    score_all(items, harness, MathEnv(["chain_sum"]), 256)
    return ([rollout_row(s, 0, 1, 0, 256) for s in items],
            [diagnosis_rows(s, 0, 1, harness.validity) for s in items])


def policy_and_optimizer(device: str):
    """(config, the embedded policy, its AdamW after one step, the LoRA parameters): the optimizer
    holds both moments, as a checkpoint after a GRPO step does."""
    import torch

    from backend.config import load_config
    from backend.policy.model import load_policy

    cfg = load_config(None, [f"model.device={device}"])
    lm = load_policy(cfg.model)
    params = [p for p in lm.model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    sum((p.float() ** 2).sum() for p in params).backward()
    opt.step()
    return cfg, lm, opt, params


@contextmanager
def peft_files():
    """Checkpoints begun inside are written as before `checkpoint_tensors`: peft's `save_pretrained`
    and the whole optimizer state through `torch.save`, on the writing thread."""
    from backend.policy import checkpoint_tensors

    take = checkpoint_tensors.take
    checkpoint_tensors.take = lambda model, optimizer: None
    try:
        yield
    finally:
        checkpoint_tensors.take = take


def loads_back(folder: Path, model, optimizer) -> bool:
    """Whether the checkpoint in `folder` holds `model`'s adapter and `optimizer`'s state exactly."""
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import load_file

    from backend.policy import checkpoint_tensors

    adapter = load_file(str(folder / checkpoint_tensors.ADAPTER_FILE))
    live = get_peft_model_state_dict(model)
    saved = checkpoint_tensors.load_optimizer(folder, torch.load(folder / "trainer_state.pt", weights_only=False))
    state = optimizer.state_dict()["state"]
    return (adapter.keys() == live.keys() and all(torch.equal(adapter[k], live[k].cpu()) for k in live)
            and all(torch.equal(torch.as_tensor(v).cpu(), torch.as_tensor(saved["state"][i][key]).cpu())
                    for i, per in state.items() for key, v in per.items()))


def main(argv=None) -> None:
    import torch

    from backend.policy import checkpoint as ckpt
    from backend.runs import create_run, harness_code
    from backend.store import now
    from benchmarks.code_step import interval

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--rollouts", type=int, default=512)
    args = ap.parse_args(argv)
    cfg, lm, opt, params = policy_and_optimizer(args.device)
    sync = torch.cuda.synchronize if lm.device.type == "cuda" else (lambda: None)
    run = Path(tempfile.mkdtemp(prefix="evotui-ckpt-run-")) / "run"
    store = create_run(run, cfg, harness_code(cfg))
    rows, diags = step_rows(args.rollouts)
    state = {"memory_plan": None}

    def commit(k: int, ready=None) -> None:
        pv = {"parent": None, "step": k, "checkpoint": str(ckpt.checkpoint_dir(run, k)), "heldout_acc": None,
              "harness_version": 1, "created_at": now()}
        store.commit_step({"step": k, "created_at": now(), "harness_version": 1, "policy_version": 0,
                           "n_rollouts": len(rows)}, [dict(r, step=k) for r in rows],
                          [[dict(d, step=k) for d in ds] for ds in diags], None, pv, ready=ready)

    def before(k: int) -> None:
        with peft_files():
            ckpt.save(run, k, lm.model, opt, state=state)
        commit(k)

    def beside_peft(k: int) -> None:
        with peft_files():
            writing = ckpt.begin_save(run, k, lm.model, opt, state=state)
        commit(k, writing.result)

    def beside(k: int) -> None:
        commit(k, ckpt.begin_save(run, k, lm.model, opt, state=state).result)
        last_beside[0] = k

    last_beside = [0]

    paths = {"before": before, "beside, peft": beside_peft, "beside": beside}
    ms: dict[str, list[float]] = {name: [] for name in paths}
    k = 0
    for i in range(args.repeats + 1):
        for name in list(paths)[i % len(paths):] + list(paths)[:i % len(paths)]:  # rotate the order
            k += 1
            sync()
            t = time.perf_counter()
            paths[name](k)
            ms[name].append((time.perf_counter() - t) * 1000)
    stored = store.count("steps"), store.count("policy_versions"), len(ckpt.saved_steps(run))
    same = loads_back(ckpt.checkpoint_dir(run, last_beside[0]), lm.model, opt)
    device = torch.cuda.get_device_name() if lm.device.type == "cuda" else "cpu"
    print(f"device {lm.device} ({device}), {len(params)} LoRA tensors, {sum(p.numel() for p in params):,} "
          f"parameters; checkpoint + the commit of a step of {len(rows)} rollouts, {args.repeats} a path "
          f"after the first")
    print(f"{'path':<13} {'ms (mean +- 95%)':>26} {'first':>8} {'best':>8}")
    for name, xs in ms.items():
        print(f"{name:<13} {interval(xs[1:]):>26} {xs[0]:>8.1f} {min(xs[1:]):>8.1f}")
    mean = {name: sum(xs[1:]) / args.repeats for name, xs in ms.items()}
    print(f"beside is {mean['before'] / mean['beside']:.2f}x the speed of before and "
          f"{mean['beside, peft'] / mean['beside']:.2f}x that of beside, peft; "
          f"steps, versions, checkpoint folders stored: {stored}")
    print(f"today's last checkpoint holds the live adapter and optimizer state, bit for bit: {same}")
    store.close()
    shutil.rmtree(run.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
