"""A checkpoint's tensors, taken off the device at once and written with little Python.

peft's `save_pretrained` walks the model's modules for its adapter state and renders a model
card, and `torch.save` pickles the optimizer's state one tensor record at a time; on a GPU each
tensor also comes back to the host on its own. The checkpoint thread runs beside the loop's
thread (the step's inserts, or the next step's decode), and that Python work holds the
interpreter's lock the loop needs for each launch. Here:

- `take`: on the caller's thread, before the writer starts, the adapter's tensors (under
  peft's names) and the optimizer state's tensors are joined into one buffer of bytes a file
  and copied to pinned host memory on a side stream; the writer waits for the copy and never
  launches work on the device;
- `write_safetensors`: a safetensors file written as its header and that buffer, in one write;
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
import math
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
class Packed:
    """Tensors of one file as bytes on the host, in order, and what its header says of each. From
    CUDA, one pinned buffer filled by a copy on a side stream (`ready()` waits for it); host
    tensors are not copied: their bytes are written where they are."""

    names: list[str]
    dtypes: list[torch.dtype]
    shapes: list[tuple[int, ...]]
    data: list[torch.Tensor]
    """uint8 host tensors, the tensors' bytes back to back."""
    copied: torch.cuda.Event | None = None

    def ready(self) -> list[torch.Tensor]:
        if self.copied is not None:
            self.copied.synchronize()  # releases the interpreter's lock while it waits
        return self.data


@dataclass
class Taken:
    """A checkpoint's tensors on their way to the host, for a thread to write."""

    adapter: Packed
    config: bytes
    optimizer: dict | None
    """The optimizer's state dict with each tensor of its per-parameter state replaced by its name
    in `optimizer_tensors` (see `restore_optimizer`)."""
    optimizer_tensors: Packed


def take(model, optimizer) -> Taken | None:
    """The adapter's and the optimizer's tensors, packed for the host (`pack`), or None where the
    adapter's layout is not known (`adapter_layout`) or a tensor's dtype has no name here."""
    layout = adapter_layout(model)
    if layout is None:
        return None
    small, opt_tensors = split_optimizer(optimizer.state_dict()) if optimizer is not None else (None, [])
    if any(t.dtype not in _DTYPES for _, t in opt_tensors) or any(p.dtype not in _DTYPES for p in layout.params):
        return None  # a dtype this writer has no safetensors name for: peft and torch.save write it
    return Taken(pack(list(zip(layout.names, (p.detach() for p in layout.params)))), layout.config, small,
                 pack(opt_tensors))


_side_streams: dict = {}


def pack(named: list[tuple[str, torch.Tensor]]) -> Packed:
    """`named`'s bytes for the host. Tensors on one CUDA device are joined there and come back in one
    copy, started on a side stream: the caller goes on while it runs, and must change none of them
    before `ready()` (the loop changes the model and the optimizer only after the checkpoint's files
    are written). Host tensors are written as they are, for the same reason."""
    names = [n for n, _ in named]
    tensors = [t.contiguous() for _, t in named]
    meta = ([t.dtype for t in tensors], [tuple(t.shape) for t in tensors])
    flats = [t.reshape(-1).view(torch.uint8) for t in tensors if t.numel()]
    devices = {t.device for t in tensors}
    device = devices.pop() if len(devices) == 1 else None
    if device is None or device.type != "cuda" or not flats:
        return Packed(names, *meta, [f.cpu() for f in flats])  # host tensors: no copy
    side = _side_streams.setdefault(device, torch.cuda.Stream(device))
    side.wait_stream(torch.cuda.current_stream(device))
    for f in flats:  # a temporary made by `contiguous()` is not handed out again before the side stream read it
        f.record_stream(side)
    with torch.cuda.stream(side):
        joined = torch.cat(flats)
        host = torch.empty(joined.numel(), dtype=torch.uint8, pin_memory=True)
        host.copy_(joined, non_blocking=True)
        copied = torch.cuda.Event()
        copied.record(side)
    return Packed(names, *meta, [host], copied)


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


def write_safetensors(path: Path, packed: Packed, metadata: dict | None = None) -> None:
    """A safetensors file of `packed`: an 8-byte header length, the JSON header padded to 8 bytes,
    then the tensors' bytes as packed (one write from a device's tensors)."""
    header: dict = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, dtype, shape in zip(packed.names, packed.dtypes, packed.shapes):
        size = math.prod(shape) * dtype.itemsize
        header[name] = {"dtype": _DTYPES[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    data = packed.ready()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for part in data:
            f.write(part.numpy().data)


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
