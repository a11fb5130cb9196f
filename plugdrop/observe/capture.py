"""``capture``: keep the tensors that selected modules see or return (or their gradients)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn as nn

from .. import _attach
from .._attach import Observer
from .._selection import Selector

__all__ = ["capture"]


class _Capture(Observer):
    def __init__(self, what: str, all_calls: bool, to_cpu: bool):
        self.what = what
        self.all_calls = all_calls
        self.to_cpu = to_cpu
        self.wants_grad = what == "grad"
        self.strict = True
        self.store: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"capture(what={self.what!r})"

    def _keep(self, layer: str, t: torch.Tensor) -> None:
        t = t.detach()
        if self.to_cpu:
            t = t.to("cpu", non_blocking=False)
        if self.all_calls:
            self.store.setdefault(layer, []).append(t)
        else:
            self.store[layer] = t

    def on_forward(self, layer: str, module: nn.Module, x: torch.Tensor) -> None:
        if self.what != "grad":
            self._keep(layer, x)

    def on_grad(self, layer: str, grad: torch.Tensor) -> None:
        self._keep(layer, grad)


@contextmanager
def capture(model: nn.Module, selector: Selector, *, what: str = "output",
            all_calls: bool = False, to_cpu: bool = False, exclude: Selector | None = None,
            element: int | str | None = None) -> Iterator[dict[str, Any]]:
    """Capture intermediate tensors without editing ``forward``.

    Args:
        model, selector, exclude: which modules (see :func:`plugdrop.select`).
        what: ``"output"`` (default), ``"input"`` (first positional input) or ``"grad"`` (the
            gradient flowing back into the module's output, filled in by ``backward()``).
        all_calls: keep every call's tensor in a list (modules called several times per
            forward, or several forwards); default: the latest call only.
        to_cpu: move captured tensors to the CPU (a host synchronization on CUDA).
        element: which element of a tuple/dict output (default: the first tensor).

    Yields:
        A dict ``layer name -> tensor`` (or list of tensors), filled as the model runs. Tensors
        are detached. Nothing stays attached after the block.

    Example::

        >>> with plugdrop.capture(model, "layer*") as feats:
        ...     model(x)
        >>> feats["layer3"].shape
    """
    if what not in ("output", "input", "grad"):
        raise ValueError(f"what must be 'output', 'input' or 'grad', got {what!r}")
    cap = _Capture(what, all_calls, to_cpu)
    handle = _attach.observe(model, selector, cap, exclude=exclude,
                             where="input" if what == "input" else "output", element=element)
    try:
        yield cap.store
    finally:
        handle.remove()

