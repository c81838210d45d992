"""A step's checkpoint, today's `checkpoint.save` against the path before it, in one run.

The policy is the embedded model with its LoRA adapter (`model.*` defaults, or --device cuda), one
AdamW step taken so the optimizer holds both moments. Each path saves --repeats checkpoints,
alternating, into fresh folders (a run keeps a few, so a save rarely overwrites a file);
prints milliseconds a save (mean +- 95% interval, n = repeats), the first save apart, and
whether the two paths load back the same adapter and optimizer state.

- before: peft's `save_pretrained` (one device-to-host copy a tensor, its model card) and the
  optimizer's state dict pickled as it is (one tensor a parameter and moment).
- today: `checkpoint.save` (`write_adapter`, `host_optimizer_state`: one copy to the host a dtype).

    .venv/bin/python benchmarks/checkpoint_save.py --repeats 10
    python3 benchmarks/checkpoint_save.py --device cuda --repeats 20      # on a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import random
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


def main(argv=None) -> None:
    import torch

    from backend.config import load_config
    from backend.policy import checkpoint as ckpt
    from backend.policy.model import load_policy
    from benchmarks.code_step import interval

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args(argv)
    cfg = load_config(None, [f"model.device={args.device}"])
    lm = load_policy(cfg.model)
    params = [p for p in lm.model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    sum((p.float() ** 2).sum() for p in params).backward()
    opt.step()
    sync = torch.cuda.synchronize if lm.device.type == "cuda" else (lambda: None)
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


if __name__ == "__main__":
    main()
