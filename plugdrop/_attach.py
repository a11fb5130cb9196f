"""Attachment: the one place that knows about hooks. Private; the API is re-exported.

Every hook object is an instance of a module-level class deriving from :class:`_Hook`, so a
model with attachments deep-copies, pickles and ``torch.save``\\ s, and :func:`detach` finds
plugdrop's hooks by type. Nothing is added to the model's parameters, buffers or attributes.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Mapping
from typing import Any, NamedTuple

import torch
import torch.nn as nn
from torch.utils.hooks import RemovableHandle

from . import _selection
from ._selection import Selector
from .transforms import GradientTransform, ManifoldMixup, Transform

__all__ = ["attach", "detach", "handles", "select", "summary", "Handle", "MixupHandle",
           "Summary"]

_WHERE = ("output", "input", "params")


# ------------------------------------------------------------------------ output structures


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor{tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}[" + ", ".join(_describe(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in value.items()) + "}"
    return type(value).__name__


def _locate(value: Any, element: int | str | None, where: str) -> Any:
    """The key of the tensor to act on in a module's output (or ``None`` for a bare tensor)."""
    if isinstance(value, torch.Tensor):
        if element is not None:
            raise ValueError(
                f"element={element!r} was given but the {where} is a single tensor; "
                f"leave element=None"
            )
        return None
    if isinstance(value, (tuple, list)):
        if element is None:
            for i, v in enumerate(value):
                if isinstance(v, torch.Tensor):
                    return i
        elif isinstance(element, int) and -len(value) <= element < len(value):
            if isinstance(value[element], torch.Tensor):
                return element
    elif isinstance(value, Mapping):
        if element is None:
            for k, v in value.items():
                if isinstance(v, torch.Tensor):
                    return k
        elif element in value and isinstance(value[element], torch.Tensor):
            return element
    else:
        raise TypeError(
            f"the {where} is a {type(value).__name__}, not a tensor, tuple, list or dict; "
            f"plugdrop transforms act on tensors"
        )
    which = "no tensor" if element is None else f"no tensor at element={element!r}"
    raise ValueError(
        f"the {where} {_describe(value)} has {which}; pass element= with the index or key "
        f"of the tensor to act on"
    )


def _replace(value: Any, key: Any, new: torch.Tensor) -> Any:
    if key is None:
        return new
    if isinstance(value, tuple):
        items = list(value)
        items[key] = new
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    out = copy.copy(value)
    out[key] = new
    return out


# ------------------------------------------------------------------------------------ hooks


class _Hook:
    """Base of every hook plugdrop registers on a module."""

    where = ""

    def __init__(self, transform: Transform, name: str, element: int | str | None):
        self.transform = transform
        self.name = name
        self.element = element

    def _context(self, module: nn.Module) -> str:
        return (f"{type(self.transform).__name__} on layer {self.name!r} "
                f"({type(module).__name__}, where={self.where!r})")

    def _forward(self, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
        try:
            return self.transform.at(self.name, x)
        except (ValueError, TypeError) as e:
            raise type(e)(f"{self._context(module)}: {e}") from None

    def _watch_grad(self, x: torch.Tensor) -> None:
        if x.requires_grad:
            x.register_hook(_GradHook(self.transform))

    def _act(self, module: nn.Module, value: Any, element: int | str | None) -> Any:
        """Apply the transform to the chosen tensor of ``value``; ``None`` if nothing to do."""
        if self.transform.kind == "observe":
            return self._observe(module, value, element)
        forward = self.transform.kind == "forward"
        if forward and not module.training:
            return None
        if not forward and not torch.is_grad_enabled():
            return None
        try:
            key = _locate(value, element, self.where)
        except (ValueError, TypeError) as e:
            raise type(e)(f"{self._context(module)}: {e}") from None
        x = value if key is None else value[key]
        if not forward:
            self._watch_grad(x)
            return None
        y = self._forward(module, x)
        return None if y is x else _replace(value, key, y)


    def _observe(self, module: nn.Module, value: Any, element: int | str | None) -> None:
        """Hand the chosen tensor to an observer (any mode, never modified)."""
        observer = self.transform
        key = _locate(value, element, self.where) if observer.strict else _try_locate(
            value, element, self.where)
        if key is _MISSING:
            return None
        x = value if key is None else value[key]
        observer.on_forward(self.name, module, x)
        if observer.wants_grad and torch.is_grad_enabled() and x.requires_grad:
            x.register_hook(_ObserveGradHook(observer, self.name))
        return None


_MISSING = object()


def _try_locate(value: Any, element: int | str | None, where: str) -> Any:
    try:
        return _locate(value, element, where)
    except (ValueError, TypeError):
        return _MISSING


class Observer:
    """Base of the objects :mod:`plugdrop.observe` hangs on modules through the same hooks as
    the transforms: they see a module's input or output (and its gradient) in every mode and
    never change it. Private protocol; the public tools are in :mod:`plugdrop.observe`."""

    kind = "observe"
    wants_grad = False
    strict = False  # False: modules whose output holds no tensor are skipped silently
    _attached = False
    step_count = 0

    def values(self) -> dict[str, float]:
        return {}

    def on_forward(self, layer: str, module: nn.Module, x: torch.Tensor) -> None:
        pass

    def on_grad(self, layer: str, grad: torch.Tensor) -> None:
        pass


class _ObserveGradHook:
    """Tensor hook handing the gradient of an observed tensor to its observer, unchanged."""

    def __init__(self, observer: Observer, name: str):
        self.observer = observer
        self.name = name

    def __call__(self, grad: torch.Tensor) -> None:
        self.observer.on_grad(self.name, grad)
        return None


def observe(model: nn.Module, selector: Selector, observer: Observer, *,
            exclude: Selector | None = None, where: str = "output",
            element: int | str | None = None, prepend: bool = False) -> Handle:
    """Hang ``observer`` on the selected modules (``where`` = "output" or "input"); the
    returned handle removes it. ``prepend`` places it before the module's other hooks (it then
    sees an output before any transform acts on it)."""
    selected = _selection.resolve(model, selector, exclude)
    hooks: list[tuple[nn.Module, _Hook]] = []
    for name, module in selected:
        if where == "input":
            hook: _Hook = _InputHook(observer, name, element)  # type: ignore[arg-type]
            module.register_forward_pre_hook(hook, with_kwargs=True, prepend=prepend)
        else:
            hook = _OutputHook(observer, name, element)  # type: ignore[arg-type]
            module.register_forward_hook(hook, prepend=prepend)
        hooks.append((module, hook))
    observer._attached = True
    _invalidate_compiled()
    return Handle(observer, where, [n for n, _ in selected], hooks)  # type: ignore[arg-type]


class _OutputHook(_Hook):
    """Forward hook: acts on (an element of) the module's output."""

    where = "output"

    def __call__(self, module: nn.Module, args: tuple, output: Any) -> Any:
        return self._act(module, output, self.element)


class _InputHook(_Hook):
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
        args = list(args)
        args[index] = y
        return tuple(args), kwargs


class _GradHook:
    """Tensor hook on an activation: transforms the gradient flowing back through it."""

    def __init__(self, transform: GradientTransform):
        self.transform = transform

    def __call__(self, grad: torch.Tensor) -> torch.Tensor:
        return self.transform(grad)


class _ParamGradHook:
    """Tensor hook on a parameter: transforms its gradient before accumulation into .grad."""

    def __init__(self, transform: GradientTransform):
        self.transform = transform

    def __call__(self, grad: torch.Tensor) -> torch.Tensor:
        return self.transform.call_param(grad)


class _ParamPostGradHook:
    """Post-accumulate-grad hook on a sharded (DTensor, FSDP2) parameter: FSDP2 assigns the
    reduce-scattered gradient shard to ``.grad`` and calls these hooks, not tensor hooks."""

    def __init__(self, transform: GradientTransform):
        self.transform = transform

    def __call__(self, param: torch.Tensor) -> None:
        if param.grad is not None:
            param.grad = self.transform.call_param(param.grad)


def _is_dtensor(t: torch.Tensor) -> bool:
    return any(c.__name__ == "DTensor" for c in type(t).__mro__)


class _ParamsHook(_Hook):
    """Forward pre-hook for ``where="params"``; owns the tensor hooks on the parameters.

    Tensor hooks on parameters do not survive ``copy.deepcopy`` or pickling (torch drops them),
    and ``fully_shard`` replaces parameters, so each forward checks that they are installed on
    the module's current parameters and installs them if not: a copy of the model regains them
    at its first forward. Sharded DTensor parameters (FSDP2) get a post-accumulate-grad hook
    acting on the reduced gradient shard (norms of DTensors are global); plain parameters a
    tensor hook acting on each backward's gradient before accumulation.
    """

    where = "params"

    def __init__(self, transform: GradientTransform, name: str, param_names: list[str]):
        super().__init__(transform, name, None)
        self.param_names = param_names
        # id(param) -> (weakref to it, hook handle, parameter name)
        self._installed: dict[int, tuple[weakref.ref, RemovableHandle, str]] = {}
        self._sharded: set[str] = set()  # names whose parameter is an FSDP2 shard

    _TRANSIENT = ("_installed", "_sharded")

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_installed"], state["_sharded"] = {}, set()
        return state

    def __deepcopy__(self, memo: dict) -> "_ParamsHook":
        new = _ParamsHook.__new__(_ParamsHook)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            new.__dict__[k] = type(v)() if k in self._TRANSIENT else copy.deepcopy(v, memo)
        return new

    def install(self, module: nn.Module) -> None:
        for pname in self.param_names:
            p = module.get_parameter(pname)
            known = self._installed.get(id(p))
            if known is not None and known[0]() is p:
                continue
            if _is_dtensor(p):
                # fully_shard replaced the parameter: drop the hooks left on the old one
                for key, (_, old, name) in list(self._installed.items()):
                    if name == pname:
                        old.remove()
                        del self._installed[key]
                self._sharded.add(pname)
                handle = p.register_post_accumulate_grad_hook(_ParamPostGradHook(self.transform))
            elif pname in self._sharded:
                continue  # FSDP2's unsharded view during forward: the shard carries the hook
            else:
                handle = p.register_hook(_ParamGradHook(self.transform))
            self._installed[id(p)] = (weakref.ref(p), handle, pname)

    def uninstall(self) -> None:
        for ref, handle, _ in self._installed.values():
            if ref() is not None:
                handle.remove()
        self._installed.clear()

    def __call__(self, module: nn.Module, args: tuple) -> None:
        self.install(module)
        return None


class _BeginHook(_Hook):
    """Forward pre-hook on the model's root for transforms that decide once per forward
    (ManifoldMixup picks its layer there)."""

    where = "begin"

    def __call__(self, module: nn.Module, args: tuple) -> None:
        if module.training:
            self.transform.begin()
        else:
            self.transform.last = None
        return None


def _iter_hooks(module: nn.Module):
    """(dict, key, hook) for every plugdrop hook registered on ``module``."""
    for d in (module._forward_pre_hooks, module._forward_hooks):
        for key, hook in list(d.items()):
            if isinstance(hook, _Hook):
                yield d, key, hook


def _remove_hook(module: nn.Module, d: dict, key: int, hook: _Hook) -> None:
    if isinstance(hook, _ParamsHook):
        hook.uninstall()
    d.pop(key, None)
    for extra in ("_forward_hooks_with_kwargs", "_forward_hooks_always_called",
                  "_forward_pre_hooks_with_kwargs"):
        getattr(module, extra, {}).pop(key, None)


def _module_device(module: nn.Module) -> torch.device:
    for t in module.parameters():
        return t.device
    for t in module.buffers():
        return t.device
    return torch.device("cpu")


_compiled_frames_seen = 0


def _invalidate_compiled() -> None:
    """Make hooks added to (or removed from) a model that ``torch.compile`` already traced
    take effect.

    Dynamo does not guard on the hooks of modules that had none when it traced them
    (``skip_nnmodule_hook_guards``), so a compiled model would silently keep running without
    a new attachment. If anything was compiled in this process since the last time we looked,
    the compiled code is dropped (``torch.compiler.reset()``) and the next call recompiles with
    the hooks in place. A process that never compiles pays nothing.
    """
    global _compiled_frames_seen
    try:
        from torch._dynamo.utils import counters
        frames = int(counters["frames"].get("total", 0))
    except Exception:  # pragma: no cover - private API moved: be safe, reset
        frames = _compiled_frames_seen + 1
    if frames > _compiled_frames_seen:
        torch.compiler.reset()
        _compiled_frames_seen = frames


# ----------------------------------------------------------------------------------- handle


class Handle:
    """What :func:`attach` returns: the attachment of one transform to a set of layers.

    Attributes:
        layers: the selected layer names, in ``named_modules()`` order.
        transform: the attached transform.
        where: ``"output"``, ``"input"`` or ``"params"``.

    Use it as a context manager to remove the attachment at the end of a block. Its schedules
    advance with :meth:`step` or, after :meth:`bind`, on every optimizer step.
    """

    def __init__(self, transform: Transform, where: str, layers: list[str],
                 hooks: list[tuple[nn.Module, _Hook]]):
        self.transform = transform
        self.where = where
        self.layers = layers
        self._hooks = hooks
        self._bound: RemovableHandle | None = None

    @property
    def attached(self) -> bool:
        """``True`` until :meth:`remove` (or :func:`detach`) took the attachment off."""
        return any(h is hook for m, hook in self._hooks for _, _, h in _iter_hooks(m))

    def remove(self) -> None:
        """Take every hook of this attachment off and unbind the optimizer. Idempotent."""
        removed = 0
        for module, hook in self._hooks:
            for d, key, h in _iter_hooks(module):
                if h is hook:
                    _remove_hook(module, d, key, h)
                    removed += 1
        if removed:
            _invalidate_compiled()
        self._hooks = []
        self.unbind()
        self.transform._attached = False

    def __enter__(self) -> "Handle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    @property
    def step_count(self) -> int:
        """Steps taken since attach (or since the last :meth:`load_state_dict`)."""
        return self.transform.step_count

    def step(self, n: int = 1) -> None:
        """Advance the schedules by ``n`` steps (``n >= 0``)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"step(n) takes an int n >= 0, got {n!r}")
        self.transform.set_step(self.transform.step_count + n)

    def bind(self, optimizer: torch.optim.Optimizer) -> "Handle":
        """Step the schedules after every ``optimizer.step()``; returns ``self``.

        Binding again replaces the previous binding; :meth:`remove` unbinds. A step that
        a ``GradScaler`` skips (inf/NaN gradients) does not count.
        """
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"bind() takes a torch.optim.Optimizer, got {type(optimizer).__name__}")
        self.unbind()
        self._bound = optimizer.register_step_post_hook(self._on_optimizer_step)
        return self

    def unbind(self) -> None:
        """Stop stepping on optimizer steps."""
        if self._bound is not None:
            self._bound.remove()
            self._bound = None

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.step()

    def state_dict(self) -> dict[str, int]:
        """``{"step": n}``: enough to resume the schedules with :meth:`load_state_dict`."""
        return {"step": self.transform.step_count}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Restore the step counter saved by :meth:`state_dict` and the values it implies."""
        if not isinstance(state, Mapping) or "step" not in state:
            raise ValueError(
                f"load_state_dict expects a mapping with key 'step' as given by state_dict(), "
                f"got {state!r}"
            )
        self.transform.set_step(state["step"])

    def __repr__(self) -> str:
        layers = ", ".join(self.layers[:4]) + (", ..." if len(self.layers) > 4 else "")
        return (f"Handle({self.transform!r}, where={self.where!r}, "
                f"{len(self.layers)} layer(s): [{layers}], step={self.step_count})")


class MixupHandle(Handle):
    """The handle of a :class:`ManifoldMixup` attachment: what the last forward mixed, and the
    matching loss."""

    @property
    def lam(self) -> float | None:
        """The mixing weight of the last training forward (``None`` if it did not mix)."""
        last = self.transform.last
        return None if last is None else last["lam"]

    @property
    def index(self) -> torch.Tensor | None:
        """The batch permutation of the last forward (``None`` if it did not mix)."""
        last = self.transform.last
        return None if last is None else last["index"]

    @property
    def layer(self) -> str | None:
        """The layer that mixed in the last forward (``""``: the input; ``None``: none)."""
        last = self.transform.last
        return None if last is None else last["layer"]

    def loss(self, criterion: Any, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``lam * criterion(logits, target) + (1 - lam) * criterion(logits, target[index])``
        for the last forward, or ``criterion(logits, target)`` if it did not mix. ``target``
        may be class indices or soft targets (probabilities), whatever ``criterion`` takes."""
        last = self.transform.last
        if last is None:
            return criterion(logits, target)
        lam, index = last["lam"], last["index"].to(target.device)
        return lam * criterion(logits, target) + (1.0 - lam) * criterion(logits, target[index])


# -------------------------------------------------------------------------------- public


def select(model: nn.Module, selector: Selector, *, exclude: Selector | None = None
           ) -> list[str]:
    """The names of the modules ``selector`` picks: a dry run of :func:`attach`.

    Args:
        model: any ``nn.Module``; wrappers (DDP, ``torch.compile``, checkpoint, FSDP) are seen
            through, so names are those of the bare model.
        selector: a glob over qualified module names (``"layer3.*"``: ``*`` matches within one
            dotted segment, ``**`` any number of segments, zero included; ``?`` and ``[...]``
            as in fnmatch; ``""`` is the root), a ``"re:"`` regular expression (full match), an
            ``nn.Module`` type or tuple of types, a predicate ``(name, module) -> bool``, or a
            list of these (union).
        exclude: the same forms; matching modules are removed from the selection.

    Returns:
        Names in ``named_modules()`` order, without duplicates.

    Raises:
        ValueError: a selector (or any element of a list) matches nothing; the message names
            the closest existing names.
        TypeError: ``model`` is not a module, or a selector is of an unsupported type.
    """
    return [name for name, _ in _selection.resolve(model, selector, exclude)]


def attach(model: nn.Module, selector: Selector, transform: Transform, *,
           exclude: Selector | None = None, where: str = "output",
           element: int | str | None = None) -> Handle:
    """Attach ``transform`` to every module of ``model`` that ``selector`` picks.

    Args:
        model: any ``nn.Module`` (wrapped by DDP or ``torch.compile`` or not).
        selector: which modules; see :func:`select`.
        transform: a forward transform (:class:`DropBlock`, :class:`Dropout2d`,
            :class:`Dropout`, :class:`DropPath`, :class:`GaussianNoise`) or a gradient
            transform (:class:`ClipGradValue`, :class:`ClipGradNorm`, :class:`ScaleGrad`,
            :class:`GradNoise`). One transform object serves one attachment; its schedules are
            shared by all the selected layers.
        exclude: modules to leave out; same forms as ``selector``.
        where: ``"output"`` (default): what the module returns; ``"input"``: its first
            positional input; ``"params"`` (gradient transforms only): the gradients of the
            module's parameters (those of its children included), each tensor on its own.
        element: for modules returning a tuple/list or dict (attention, LSTM), the index or key
            of the tensor to act on; default: the first tensor. With ``where="input"``, the
            positional index or keyword name of the input.

    Forward transforms act only in training mode (in eval mode the module's output is returned
    untouched, the very same tensor). Gradient transforms act on the gradient flowing back
    through the chosen tensor whenever autograd records, and leave forward values bit-identical.

    Returns:
        A :class:`Handle`.

    Raises:
        TypeError: ``model`` is not a module, ``transform`` is not a transform instance.
        ValueError: a selector matches nothing, a bad ``where``, a forward transform with
            ``where="params"``, ``where="params"`` on a module without parameters, a transform
            already attached elsewhere. Nothing is attached when attach raises.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"attach() needs a torch.nn.Module as model, got {type(model).__name__}")
    if isinstance(transform, type) and issubclass(transform, Transform):
        raise TypeError(
            f"attach() needs a transform instance, got the class {transform.__name__}; "
            f"write {transform.__name__}(...) with its settings"
        )
    if not isinstance(transform, Transform):
        raise TypeError(
            f"attach() needs a plugdrop transform (e.g. plugdrop.DropBlock(0.1)), got "
            f"{type(transform).__name__}"
        )
    if where not in _WHERE:
        raise ValueError(f"where must be one of {_WHERE}, got {where!r}")
    if element is not None and (isinstance(element, bool)
                                or not isinstance(element, (int, str))):
        raise TypeError(f"element must be an int, a str or None, got {element!r}")
    if where == "params":
        if transform.kind != "gradient":
            raise ValueError(
                f"where='params' takes a gradient transform (ClipGradNorm, ClipGradValue, "
                f"ScaleGrad, GradNoise); {type(transform).__name__} acts on activations: use "
                f"where='output' or 'input'"
            )
        if element is not None:
            raise ValueError("element= does not apply to where='params'")
    if transform._attached:
        raise ValueError(
            f"this {type(transform).__name__} object is already attached; every attach needs "
            f"its own transform object (or select all layers in one attach with a list)"
        )
    selected = _selection.resolve(model, selector, exclude)

    param_sets: list[list[str]] = []
    if where == "params":
        seen: set[int] = set()
        for name, module in selected:
            owned = []
            for pname, p in module.named_parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    owned.append(pname)
            if not any(True for _ in module.parameters()):
                raise ValueError(
                    f"where='params' on layer {name!r} ({type(module).__name__}), which has no "
                    f"parameters; select modules with weights, or use where='output'"
                )
            param_sets.append(owned)

    mixing = isinstance(transform, ManifoldMixup)
    if mixing and where != "output":
        raise ValueError("ManifoldMixup mixes layer outputs (and the model input when the root "
                         "'' is selected): leave where='output'")
    hooks: list[tuple[nn.Module, _Hook]] = []
    try:
        if mixing:
            transform.layers = [n for n, _ in selected]
            root = _selection.walk(model)[0].module
            begin = _BeginHook(transform, "", None)
            root.register_forward_pre_hook(begin, prepend=True)
            hooks.append((root, begin))
        for i, (name, module) in enumerate(selected):
            transform._prepare(_module_device(module))
            if mixing and name == "":  # the root: mix the model's input
                hook = _InputHook(transform, name, element)
                module.register_forward_pre_hook(hook, with_kwargs=True)
            elif where == "output":
                hook: _Hook = _OutputHook(transform, name, element)
                module.register_forward_hook(hook)
            elif where == "input":
                hook = _InputHook(transform, name, element)
                module.register_forward_pre_hook(hook, with_kwargs=True)
            else:
                hook = _ParamsHook(transform, name, param_sets[i])  # type: ignore[arg-type]
                module.register_forward_pre_hook(hook)
                hook.install(module)
            hooks.append((module, hook))
    except BaseException:
        for module, hook in hooks:
            for d, key, h in _iter_hooks(module):
                if h is hook:
                    _remove_hook(module, d, key, h)
        raise
    transform._attached = True
    _invalidate_compiled()
    cls = MixupHandle if mixing else Handle
    return cls(transform, where, [n for n, _ in selected], hooks)


def detach(model: nn.Module) -> int:
    """Remove everything plugdrop attached to ``model`` (and its copies' own hooks, when given
    a copy). Returns the number of hooks removed; handles of removed attachments become inert.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"detach() needs a torch.nn.Module, got {type(model).__name__}")
    count = 0
    for module in _selection.iter_modules(model):
        for d, key, hook in _iter_hooks(module):
            hook.transform._attached = False
            _remove_hook(module, d, key, hook)
            count += 1
    if count:
        _invalidate_compiled()
    return count


def handles(model: nn.Module) -> list[Handle]:
    """Handles for the attachments found on ``model``: one per transform, in module order.

    Use it on a copy (``copy.deepcopy``, ``torch.load``, an EMA model) to step, bind, save or
    remove the copy's own attachments, which no handle returned by :func:`attach` refers to.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"handles() needs a torch.nn.Module, got {type(model).__name__}")
    groups: dict[int, tuple[Transform, str, list[str], list[tuple[nn.Module, _Hook]]]] = {}
    for entry in _selection.walk(model):
        for _, _, hook in _iter_hooks(entry.module):
            t = hook.transform
            group = groups.setdefault(id(t), (t, hook.where, [], []))
            if entry.name not in group[2]:
                group[2].append(entry.name)
            group[3].append((entry.module, hook))
    return [Handle(t, where, layers, hooks) for t, where, layers, hooks in groups.values()]


class SummaryRow(NamedTuple):
    layer: str
    transform: str
    where: str
    values: dict[str, float]
    step: int


class Summary(list):
    """The attachments of a model: a list of :class:`SummaryRow` that prints as a table."""

    def __str__(self) -> str:
        if not self:
            return "(no plugdrop attachments)"
        header = ("layer", "transform", "where", "step", "current values")
        rows = [(r.layer or "(root)", r.transform, r.where, str(r.step),
                 ", ".join(f"{k}={v:.6g}" for k, v in r.values.items())) for r in self]
        widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                 for row in [header, tuple("-" * w for w in widths), *rows]]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)


def summary(model: nn.Module) -> Summary:
    """The plugdrop attachments of ``model``: one row per (layer, transform), in module order,
    with the current value of each numeric setting. ``print(summary(model))`` shows a table.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"summary() needs a torch.nn.Module, got {type(model).__name__}")
    out = Summary()
    for entry in _selection.walk(model):
        for _, _, hook in _iter_hooks(entry.module):
            if hook.where == "begin":
                continue
            t = hook.transform
            out.append(SummaryRow(entry.name, repr(t), hook.where, t.values(), t.step_count))
    return out


class _ShapeHook:
    """Forward hook recording the structure of a module's output (for ``plugdrop layers``)."""

    def __init__(self, store: dict[str, str], name: str):
        self.store = store
        self.name = name

    def __call__(self, module: nn.Module, args: tuple, output: Any) -> None:
        self.store[self.name] = _describe(output)


def output_shapes(model: nn.Module, *inputs: Any, **kwargs: Any) -> dict[str, str]:
    """Run one forward of ``model`` in eval mode without gradients and return, for every
    module (canonical name), a description of its output (``Tensor(1, 64, 16, 16)``, tuples
    and dicts spelled out). Modules not called in that forward are absent. No hook is left."""
    store: dict[str, str] = {}
    handles = []
    try:
        for entry in _selection.walk(model):
            if not entry.wrapper:
                handles.append(entry.module.register_forward_hook(_ShapeHook(store, entry.name)))
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                model(*inputs, **kwargs)
        finally:
            model.train(was_training)
    finally:
        for h in handles:
            h.remove()
    return store


def forward_transforms(model: nn.Module) -> dict[str, list[Transform]]:
    """Canonical layer name -> the forward transforms attached to its output."""
    out: dict[str, list[Transform]] = {}
    for entry in _selection.walk(model):
        for _, _, hook in _iter_hooks(entry.module):
            if hook.where == "output" and hook.transform.kind == "forward":
                out.setdefault(entry.name, []).append(hook.transform)
    return out
