"""A checkpoint's tensors, taken off the device at once and written with little Python.

peft's `save_pretrained` walks the model's modules for its adapter state and renders a model
card, and `torch.save` pickles the optimizer's state one tensor record at a time; on a GPU each
tensor also comes back to the host on its own. The checkpoint thread runs beside the loop's
thread (the step's inserts, or the next step's decode), and that Python work holds the
interpreter's lock the loop needs for each launch. Here:

- `take`: the adapter's tensors (under peft's names) and the optimizer state's tensors are
  copied to the host in one transfer per dtype, on the caller's thread, before the writer starts;
  the writer then never touches the device;
- `write_safetensors`: a safetensors file written as its header and the tensors' bytes in order;
  `safetensors.torch.load_file` and peft read it as they read their own;
- the adapter's names and `adapter_config.json` come from one `save_pretrained` per model and
  process (`AdapterLayout`), so later checkpoints write the same files without it.

The files are those a checkpoint always held (`adapter_model.safetensors`, `adapter_config.json`,
`trainer_state.pt`), plus `optimizer_tensors.safetensors`: the optimizer state's tensors, which
`trainer_state.pt` names in their place (`restore_optimizer`). Checkpoints written before it
hold the whole optimizer state in `trainer_state.pt` and load as they did.
"""

from __future__ import annotations

import json
import struct
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch

ADAPTER_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
OPTIMIZER_FILE = "optimizer_tensors.safetensors"
_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
           torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}


@dataclass(frozen=True)
class AdapterLayout:
    """What peft's `save_pretrained` writes for one model, learned once: its tensors' names (each
    a parameter of the model) and the bytes of its `adapter_config.json`."""

    names: tuple[str, ...]
    params: tuple[torch.nn.Parameter, ...]
    config: bytes


_layouts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def adapter_layout(model) -> AdapterLayout | None:
    """The model's layout (one `save_pretrained` into a scratch folder the first time), or None
    where the model is no peft model, a saved tensor is not one of its parameters, or the scratch
    folder could not be written (then the caller saves with peft, and meets its error there)."""
    from peft import PeftModel, get_peft_model_state_dict
    from safetensors import safe_open

    if not isinstance(model, PeftModel):
        return None
    if model in _layouts:
        return _layouts[model]
    try:
        with tempfile.TemporaryDirectory(prefix="evotui-adapter-") as d:
            model.save_pretrained(d)
            with safe_open(str(Path(d) / ADAPTER_FILE), "pt") as f:
                names = list(f.keys())
            config = (Path(d) / CONFIG_FILE).read_bytes()
    except OSError:
        return None

    state = get_peft_model_state_dict(model)
    by_ptr = {p.data_ptr(): p for p in model.parameters()}
    params = [by_ptr.get(state[n].data_ptr()) if n in state else None for n in names]
    layout = None if any(p is None for p in params) else AdapterLayout(tuple(names), tuple(params), config)
    _layouts[model] = layout
    return layout


@dataclass
class Taken:
    """A checkpoint's tensors on the host, ready for a thread to write."""

    adapter: list[tuple[str, torch.Tensor]]
    config: bytes
    optimizer: dict | None
    """The optimizer's state dict with each tensor of its per-parameter state replaced by its name
    in `optimizer_tensors` (see `restore_optimizer`)."""
    optimizer_tensors: list[tuple[str, torch.Tensor]]


def take(model, optimizer) -> Taken | None:
    """The adapter's and the optimizer's tensors, copied to the host (one copy per dtype), or None
    where the adapter's layout is not known (`adapter_layout`)."""
    layout = adapter_layout(model)
    if layout is None:
        return None
    adapter = [(n, p.detach()) for n, p in zip(layout.names, layout.params)]
    small, opt_tensors = split_optimizer(optimizer.state_dict()) if optimizer is not None else (None, [])
    host = to_host([t for _, t in adapter] + [t for _, t in opt_tensors])
    k = len(adapter)
    return Taken([(n, t) for (n, _), t in zip(adapter, host[:k])], layout.config, small,
                 [(n, t) for (n, _), t in zip(opt_tensors, host[k:])])


def split_optimizer(state: dict) -> tuple[dict, list[tuple[str, torch.Tensor]]]:
    """(the state dict with each per-parameter tensor of more than one element replaced by its
    name, those tensors by name). Scalars (AdamW's step) stay in the dict."""
    tensors: list[tuple[str, torch.Tensor]] = []
    per_param = {}
    for pid, entry in state["state"].items():
        kept = {}
        for key, v in entry.items():
            if torch.is_tensor(v) and v.dim() > 0:
                name = f"{pid}.{key}"
                tensors.append((name, v.detach()))
                kept[key] = {"tensor": name}
            else:
                kept[key] = v
        per_param[pid] = kept
    return {**state, "state": per_param}, tensors


def restore_optimizer(small: dict, tensors: dict[str, torch.Tensor]) -> dict:
    """`split_optimizer` undone: the state dict with its tensors back in place."""
    def back(v):
        return tensors[v["tensor"]] if isinstance(v, dict) and set(v) == {"tensor"} else v
    return {**small, "state": {pid: {k: back(v) for k, v in entry.items()} for pid, entry in small["state"].items()}}


def to_host(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Host copies of `tensors` (host tensors are returned as they are: nothing changes them before
    the checkpoint is written). Device tensors travel flattened, one transfer per dtype."""
    out: list[torch.Tensor | None] = [t if t.device.type == "cpu" else None for t in tensors]
    groups: dict[tuple, list[int]] = {}
    for i, t in enumerate(tensors):
        if out[i] is None:
            groups.setdefault((t.device, t.dtype), []).append(i)
    for idx in groups.values():
        flat = torch.cat([tensors[i].reshape(-1) for i in idx]).cpu()
        for i, part in zip(idx, flat.split([tensors[i].numel() for i in idx])):
            out[i] = part.view(tensors[i].shape)
    return out  # type: ignore[return-value]


def write_safetensors(path: Path, named: list[tuple[str, torch.Tensor]], metadata: dict | None = None) -> None:
    """A safetensors file of `named` (host tensors), in their order: an 8-byte header length, the
    JSON header padded to 8 bytes, then each tensor's bytes."""
    header: dict = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, t in named:
        size = t.numel() * t.element_size()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, t in named:
            if t.numel():
                f.write(t.contiguous().reshape(-1).view(torch.uint8).numpy().data)


def write(folder: Path, taken: Taken, trainer_state: dict) -> None:
    """The checkpoint's tensor files and `trainer_state.pt` into `folder`."""
    write_safetensors(folder / ADAPTER_FILE, taken.adapter, {"format": "pt"})
    (folder / CONFIG_FILE).write_bytes(taken.config)
    write_safetensors(folder / OPTIMIZER_FILE, taken.optimizer_tensors)
    torch.save({"optimizer": taken.optimizer, "optimizer_tensors": OPTIMIZER_FILE, **trainer_state},
               folder / "trainer_state.pt")


def load_optimizer(folder: Path, state: dict) -> dict | None:
    """The optimizer state dict a checkpoint's `trainer_state.pt` (loaded as `state`) holds, its
    tensors read back from `optimizer_tensors.safetensors` where it names them."""
    if state.get("optimizer") is None or "optimizer_tensors" not in state:
        return state.get("optimizer")
    from safetensors.torch import load_file

    return restore_optimizer(state["optimizer"], load_file(str(Path(folder) / state["optimizer_tensors"])))
