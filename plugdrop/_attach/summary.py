"""What hangs on a model, as a table: :func:`summary`."""

from __future__ import annotations

from typing import NamedTuple

import torch.nn as nn

from .._table import format_table
from ..transforms import Transform
from . import _registry
from ._hooks import BeginHook

__all__ = ["Summary", "SummaryRow", "summary"]


class SummaryRow(NamedTuple):
    """One (layer, transform or observer) of :func:`summary`."""

    layer: str
    transform: str
    where: str
    values: dict[str, float]
    step: int
    kind: str = "transform"  #: "transform" or "observer"
    calls: int = 0  #: times the transform ran at this layer (training forwards / backwards)


class Summary(list):
    """The attachments of a model: a list of :class:`SummaryRow` that prints as a table."""

    def __str__(self) -> str:
        if not self:
            return "(no plugdrop attachments)"
        header = ("layer", "transform", "where", "step", "calls", "current values")
        rows = [(r.layer or "(root)", r.transform, r.where,
                 str(r.step) if r.kind == "transform" else "-",
                 str(r.calls) if r.kind == "transform" else "-",
                 ", ".join(f"{k}={v:.6g}" for k, v in r.values.items())
                 if r.kind == "transform" else "(observer)") for r in self]
        return format_table(header, rows, rule=True)

    def __repr__(self) -> str:
        return str(self)


def summary(model: nn.Module) -> Summary:
    """The plugdrop attachments of ``model``: one row per (layer, transform), in module order,
    with the current value of each numeric setting at that layer (per-layer settings, see
    :func:`plugdrop.by_depth`, show each layer's own, also when the attachment was made on a
    submodule of ``model``) and the number of times the transform ran
    there (``calls``: training forwards for forward transforms, forwards under autograd for
    gradient transforms), and one per (layer, observer) for the
    observers of :mod:`plugdrop.observe`. ``print(summary(model))`` shows a table.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"summary() needs a torch.nn.Module, got {type(model).__name__}")
    out = Summary()
    for name, _, hook in _registry.scan(model):
        t = hook.target
        if isinstance(hook, BeginHook):
            continue
        if isinstance(t, Transform):
            # a per-layer value is keyed by the layer's name where it was attached (hook.name),
            # which differs from ``name`` when the attachment was made on a submodule
            out.append(SummaryRow(name, repr(t), hook.where, t.values(hook.name), t.step_count,
                                  calls=hook.count()))
        else:
            out.append(SummaryRow(name, repr(t), hook.where, {}, 0, "observer"))
    return out
