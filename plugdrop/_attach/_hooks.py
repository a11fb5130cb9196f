"""The hook objects plugdrop registers: forward hooks, forward pre-hooks and tensor hooks.

Every one is an instance of a module-level class (never a lambda or closure), so a model with
attachments deep-copies, pickles and ``torch.save``\\ s, and the registry finds plugdrop's hooks
on a copy by type. A hook's ``target`` is a transform or an :class:`~.observer.Observer`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn as nn

from ..transforms import CoordinatedTransform, ForwardTransform, GradientTransform, Transform
from .. import _compat
from ..errors import AttachError
from . import _structure
from .observer import Observer


#: observers stay idle while this is not empty (a forward made by plugdrop itself to learn
#: about the model, which the user's observers must not record): see :func:`observers_idle`
_QUIET: list[bool] = []


@contextlib.contextmanager
def observers_idle() -> Iterator[None]:
    """Within the block, plugdrop's observers record nothing."""
    _QUIET.append(True)
    try:
        yield
    finally:
        _QUIET.pop()


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
            return None if _QUIET else self._observe(module, value, element, target)
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
        # Not while compiling: an observer's gradient hook changes state outside the graph
        # (a side effect dynamo cannot trace in a backward hook), and the graph break it
        # would cost splits the model around every observed layer.
        if (observer.wants_grad and torch.is_grad_enabled() and x.requires_grad
                and not torch.compiler.is_compiling()):
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
    """A forward pre-hook that serves an attachment away from its layers, and is not one of
    them (summaries and handles list the layers of the other hooks). As such, on the model's
    root for a coordinated transform: lets it decide once per forward (ManifoldMixup picks its
    layer there); its subclass :class:`EntryHook` starts a skip-compute branch."""

    where = "begin"

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict | None = None) -> Any:
        target = self.target
        if not isinstance(target, CoordinatedTransform):  # pragma: no cover - attach sets it
            return None
        if module.training:
            target._begin()
        else:
            target._end_eval()
        return None


class Pending:
    """What a skip-compute branch's entry drew, waiting for the branch's exit: one draw per
    thread (DataParallel runs its replicas in threads). Never copied or pickled: a copy of a
    model starts without any."""

    def __init__(self) -> None:
        self.draws: dict[int, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.draws = {}


#: no draw is waiting (the entry did not run in this forward)
_NONE = object()
#: why DropPath(skip_compute=True) breaks a torch.compile graph, as dynamo reports it
_WHY_BREAK = ("DropPath(skip_compute=True) draws on the host which samples run a residual "
              "branch: one graph break at the branch's entry and one at its exit (the "
              "branch's graph takes a dynamic batch); with fullgraph=True use "
              "skip_compute=False")


class EntryHook(BeginHook):
    """Forward pre-hook (with kwargs) on the entry of a residual branch that
    ``DropPath(skip_compute=True)`` drops: draws which samples keep the branch and passes only
    those on (the stream argument, and any other argument that is the same tensor). The
    branch's layer, ``name``, is the exit; its module's training flag decides."""

    where = "entry"

    def __init__(self, target: Transform, name: str, layer: nn.Module, entry: str,
                 arg: int | str, empty_ok: bool, pending: Pending,
                 device: torch.device | None = None):
        super().__init__(target, name, None, device)
        self.layer, self.entry, self.arg = layer, entry, arg
        self.empty_ok, self.pending = empty_ok, pending

    def _context(self, module: nn.Module) -> str:
        return (f"{type(self.target).__name__} on layer {self.name!r} "
                f"({type(self.layer).__name__}), at its branch's entry {self.entry!r} "
                f"({type(module).__name__})")

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict | None = None) -> Any:
        if not self.layer.training:
            return None
        kwargs = {} if kwargs is None else kwargs
        if torch.compiler.is_compiling():
            _outside_ready()
            return _OUTSIDE["enter"](self, module, args, kwargs)
        return self.enter(module, args, kwargs)

    def enter(self, module: nn.Module, args: tuple, kwargs: dict, mark: bool = False) -> Any:
        """Draw, and give the entry the kept rows (eager mode); ``mark``: tell
        ``torch.compile`` that their number varies."""
        arg = self.arg
        x = kwargs.get(arg) if isinstance(arg, str) else (
            args[arg] if -len(args) <= arg < len(args) else None)
        if not isinstance(x, torch.Tensor):  # called otherwise: its first tensor argument
            x = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)),
                     None)
        if x is None:
            raise AttachError(f"{self._context(module)}: this call of the branch's entry has "
                              f"no tensor argument to take the kept samples from")
        target: Any = self.target
        try:
            y, kept = target._enter(self.name, x, self.empty_ok)
        except (ValueError, TypeError) as e:
            raise type(e)(f"{self._context(module)}: {e}") from None
        self.pending.draws[threading.get_ident()] = kept
        if mark:  # the branch's graphs take a batch of any size, whatever this draw kept
            y = x[:] if y is x else y
            _compat.mark_dynamic(y, 0)
        elif y is x:
            return None
        return (tuple(y if a is x else a for a in args),
                {k: (y if v is x else v) for k, v in kwargs.items()})


class ExitHook(Hook):
    """Forward hook on the exit of a residual branch that ``DropPath(skip_compute=True)``
    drops: puts the branch's output on the kept samples back into the whole batch."""

    where = "output"

    def __init__(self, target: Transform, name: str, pending: Pending,
                 device: torch.device | None = None):
        super().__init__(target, name, None, device)
        self.pending = pending

    def __call__(self, module: nn.Module, args: tuple, output: Any) -> Any:
        if not module.training:  # the entry drew nothing either
            return None
        if torch.compiler.is_compiling():
            _outside_ready()
            return _OUTSIDE["exit"](self, module, output)
        return self.exit(module, output)

    def exit(self, module: nn.Module, output: Any) -> Any:
        """The output for the whole batch (eager mode)."""
        self.calls += 1
        kept = self.pending.draws.pop(threading.get_ident(), _NONE)
        if kept is _NONE or kept is None:  # the entry did not run, or p = 0
            return None
        if not isinstance(output, torch.Tensor):
            raise AttachError(f"{self._context(module)}: skip_compute needs a tensor output, "
                              f"got {type(output).__name__}")
        target: Any = self.target
        try:
            return target._exit(self.name, output, kept)
        except (ValueError, TypeError) as e:
            raise type(e)(f"{self._context(module)}: {e}") from None


def _enter_eagerly(hook: EntryHook, module: nn.Module, args: tuple, kwargs: dict) -> Any:
    """:meth:`EntryHook.enter` run eagerly from a compiled forward, its rows marked dynamic."""
    return hook.enter(module, args, kwargs, True)


def _exit_eagerly(hook: ExitHook, module: nn.Module, output: Any) -> Any:
    """:meth:`ExitHook.exit` run eagerly from a compiled forward."""
    return hook.exit(module, output)


#: ``_enter_eagerly`` and ``_exit_eagerly`` wrapped by ``torch.compiler.disable``
_OUTSIDE: dict[str, Any] = {}


def outside_graph() -> dict[str, Any]:
    """The entry's and the exit's eager work as functions dynamo calls outside its graphs
    (a graph break naming the reason). Made when a compiled forward first traces a
    skip-compute hook (:func:`_outside_ready`): neither ``import plugdrop`` nor ``attach``
    loads dynamo, which costs seconds."""
    if not _OUTSIDE:
        _OUTSIDE["enter"] = torch.compiler.disable(_enter_eagerly, reason=_WHY_BREAK)
        _OUTSIDE["exit"] = torch.compiler.disable(_exit_eagerly, reason=_WHY_BREAK)
    return _OUTSIDE


@_compat.constant_result
def _outside_ready() -> bool:
    """:func:`outside_graph` made; dynamo runs this at trace time, outside the graph (a
    constant result), so the functions exist before the trace reads them."""
    outside_graph()
    return True


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
