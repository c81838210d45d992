"""A check between the decoder layers of a model, so one long forward (or backward) can be cut short.

On the CPU one forward of the default model takes seconds: the prefill of a
generation batch, a training micro-batch, and that micro-batch's backward
(about twice its forward). A stop or a pause that waited for them waited for
tens of seconds on a loaded machine. Once `watch(model, check)` is called
(the engine does it with `Control.honour` when it loads the policy),
`check()` runs before every decoder layer, in every forward (each generated
token included) and again as the gradient passes each layer's output on its
way back. `check` does nothing, blocks (a pause waits in place, so no sample
changes) or raises (the dispatcher's `StopRequested`): a raise leaves through
generate or `loss.backward()` like any exception, and the step in flight is
dropped (nothing of it was committed; the optimizer steps only after every
micro-batch's backward).

    remove = watch(model, control.honour)        # or, for a block: with between_layers(model, check): ...

`check` is called once per layer per pass, so it must be cheap (`Control.interrupting`
reads the command table at most twice a second).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch


class GenerationInterrupted(Exception):
    """An engine's `interrupt()` said yes during a batch; its partial completions are dropped."""


def decoder_layers(model) -> list[torch.nn.Module]:
    """The repeated blocks of a (peft-wrapped or plain) causal LM; [] when they cannot be found."""
    m = model.get_base_model() if hasattr(model, "get_base_model") else model
    body = getattr(m, "model", None) or getattr(m, "transformer", None)
    for name in ("layers", "h", "blocks"):
        layers = getattr(body, name, None)
        if isinstance(layers, torch.nn.ModuleList):
            return list(layers)
    return []


def _hidden(output):
    """The hidden states a decoder layer returned (a tensor, or the first item of a tuple)."""
    return output[0] if isinstance(output, (tuple, list)) else output


def watch(model, check: Callable[[], object], backward: bool = True) -> Callable[[], None]:
    """Call `check()` before each decoder layer's forward and, with `backward`, as the gradient
    reaches each layer's output. Returns the function that removes the hooks again."""

    def before_forward(module, args):
        check()  # returns None: the layer's inputs stay as they are

    def on_grad(grad):
        check()
        return grad

    def after_forward(module, args, output):
        h = _hidden(output)
        if isinstance(h, torch.Tensor) and h.requires_grad:
            h.register_hook(on_grad)

    handles = []
    for layer in decoder_layers(model):
        handles.append(layer.register_forward_pre_hook(before_forward))
        if backward:
            handles.append(layer.register_forward_hook(after_forward))

    def remove() -> None:
        for h in handles:
            h.remove()

    return remove


@contextmanager
def between_layers(model, check: Callable[[], object], backward: bool = True) -> Iterator[None]:
    """`watch` for the duration of a `with` block; the hooks are removed whatever `check` raised."""
    remove = watch(model, check, backward)
    try:
        yield
    finally:
        remove()
