"""`evotui export RUN_DIR --policy`: the run's trained policy as a plain Hugging Face model.

A run trains a LoRA adapter over its base model; its checkpoints are peft folders that name the
engine's own cache of the base. The export is a folder that loads anywhere with transformers
alone, no peft and no evotui:

    AutoModelForCausalLM.from_pretrained("RUN_DIR/export/policy-step-12")

- which policy: the one the run trains now (`Store.current_policy_version`; after a rollback,
  the one restored), or the one a step saved (`--step N`, while its checkpoint is kept);
- the adapter merged into the base weights in float32 on the CPU (no GPU needed, and none a
  running job holds is touched), saved in float32 or, with `--dtype bfloat16`, at half the size;
  with the tokenizer and its chat template;
- `harness.py`: the harness active when the policy was saved (its prompt is the one the policy
  was trained on); `evotui.json`: where the policy came from (run, step, version, base model,
  LoRA shape) and its held-out accuracy as the run measured it, per split (k of n, 95%
  interval), or none where it was never evaluated.

The folder is written under a temporary name and renamed when complete; an existing one is never
replaced.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any

from backend.errors import UsageError
from backend.store import Row, Store, loads

META = "evotui.json"
DTYPES = ("float32", "bfloat16")


def export_policy(run_dir: Path, out: Path | None = None, step: int | None = None,
                  dtype: str = "float32") -> tuple[Path, dict[str, Any]]:
    """Write the policy (see the module docstring); returns its folder and what `evotui.json` says."""
    from backend.config import stored_config

    if dtype not in DTYPES:
        raise UsageError(f"--dtype expects one of {', '.join(DTYPES)}, got '{dtype}'")

    store = Store.open(run_dir, readonly=True)
    try:
        version = _version(store, step)
        ckpt = store.checkpoint_of(version)
        if ckpt is None or not (ckpt / "adapter_model.safetensors").is_file():
            raise UsageError(f"the checkpoint of step {version['step']} is not in {run_dir / 'checkpoints'} "
                             "(pruned, or the run directory is incomplete)")
        cfg = stored_config(loads(store.run()["config_json"], {}))
        harness = store.harness_version(version["harness_version"]) if version["harness_version"] else None
        meta = _meta(run_dir, version, cfg, store.evals_of_policy(version["id"]), dtype)
    finally:
        store.close()
    out = Path(out) if out is not None else Path(run_dir) / "export" / f"policy-step-{version['step']}"
    if out.exists():
        raise UsageError(f"{out} exists; remove it or name another folder with --out")
    _write(out, cfg, ckpt, (harness or {}).get("code"), meta)
    return out, meta


def _version(store: Store, step: int | None) -> Row:
    if step is None:
        version = store.current_policy_version()
        if version is None:
            raise UsageError("the run has no trained policy yet: no step has saved a checkpoint "
                             "(its policy is the base model)")
        return version
    version = store.policy_version_of_step(step)
    if version is None:
        saved = store.policy_version_steps()
        raise UsageError(f"step {step} saved no policy (steps that did: {_spans(saved) or 'none'})")
    return version


def _spans(steps: list[int]) -> str:
    """1, 2, 3, 5 -> '1-3, 5'."""
    out: list[str] = []
    for s in steps:
        if out and int(out[-1].split("-")[-1]) == s - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ", ".join(out)


def _meta(run_dir: Path, version: Row, cfg, evals: list[Row], dtype: str) -> dict[str, Any]:
    from backend.end_summary import eval_interval

    heldout = {}
    for ev in evals:  # the newest of each split
        k, n, lo, hi = eval_interval(ev)
        heldout[ev["split"]] = {"step": ev["step"], "accuracy": ev["accuracy"], "correct": k, "n": n,
                                "ci95": [round(lo, 4), round(hi, 4)]}
    return {
        "run": str(Path(run_dir).resolve()), "step": version["step"], "policy_version": version["id"],
        "harness_version": version["harness_version"], "domain": cfg.domain, "seed": cfg.seed,
        "base_model": cfg.model.name, "lora": {"r": cfg.model.lora_r, "alpha": cfg.model.lora_alpha,
                                               "target_modules": list(cfg.model.target_modules)},
        "dtype": dtype, "heldout": heldout,
    }


def _write(out: Path, cfg, ckpt: Path, harness_code: str | None, meta: dict[str, Any]) -> None:
    import torch

    from backend.policy.model import load_policy

    lm = load_policy(dataclasses.replace(cfg.model, device="cpu", dtype="fp32", threads=0), adapter_dir=ckpt)
    merged = lm.model.merge_and_unload().to(getattr(torch, meta["dtype"]))
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        merged.save_pretrained(str(tmp), safe_serialization=True)
        lm.tokenizer.save_pretrained(str(tmp))
        if harness_code:
            (tmp / "harness.py").write_text(harness_code)
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n")
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
