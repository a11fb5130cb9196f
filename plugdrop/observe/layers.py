"""``layers``: the module tree of a model with each module's output from one dry forward."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn as nn

from .. import _attach, _layout, _selection
from .._attach import Observer
from .._selection import Selector
from .._table import format_table
from ..errors import PlugdropError, one_line

__all__ = ["layers", "LayerTable", "LayerRow"]


class LayerRow(NamedTuple):
    """One module in a :class:`LayerTable`."""

    name: str      #: canonical name ("" for the root)
    type: str      #: class name
    depth: int     #: 0 for the root, 1 for its children, ...
    output: str    #: what the module returned in the dry forward, e.g. "Tensor(1, 64, 8, 8)"
    called: bool   #: whether the dry forward called the module at all
    picked: bool   #: whether ``selector`` picks it
    shape: tuple[int, ...] | None = None  #: the output's shape when it is one tensor
    layout: str = "-"  #: the layout DropBlock / Dropout2d would read its output in by default
    residual: bool = False  #: a residual branch (when :func:`residual_branches` ran on it)


class LayerTable(list):
    """The module tree of a model (a list of :class:`LayerRow`); prints as an indented table,
    picked modules marked with ``*``, residual branches with ``R``, and the default layout of
    each output."""

    def __init__(self, rows: list[LayerRow], title: str = "") -> None:
        super().__init__(rows)
        self.title = title

    def __str__(self) -> str:
        lines = [self.title] if self.title else []
        if not self:
            return "\n".join(lines + ["(no modules)"])
        rows = [(("*" if r.picked else " ") + ("R" if r.residual else " "),
                 "  " * r.depth + (r.name or "(root)"), r.type,
                 r.output if r.called else "(not called)", r.layout if r.called else "")
                for r in self]
        return "\n".join(lines + [format_table(None, rows)])

    def __repr__(self) -> str:
        return str(self)


def layers(model: nn.Module, *inputs: Any, selector: Selector | None = None,
           exclude: Selector | None = None, max_depth: int | None = None,
           **kwargs: Any) -> LayerTable:
    """The module tree of ``model`` with each module's type and output from one dry forward.

    The forward runs once in eval mode under ``torch.no_grad()`` with ``inputs`` / ``kwargs``
    (the model's training flag is restored); no hook is left behind. Use it to write a selector
    without reading the model's code: modules that ``selector`` picks are marked.

    Args:
        model: any ``nn.Module``; wrapper segments (DDP, ``torch.compile``) are hidden.
        *inputs: the example input(s) of the dry forward, e.g.
            ``torch.zeros(1, 3, 224, 224)``.
        **kwargs: keyword inputs of the dry forward.
        selector, exclude: optional; see :func:`plugdrop.select`.
        max_depth: keep modules down to this depth only (0: the root). Default: all.

    Returns:
        A :class:`LayerTable` (rows in ``named_modules()`` order); ``print()`` it.

    Raises:
        ValueError: ``selector`` matches nothing (with the closest names), ``max_depth < 0``.
        PlugdropError: the model's forward failed on the inputs (the message names the model,
            the inputs' shapes and the model's own error, which is its ``__cause__``).
    """
    if max_depth is not None and (isinstance(max_depth, bool) or not isinstance(max_depth, int)
                                  or max_depth < 0):
        raise ValueError(f"max_depth must be an int >= 0 or None, got {max_depth!r}")
    picked = set(_attach.select(model, selector, exclude=exclude)) if selector is not None \
        else set()
    shapes, layouts = _output_shapes(model, inputs, kwargs)
    residual = set(_attach.known_residual_branches(model) or ())
    rows = []
    for entry in _selection.walk(model):
        if entry.wrapper:
            continue
        depth = 0 if entry.name == "" else entry.name.count(".") + 1
        if max_depth is not None and depth > max_depth:
            continue
        out = shapes.get(entry.name)
        rows.append(LayerRow(entry.name, type(entry.module).__name__, depth,
                             out[0] if out else "", out is not None, entry.name in picked,
                             out[1] if out else None, layouts.get(entry.name, "-"),
                             entry.name in residual))
    title = f"{type(model).__name__}: {len(rows)} modules"
    if selector is not None:
        title += f"; * = picked ({len(picked)})"
    return LayerTable(rows, title)



class _Shapes(Observer):
    """Records the structure of every module's output (all of it: tuples, dicts)."""

    whole = True

    def __init__(self) -> None:
        self.shapes: dict[str, tuple[str, tuple[int, ...] | None]] = {}
        self.layouts: dict[str, str] = {}

    def __repr__(self) -> str:
        return "layers()"

    def on_value(self, layer: str, module: nn.Module, value: Any) -> None:
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else None
        self.shapes[layer] = (_attach.describe(value), shape)
        if shape is not None:
            self.layouts[layer] = _layout.describe(shape)


def _output_shapes(model: nn.Module, inputs: tuple, kwargs: dict
                   ) -> tuple[dict[str, tuple[str, tuple[int, ...] | None]], dict[str, str]]:
    """Canonical name -> (description of its output, its shape when one tensor), and the
    default layout of a tensor output, from one forward in eval mode without gradients
    (modules not called are absent); the training flag is restored."""
    shapes = _Shapes()
    with _attach.observe(model, "**", shapes):
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                model(*inputs, **kwargs)
        except Exception as e:
            given = [*inputs, *kwargs.values()]
            described = ", ".join(str(tuple(v.shape)) if isinstance(v, torch.Tensor)
                                  else type(v).__name__ for v in given)
            error = one_line(e, typed=True, period=False)
            raise PlugdropError(
                f"layers() could not run {type(model).__name__} on the input"
                f"{'s' if len(given) > 1 else ''} {described}: {error}; give an input it takes, "
                f"or build it for this one (a timm ViT: img_size=...)") from e
        finally:
            model.train(was_training)
    return shapes.shapes, shapes.layouts
