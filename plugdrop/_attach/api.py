"""The attachment API: select, attach, detach, handles, summary, and observe (for
:mod:`plugdrop.observe`)."""

from __future__ import annotations

from typing import NamedTuple

import torch.nn as nn

from .. import _selection
from .._selection import Selector
from .._table import format_table
from ..errors import AttachError
from ..transforms import CoordinatedTransform, ForwardTransform, GradientTransform, Transform
from . import _registry
from ._hooks import BeginHook, InputHook, OutputHook
from ._params import ParamsHook
from ._registry import Registered
from .handle import Handle, MixupHandle
from .observer import Observer

__all__ = ["attach", "detach", "handles", "select", "summary", "observe", "forward_transforms",
           "Summary", "SummaryRow", "ObserverHandle"]

_WHERE = ("output", "input", "params")


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
        SelectorError: a selector (or any element of a list) matches nothing; the message names
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
        SelectorError: a selector matches nothing (a ``ValueError``, as all plugdrop errors).
        AttachError: a bad ``where``, a forward transform with
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
        raise AttachError(f"where must be one of {_WHERE}, got {where!r}")
    if element is not None and (isinstance(element, bool)
                                or not isinstance(element, (int, str))):
        raise TypeError(f"element must be an int, a str or None, got {element!r}")
    if where == "params":
        if not isinstance(transform, GradientTransform):
            raise AttachError(
                f"where='params' takes a gradient transform (ClipGradNorm, ClipGradValue, "
                f"ScaleGrad, GradNoise); {type(transform).__name__} acts on activations: use "
                f"where='output' or 'input'"
            )
        if element is not None:
            raise AttachError("element= does not apply to where='params'")
    if transform._attached:
        raise AttachError(
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
                raise AttachError(
                    f"where='params' on layer {name!r} ({type(module).__name__}), which has no "
                    f"parameters; select modules with weights, or use where='output'"
                )
            param_sets.append(owned)

    coordinated = isinstance(transform, CoordinatedTransform)
    if coordinated and where != "output":
        raise AttachError(f"{type(transform).__name__} mixes layer outputs (and the model input "
                          f"when the root '' is selected): leave where='output'")
    hooks: list[Registered] = []
    transform._bind_layers([n for n, _ in selected])
    try:
        if isinstance(transform, CoordinatedTransform):
            root = _selection.walk(model)[0].module
            begin = BeginHook(transform, "", None)
            hooks.append(Registered(root, begin, root.register_forward_pre_hook(begin,
                                                                                prepend=True)))
        for i, (name, module) in enumerate(selected):
            device = _registry.module_device(module)
            transform._prepare(device)
            if where == "params" and isinstance(transform, GradientTransform):
                params = ParamsHook(transform, name, param_sets[i], device)
                hooks.append(Registered(module, params, module.register_forward_pre_hook(params)))
                params.install(module)
            elif where == "input" or (coordinated and name == ""):  # the root: mix the input
                pre = InputHook(transform, name, element, device)
                hooks.append(Registered(module, pre, module.register_forward_pre_hook(
                    pre, with_kwargs=True)))
            else:
                post = OutputHook(transform, name, element, device)
                hooks.append(Registered(module, post, module.register_forward_hook(post)))
    except BaseException:
        for entry in hooks:
            _registry.remove(entry)
        raise
    transform._attached = True
    _registry.invalidate_compiled()
    cls = MixupHandle if coordinated else Handle
    return cls(transform, where, [n for n, _ in selected], hooks)


def detach(model: nn.Module) -> int:
    """Remove everything plugdrop attached to ``model``: transforms and observers (given a
    copy, the copy's own). Returns the number of hooks removed; handles of removed attachments
    become inert.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"detach() needs a torch.nn.Module, got {type(model).__name__}")
    count = 0
    for module in _selection.iter_modules(model):
        for _, hook in list(_registry.iter_hooks(module)):
            _registry.mark_detached(hook.target)
            count += _registry.remove(Registered(module, hook, None))
    if count:
        _registry.invalidate_compiled()
    return count


def handles(model: nn.Module) -> list[Handle]:
    """Handles for the attachments found on ``model``: one per transform, in module order.

    Use it on a copy (``copy.deepcopy``, ``torch.load``, an EMA model) to step, bind, save or
    remove the copy's own attachments, which no handle returned by :func:`attach` refers to.
    Coordinated transforms (:class:`ManifoldMixup`) get a :class:`MixupHandle`; observers
    (``watch``, ``capture``...) are not attachments and get none.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"handles() needs a torch.nn.Module, got {type(model).__name__}")
    groups: dict[int, tuple[Transform, list[str], list[str], list[Registered]]] = {}
    for name, module, hook in _registry.scan(model):
        t = hook.target
        if not isinstance(t, Transform):
            continue  # observers are not handles
        group = groups.setdefault(id(t), (t, [], [], []))
        if not isinstance(hook, BeginHook):
            group[1].append(hook.where)
            if name not in group[2]:
                group[2].append(name)
        group[3].append(Registered(module, hook, None))
    out = []
    for t, wheres, layers, hooks in groups.values():
        where = "output" if isinstance(t, CoordinatedTransform) else wheres[0]
        cls = MixupHandle if isinstance(t, CoordinatedTransform) else Handle
        out.append(cls(t, where, layers, hooks))
    return out


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
    :func:`plugdrop.by_depth`, show each layer's own) and the number of times the transform ran
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
            out.append(SummaryRow(name, repr(t), hook.where, t.values(name), t.step_count,
                                  calls=hook.count()))
        else:
            out.append(SummaryRow(name, repr(t), hook.where, {}, 0, "observer"))
    return out


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
    for name, module in _selection.resolve(model, selector, exclude):
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
