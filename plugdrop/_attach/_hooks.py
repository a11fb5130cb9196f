"""The hook objects plugdrop registers: forward hooks, forward pre-hooks and tensor hooks.

Every one is an instance of a module-level class (never a lambda or closure), so a model with
attachments deep-copies, pickles and ``torch.save``\\ s, and the registry finds plugdrop's hooks
on a copy by type. A hook's ``target`` is a transform or an :class:`~.observer.Observer`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from ..transforms import CoordinatedTransform, ForwardTransform, GradientTransform, Transform
from .. import _compat
from . import _structure
from .observer import Observer


class Hook:
    """Base of every module hook plugdrop registers."""

    where = ""
    #: Decided at construction: a forward transform with no ``element``, so a bare tensor
    #: value goes straight to the transform (:meth:`OutputHook.__call__`). ``False`` on the
    #: class: a hook pickled before the attribute existed takes the general path.
    _direct = False

    def __init__(self, target: Transform | Observer, name: str, element: int | str | None,
                 device: torch.device | None = None):
        self.target = target
        self.name = name
        self.element = element
        self._direct = element is None and isinstance(target, ForwardTransform)
        # Calls in training (forward transforms) or with autograd on (gradient transforms):
        # a Python int in eager mode, a 0-dim tensor counted inside compiled graphs (no sync).
        self.calls = 0
        self.traced_calls = _compat.mark_static(torch.zeros((), dtype=torch.int64,
                                                            device=device))

    def _count(self) -> None:
        if torch.compiler.is_compiling():
            self.traced_calls.add_(1)
        else:
            self.calls += 1

    def count(self) -> int:
        """Calls so far (reads the compiled count: one host read, outside the forward)."""
        return self.calls + int(self.traced_calls)

    def _context(self, module: nn.Module) -> str:
        return (f"{type(self.target).__name__} on layer {self.name!r} "
                f"({type(module).__name__}, where={self.where!r})")

    def _act(self, module: nn.Module, value: Any, element: int | str | None) -> Any:
        """Apply the target to the chosen tensor of ``value``; ``None`` if nothing changes."""
        target = self.target
        if isinstance(value, torch.fx.Proxy):  # symbolic tracing (residual_branches)
            return None
        if isinstance(target, Observer):
            return self._observe(module, value, element, target)
        forward = isinstance(target, ForwardTransform)
        if forward and not module.training:
            return None
        if not forward and not torch.is_grad_enabled():
            return None
        self._count()
        try:
            key = _structure.locate(value, element, self.where)
        except (ValueError, TypeError) as e:
            raise type(e)(f"{self._context(module)}: {e}") from None
        x = value if key is None else value[key]
        if isinstance(target, GradientTransform):
            if x.requires_grad:
                x.register_hook(_GradHook(target, self.name))
            return None
        try:
            y = target._at(self.name, x)
        except (ValueError, TypeError) as e:
            raise type(e)(f"{self._context(module)}: {e}") from None
        return None if y is x else _structure.replace(value, key, y)

    def _observe(self, module: nn.Module, value: Any, element: int | str | None,
                 observer: Observer) -> None:
        """Hand the chosen tensor (or the whole value) to an observer; never modified."""
        if observer.whole:
            observer.on_value(self.name, module, value)
            return None
        if observer.strict:
            key = _structure.locate(value, element, self.where)
        else:
            key = _structure.try_locate(value, element, self.where)
            if key is _structure.MISSING:
                return None
        x = value if key is None else value[key]
        observer.on_forward(self.name, module, x)
        if observer.wants_grad and torch.is_grad_enabled() and x.requires_grad:
            x.register_hook(_ObserveGradHook(observer, self.name))
        return None


class OutputHook(Hook):
    """Forward hook: acts on (an element of) the module's output."""

    where = "output"

    def __call__(self, module: nn.Module, args: tuple, output: Any) -> Any:
        # The common case, a forward transform on a bare tensor output, without the general
        # path's checks (what they would decide is known from the hook and the value's type).
        if self._direct and type(output) is torch.Tensor:
            if not module.training:
                return None
            target: Any = self.target
            try:
                if torch.compiler.is_compiling():
                    self.traced_calls.add_(1)
                    y = target._at(self.name, output)
                else:
                    self.calls += 1
                    y = target._eager_at(self.name, output)
            except (ValueError, TypeError) as e:
                raise type(e)(f"{self._context(module)}: {e}") from None
            return None if y is output else y
        return self._act(module, output, self.element)


class InputHook(Hook):
    """Forward pre-hook (with kwargs): acts on the first positional input, or the named one."""

    where = "input"

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> Any:
        element = self.element
        if isinstance(element, str):
            if element not in kwargs:
                raise ValueError(
                    f"{self._context(module)}: element={element!r} is not among the keyword "
                    f"inputs of this call ({', '.join(map(repr, kwargs)) or 'none'})"
                )
            y = self._act(module, kwargs[element], None)
            if y is None:
                return None
            kwargs = dict(kwargs)
            kwargs[element] = y
            return args, kwargs
        index = 0 if element is None else element
        if not -len(args) <= index < len(args):
            raise ValueError(
                f"{self._context(module)}: this call has {len(args)} positional input(s), so "
                f"there is no positional input {index}; for keyword inputs pass element='name'"
            )
        x = args[index]
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"{self._context(module)}: positional input {index} is a "
                f"{type(x).__name__}, not a tensor; pass element= to pick another input"
            )
        y = self._act(module, x, None)
        if y is None:
            return None
        new_args = list(args)
        new_args[index] = y
        return tuple(new_args), kwargs


class BeginHook(Hook):
    """Forward pre-hook on the model's root for a coordinated transform: lets it decide once
    per forward (ManifoldMixup picks its layer there)."""

    where = "begin"

    def __call__(self, module: nn.Module, args: tuple) -> None:
        target = self.target
        if not isinstance(target, CoordinatedTransform):  # pragma: no cover - attach sets it
            return None
        if module.training:
            target._begin()
        else:
            target._end_eval()
        return None


class _GradHook:
    """Tensor hook on an activation: transforms the gradient flowing back through it."""

    def __init__(self, transform: GradientTransform, layer: str):
        self.transform = transform
        self.layer = layer

    def __call__(self, grad: torch.Tensor) -> torch.Tensor:
        return self.transform._call_grad(grad, self.layer)


class _ObserveGradHook:
    """Tensor hook handing the gradient of an observed tensor to its observer, unchanged."""

    def __init__(self, observer: Observer, name: str):
        self.observer = observer
        self.name = name

    def __call__(self, grad: torch.Tensor) -> None:
        self.observer.on_grad(self.name, grad)
        return None
