"""A step's checkpoint, today's `checkpoint.save` against the path before it, in one run.

The policy is the embedded model with its LoRA adapter (`model.*` defaults, or --device cuda), one
AdamW step taken so the optimizer holds both moments. Each path saves --repeats checkpoints,
alternating, into fresh folders (a run keeps a few, so a save rarely overwrites a file);
prints milliseconds a save (mean +- 95% interval, n = repeats), the first save apart, and
whether the two paths load back the same adapter and optimizer state.

- before: peft's `save_pretrained` (one device-to-host copy a tensor, its model card) and the
  optimizer's state dict pickled as it is (one tensor a parameter and moment).
- today: `checkpoint.save` (`write_adapter`, `host_optimizer_state`: one copy to the host a dtype).

With `--with-commit` a second table times what the loop does after training: the checkpoint and
the SQLite commit of a step of --rollouts scored math rollouts, into a real run's store.

- one after the other (before): `checkpoint.save`, then `Store.commit_step`;
- beside (today): `checkpoint.begin_save`, the commit's inserts while the thread writes the files,
  and the commit once they are in place (`commit_step(..., ready=...)`).

    .venv/bin/python benchmarks/checkpoint_save.py --repeats 10
    python3 benchmarks/checkpoint_save.py --device cuda --repeats 20      # on a GPU
    .venv/bin/python benchmarks/checkpoint_save.py --repeats 10 --with-commit
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def save_before(run_dir: Path, step: int, model, optimizer, state: dict) -> Path:
    """`checkpoint.save` as it was before `write_adapter` and `packed_optimizer_state`."""
    import torch

    from backend.policy import checkpoint as ckpt

    final = ckpt.checkpoint_dir(run_dir, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    model.save_pretrained(str(tmp))
    torch.save({"optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(), "py_rng": random.getstate(),
                **state}, tmp / "trainer_state.pt")
    (tmp / "meta.json").write_text(json.dumps({"step": step}))
    ckpt._fsync_dir(tmp)
    os.replace(tmp, final)
    ckpt._fsync_dir(final.parent)
    return final


def same_state(a: Path, b: Path, model, optimizer) -> bool:
    """Both checkpoints load back the same adapter tensors and optimizer state."""
    import torch
    from safetensors.torch import load_file

    wa, wb = load_file(str(a / "adapter_model.safetensors")), load_file(str(b / "adapter_model.safetensors"))
    if wa.keys() != wb.keys() or any(not torch.equal(wa[k], wb[k]) for k in wa):
        return False
    sa = torch.load(a / "trainer_state.pt", weights_only=False)["optimizer"]
    sb = torch.load(b / "trainer_state.pt", weights_only=False)["optimizer"]
    for slot, per in sa["state"].items():
        for key, v in per.items():
            w = sb["state"][slot][key]
            if not (torch.equal(v.cpu(), w.cpu()) if torch.is_tensor(v) else v == w):
                return False
    ac = json.loads((a / "adapter_config.json").read_text())
    bc = json.loads((b / "adapter_config.json").read_text())
    return ac == bc


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


def commit_table(lm, opt, repeats: int, n: int, interval) -> None:
    """The checkpoint and the step's commit: one after the other against side by side."""
    from backend.config import load_config
    from backend.policy import checkpoint as ckpt
    from backend.runs import create_run, harness_code
    from backend.store import now

    cfg = load_config(None, [])
    run = Path(tempfile.mkdtemp(prefix="evotui-ckpt-run-")) / "run"
    store = create_run(run, cfg, harness_code(cfg))
    rows, diags = step_rows(n)
    sync = torch_sync(lm)
    state = {"memory_plan": None}
    step = [0]

    def commit(ready=None):
        step[0] += 1
        k = step[0]
        pv = {"parent": None, "step": k, "checkpoint": str(ckpt.checkpoint_dir(run, k)), "heldout_acc": None,
              "harness_version": 1, "created_at": now()}
        return k, pv, lambda r=ready: store.commit_step(
            {"step": k, "created_at": now(), "harness_version": 1, "policy_version": 0, "n_rollouts": len(rows)},
            [dict(r, step=k) for r in rows], [[dict(d, step=k) for d in ds] for ds in diags], None, pv, ready=r)

    def before():
        k, _, go = commit()
        ckpt.save(run, k, lm.model, opt, state=state)
        go()

    def beside():
        k = step[0] + 1
        writing = ckpt.begin_save(run, k, lm.model, opt, state=state)
        _, _, go = commit(writing.result)
        go()

    ms: dict[str, list[float]] = {"before": [], "beside": []}
    for i in range(repeats + 1):
        for name, fn in ((("before", before), ("beside", beside)) if i % 2 == 0 else
                         (("beside", beside), ("before", before))):
            sync()
            t = time.perf_counter()
            fn()
            ms[name].append((time.perf_counter() - t) * 1000)
    stored = store.count("steps"), store.count("policy_versions"), len(ckpt.saved_steps(run))
    print(f"\ncheckpoint + the commit of a step of {len(rows)} rollouts, {repeats} a path after the first")
    print(f"{'path':<8} {'ms (mean +- 95%)':>26} {'first':>8} {'best':>8}")
    for name, xs in ms.items():
        print(f"{name:<8} {interval(xs[1:]):>26} {xs[0]:>8.1f} {min(xs[1:]):>8.1f}")
    b, t = (sum(ms[k][1:]) / repeats for k in ("before", "beside"))
    print(f"beside is {b / t:.2f}x the speed of before; steps, versions, checkpoint folders stored: {stored}")
    store.close()
    shutil.rmtree(run.parent, ignore_errors=True)


def torch_sync(lm):
    import torch

    return torch.cuda.synchronize if lm.device.type == "cuda" else (lambda: None)


def main(argv=None) -> None:
    import torch

    from backend.config import load_config
    from backend.policy import checkpoint as ckpt
    from backend.policy.model import load_policy
    from benchmarks.code_step import interval

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--with-commit", action="store_true", help="also time the checkpoint with a step's commit")
    ap.add_argument("--rollouts", type=int, default=512)
    args = ap.parse_args(argv)
    cfg = load_config(None, [f"model.device={args.device}"])
    lm = load_policy(cfg.model)
    params = [p for p in lm.model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    sum((p.float() ** 2).sum() for p in params).backward()
    opt.step()
    sync = torch_sync(lm)
    root = Path(tempfile.mkdtemp(prefix="evotui-ckpt-"))
    state = {"memory_plan": None}
    paths = {"before": lambda d, i: save_before(d, i, lm.model, opt, state),
             "today": lambda d, i: ckpt.save(d, i, lm.model, opt, state=state)}
    ms: dict[str, list[float]] = {name: [] for name in paths}
    last = {}
    for i in range(args.repeats + 1):
        for name, save in (list(paths.items()) if i % 2 == 0 else list(paths.items())[::-1]):
            sync()
            t = time.perf_counter()
            last[name] = save(root / name, i)
            ms[name].append((time.perf_counter() - t) * 1000)
    n_params = sum(p.numel() for p in params)
    print(f"device {lm.device} ({torch.cuda.get_device_name() if lm.device.type == 'cuda' else 'cpu'}), "
          f"{len(params)} LoRA tensors, {n_params:,} parameters; {args.repeats} saves a path after the first")
    print(f"{'path':<8} {'ms a save (mean +- 95%)':>26} {'first':>8} {'best':>8}")
    for name, xs in ms.items():
        print(f"{name:<8} {interval(xs[1:]):>26} {xs[0]:>8.1f} {min(xs[1:]):>8.1f}")
    before, today = (sum(ms[k][1:]) / args.repeats for k in ("before", "today"))
    print(f"today is {before / today:.2f}x the speed of before; same adapter and optimizer state loaded back: "
          f"{same_state(last['before'], last['today'], lm.model, opt)}")
    shutil.rmtree(root, ignore_errors=True)
    if args.with_commit:
        commit_table(lm, opt, args.repeats, args.rollouts, interval)


if __name__ == "__main__":
    main()
