"""Observers on a model (for :mod:`plugdrop.observe`): :func:`observe` hangs one on the selected
modules; and the forward transforms on each layer's output, which observers look up."""

from __future__ import annotations

import torch.nn as nn

from .._selection import Selector
from ..errors import AttachError
from ..transforms import ForwardTransform
from . import _registry
from ._hooks import InputHook, OutputHook
from ._registry import Registered
from .observer import Observer
from .selecting import resolve

__all__ = ["ObserverHandle", "forward_transforms", "observe"]


def observe(model: nn.Module, selector: Selector, observer: Observer, *,
            exclude: Selector | None = None, where: str = "output",
            element: int | str | None = None, prepend: bool = False) -> ObserverHandle:
    """Hang ``observer`` on the selected modules (``where`` = "output" or "input"); the
    returned handle's ``remove()`` takes it off. ``prepend`` places it before the module's
    other hooks (it then sees an output before any transform acts on it).

    Raises:
        AttachError: a ``where`` other than "output" or "input".
        SelectorError: a selector matches nothing.
    """
    if where not in ("output", "input"):
        raise AttachError(f"observers watch where='output' or 'input', got {where!r}")
    hooks: list[Registered] = []
    for name, module in resolve(model, selector, exclude):
        if where == "input":
            pre = InputHook(observer, name, element)
            hooks.append(Registered(module, pre, module.register_forward_pre_hook(
                pre, with_kwargs=True, prepend=prepend)))
        else:
            post = OutputHook(observer, name, element)
            hooks.append(Registered(module, post, module.register_forward_hook(
                post, prepend=prepend)))
    _registry.invalidate_compiled()
    return ObserverHandle(observer, where, [r.hook.name for r in hooks], hooks)


class ObserverHandle:
    """What :func:`observe` returns: the layers an observer hangs on, and its removal. Not a
    :class:`Handle`: an observer has no schedule to step, bind or save."""

    def __init__(self, observer: Observer, where: str, layers: list[str],
                 hooks: list[Registered]):
        self.observer, self.where, self.layers = observer, where, layers
        self._hooks = hooks

    def remove(self) -> None:
        """Take the observer off every layer. Idempotent."""
        if sum(_registry.remove(r) for r in self._hooks):
            _registry.invalidate_compiled()
        self._hooks = []

    def __enter__(self) -> ObserverHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def forward_transforms(model: nn.Module) -> dict[str, list[ForwardTransform]]:
    """Canonical layer name -> the forward transforms attached to its output."""
    out: dict[str, list[ForwardTransform]] = {}
    for name, _, hook in _registry.scan(model):
        if isinstance(hook, OutputHook) and isinstance(hook.target, ForwardTransform):
            out.setdefault(name, []).append(hook.target)
    return out
