"""The attachment API: select, attach, detach, handles, summary, and observe (for
:mod:`plugdrop.observe`)."""

from __future__ import annotations

import re
import warnings
from typing import Any, NamedTuple

import torch.nn as nn

from .. import _selection
from .._selection import Selector
from .._table import format_table
from ..errors import AttachError, SelectorError
from ..transforms import (
    CoordinatedTransform,
    DropPath,
    ForwardTransform,
    GradientTransform,
    Transform,
)
from . import _registry, _residual
from ._hooks import BeginHook, InputHook, OutputHook
from ._params import ParamsHook
from ._registry import Registered
from .handle import Handle, MixupHandle
from .observer import Observer

__all__ = ["attach", "detach", "handles", "select", "summary", "observe", "forward_transforms",
           "residual_branches", "known_residual_branches", "Summary", "SummaryRow", "ObserverHandle",
           "NotResidualWarning"]


def known_residual_branches(model: nn.Module) -> list[str] | None:
    """The branches :func:`residual_branches` found for ``model`` (``None``: not analysed)."""
    return _residual.known(_bare(model))


def _bare(model: nn.Module) -> nn.Module:
    """The model inside its wrappers (DDP, torch.compile...)."""
    return next(e.module for e in _selection.walk(model) if not e.wrapper)


class NotResidualWarning(UserWarning):
    """DropPath attached to a module that is not a residual branch: it then drops the whole
    sample's features instead of skipping a block."""


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
        return _residual.find_symbolic(_bare(model))
    return _residual.find(_bare(model), example_input)


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
        found = _residual.known(_bare(model))
        if found is None:
            try:
                found = _residual.find_symbolic(_bare(model))
            except AttachError as e:
                raise SelectorError(
                    f"selector {selector!r} needs the residual branches of the model: {e}"
                ) from None
        return _ResidualSelector(selector, found)
    if isinstance(selector, (list, set, frozenset)):
        return [_expand(model, s) for s in selector]
    return selector


def _resolve(model: nn.Module, selector: Selector, exclude: Selector | None
             ) -> list[tuple[str, nn.Module]]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return _selection.resolve(model, _expand(model, selector),
                              None if exclude is None else _expand(model, exclude))


def _check_residual(model: nn.Module, transform: Transform, layers: list[str]) -> None:
    """Warn when DropPath goes on modules that are not residual branches (when known)."""
    if not isinstance(transform, DropPath):
        return
    found = _residual.known(_bare(model))
    if found is None:
        found = _residual.try_symbolic(_bare(model))
    if not found:
        return
    wrong = [n for n in layers if not _residual.equivalent(_bare(model), n)]
    if not wrong:
        return
    first = wrong[0]
    near = [b for b in found if b.startswith(first + ".")] or [
        b for b in found if b.rsplit(".", 1)[0] == first.rsplit(".", 1)[0]] or found
    warnings.warn(
        f"DropPath attached to {len(wrong)} module(s) that are not residual branches: "
        f"{', '.join(map(repr, wrong[:6]))}{' ...' if len(wrong) > 6 else ''}. There it drops "
        f"the whole sample's features; the residual branches are e.g. "
        f"{', '.join(map(repr, near[:4]))} (selector 'residual:', see "
        f"plugdrop.residual_branches)", NotResidualWarning, stacklevel=3)

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
    return [name for name, _ in _resolve(model, selector, exclude)]


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
            module's parameters (those of its children included), each tensor on its own;
            the parameters of excluded modules are left alone even when an ancestor is
            selected (the root ``""`` with ``exclude="head"``: every parameter but the
            head's).
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
    elif isinstance(transform, GradientTransform) and transform.params_only:
        raise AttachError(f"{type(transform).__name__} acts on the gradients of parameters (it "
                          f"needs the parameter itself): attach it with where='params'")
    if transform._attached:
        raise AttachError(
            f"this {type(transform).__name__} object is already attached; every attach needs "
            f"its own transform object (or select all layers in one attach with a list)"
        )
    selected = _resolve(model, selector, exclude)
    if isinstance(transform, ForwardTransform) and where == "output":
        for name, module in selected:
            transform._check_layer(name, module, _bare(model))

    param_sets: list[list[str]] = []
    if where == "params":
        # parameters of excluded modules stay untouched, even under a selected ancestor
        seen: set[int] = set() if exclude is None else {
            id(p) for _, m in _resolve(model, exclude, None) for p in m.parameters()}
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

    _check_residual(model, transform, [n for n, _ in selected])
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
    for name, module in _resolve(model, selector, exclude):
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
