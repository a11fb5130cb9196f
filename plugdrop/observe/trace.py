"""``trace``: the order of forward and backward passes through the selected modules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from .. import _attach
from .._attach import Observer
from .._selection import Selector
from .._table import format_table

__all__ = ["trace", "Trace"]


def _shape(x: Any) -> Any:
    return list(x.shape) if isinstance(x, torch.Tensor) else _attach.describe(x)


class Trace(Observer):
    """The record of a :func:`trace` block: ``events``, a list of dicts with ``index``,
    ``phase`` (``"forward"`` or ``"backward"``), ``module``, ``type`` and ``shapes``."""

    wants_grad = True

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._types: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"trace({len(self.events)} events)"

    def on_forward(self, layer: str, module: nn.Module, x: torch.Tensor) -> None:
        self._types[layer] = type(module).__name__
        self.events.append({"index": len(self.events), "phase": "forward", "module": layer,
                            "type": type(module).__name__, "shapes": [_shape(x)]})

    def on_grad(self, layer: str, grad: torch.Tensor) -> None:
        self.events.append({"index": len(self.events), "phase": "backward", "module": layer,
                            "type": self._types.get(layer, "?"), "shapes": [_shape(grad)]})

    def __len__(self) -> int:
        return len(self.events)

    def __str__(self) -> str:
        if not self.events:
            return "(no events)"
        rows = [(str(e["index"]), e["phase"], e["module"] or "(root)", e["type"],
                 " ".join(str(tuple(s)) if isinstance(s, list) else str(s) for s in e["shapes"]))
                for e in self.events]
        return format_table(("#", "phase", "module", "type", "shape"), rows)

    def write_jsonl(self, path: str | Path) -> Path:
        """Write one JSON object per event; returns the path."""
        path = Path(path)
        with path.open("w") as f:
            for e in self.events:
                f.write(json.dumps(e) + "\n")
        return path


@contextmanager
def trace(model: nn.Module, selector: Selector = "**", *,
          exclude: Selector | None = None) -> Iterator[Trace]:
    """Record, in order, every forward and backward pass through the selected modules.

    A forward event is logged when a module returns (so a parent follows its children); a
    backward event when the gradient of a module's output arrives. ``print(t)`` shows the
    table; ``t.write_jsonl(path)`` writes JSON lines. Nothing stays attached after the block.
    """
    t = Trace()
    handle = _attach.observe(model, selector, t, exclude=exclude)
    try:
        yield t
    finally:
        handle.remove()

