"""Which modules a selector picks (:func:`select`), the residual branches of a model
(:func:`residual_branches`, the ``"residual:"`` selectors), and what the attachment tells a
transform about where it is attached (:class:`AttachSite`)."""

from __future__ import annotations

import re
from typing import Any

import torch.nn as nn

from .. import _selection
from .._selection import Selector
from ..errors import AttachError, SelectorError
from . import _residual

__all__ = ["AttachSite", "bare", "known_residual_branches", "residual_branches", "resolve",
           "select"]


def known_residual_branches(model: nn.Module) -> list[str] | None:
    """The branches :func:`residual_branches` found for ``model`` (``None``: not analysed)."""
    return _residual.known(bare(model))


def bare(model: nn.Module) -> nn.Module:
    """The model inside its wrappers (DDP, torch.compile...)."""
    return next(e.module for e in _selection.walk(model) if not e.wrapper)


def residual_branches(model: nn.Module, example_input: Any = None) -> list[str]:
    """The modules of ``model`` whose output is added to a shortcut: where DropPath belongs.

    Runs ``model`` once on ``example_input`` (in eval mode, the training flags restored
    after; a tuple is passed as positional inputs, a dict as keyword inputs) and watches every
    tensor addition: ``a + b`` inside a module ``S`` is a residual connection when one operand
    was returned by a module inside ``S`` and the other is an autograd ancestor of it (an
    identity shortcut, ``x + f(x)``) or the output of a module of ``S`` whose input is (a
    projection shortcut, ``downsample(x) + f(x)``). The branch is the outermost module inside
    ``S`` that returned the added tensor: ``blocks.3.drop_path1`` in a timm ViT, ``layer1.0.bn2``
    in a torchvision ResNet, ``mlp`` in ``x + self.mlp(x)``. Works on any model the example
    input runs through, control flow included (nothing is symbolically traced). Without an
    example input the model is traced symbolically with ``torch.fx`` instead (the same rule on
    the graph; it fails on data-dependent control flow, naming the module).

    The result is remembered for ``model``: afterwards the selector ``"residual:"`` (all
    branches) or ``"residual:<glob>"`` (the branches matching the glob) works in
    :func:`attach`, :func:`select` and ``exclude`` (``"residual:layer3.*"``: the branches
    inside the modules the glob names, or named by it), and attaching :class:`DropPath` elsewhere
    warns (:class:`NotResidualWarning`).

    Args:
        model: any ``nn.Module`` (wrappers seen through: names are the bare model's).
        example_input: one input batch (a small one is enough: shapes only need to be valid);
            ``None``: trace with torch.fx.

    Returns:
        Module names in ``named_modules()`` order.

    Raises:
        AttachError: the model failed on the example input (or torch.fx could not trace it);
            the message names the module that was running and the error.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"residual_branches() needs a torch.nn.Module, got "
                        f"{type(model).__name__}")
    if example_input is None:
        return _residual.find_symbolic(bare(model))
    return _residual.find(bare(model), example_input)


class _ResidualSelector:
    """The selector ``"residual:<glob>"``: residual branches found for the model."""

    def __init__(self, text: str, branches: list[str]) -> None:
        self.text = text
        glob = text[len("residual:"):]
        rx = re.compile(_selection.glob_to_regex(glob)) if glob else None
        self.names = {n for n in branches if rx is None or any(
            rx.fullmatch(".".join(n.split(".")[:k])) for k in range(1, n.count(".") + 2))}

    def __call__(self, name: str, module: nn.Module) -> bool:
        return name in self.names

    def __repr__(self) -> str:
        return repr(self.text)


def _expand(model: nn.Module, selector: Selector) -> Selector:
    """Turn ``"residual:..."`` strings into selectors of the branches found for ``model``."""
    if isinstance(selector, str) and selector.startswith("residual:"):
        found = _residual.known(bare(model))
        if found is None:
            try:
                found = _residual.find_symbolic(bare(model))
            except AttachError as e:
                raise SelectorError(
                    f"selector {selector!r} needs the residual branches of the model: {e}"
                ) from None
        return _ResidualSelector(selector, found)
    if isinstance(selector, (list, set, frozenset)):
        return [_expand(model, s) for s in selector]
    return selector


def resolve(model: nn.Module, selector: Selector, exclude: Selector | None
             ) -> list[tuple[str, nn.Module]]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return _selection.resolve(model, _expand(model, selector),
                              None if exclude is None else _expand(model, exclude))


class AttachSite:
    """Where an attachment goes, for the transform's own checks
    (:meth:`plugdrop.Transform._check_layers`): the bare model, ``where``, and the model's
    residual branches (found by :func:`residual_branches`, else by torch.fx when it can
    trace the model)."""

    def __init__(self, model: nn.Module, where: str) -> None:
        self.model = bare(model)
        self.where = where

    def residual_branches(self) -> list[str] | None:
        found = _residual.known(self.model)
        return found if found is not None else _residual.try_symbolic(self.model)

    def on_residual_branch(self, name: str) -> bool:
        return _residual.equivalent(self.model, name)


def select(model: nn.Module, selector: Selector, *, exclude: Selector | None = None
           ) -> list[str]:
    """The names of the modules ``selector`` picks: a dry run of :func:`attach`.

    Args:
        model: any ``nn.Module``; wrappers (DDP, ``torch.compile``, checkpoint, FSDP) are seen
            through, so names are those of the bare model.
        selector: a glob over qualified module names (``"layer3.*"``: ``*`` matches within one
            dotted segment, ``**`` any number of segments, zero included; ``?`` and ``[...]``
            as in fnmatch; ``""`` is the root), a ``"re:"`` regular expression (full match), an
            ``nn.Module`` type or tuple of types, a module object of the model
            (``model.layer3``), a predicate ``(name, module) -> bool``, ``"residual:"`` /
            ``"residual:<glob>"`` (see :func:`residual_branches`), or a list of these (union).
        exclude: the same forms; matching modules are removed from the selection. Each
            must match some module (a typo raises instead of excluding nothing).

    Returns:
        Names in ``named_modules()`` order, without duplicates.

    Raises:
        SelectorError: a selector (or any element of a list) matches nothing; the message names
            the closest existing names.
        TypeError: ``model`` is not a module, or a selector is of an unsupported type.
    """
    return [name for name, _ in resolve(model, selector, exclude)]
