"""The attachment API: :func:`attach`, :func:`detach`, :func:`is_attached` and :func:`handles`
(selection, summaries and observers are in :mod:`.selecting`, :mod:`.summary` and
:mod:`.observing`)."""

from __future__ import annotations

import torch.nn as nn

from .. import _selection
from .._selection import Selector
from ..errors import AttachError
from ..transforms import CoordinatedTransform, GradientTransform, Transform, catalog
from . import _registry, _skip
from ._hooks import BeginHook, EntryHook, ExitHook, InputHook, OutputHook
from ._params import ParamsHook
from ._registry import Registered
from .handle import Handle, MixupHandle
from .selecting import AttachSite, resolve

__all__ = ["attach", "detach", "handles", "is_attached"]

_WHERE = ("output", "input", "params")


def attach(model: nn.Module, selector: Selector, transform: Transform, *,
           exclude: Selector | None = None, where: str = "output",
           element: int | str | None = None) -> Handle:
    """Attach ``transform`` to every module of ``model`` that ``selector`` picks.

    Args:
        model: any ``nn.Module`` (wrapped by DDP or ``torch.compile`` or not).
        selector: which modules; see :func:`select`.
        transform: a forward transform ({forward}), a gradient transform ({gradient}) or a
            coordinated one ({coordinated}; a :class:`MixupHandle` is returned). One
            transform object serves one attachment; its schedules are shared by all the
            selected layers.
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
                f"where='params' takes a gradient transform ({', '.join(catalog('gradient'))}); "
                f"{type(transform).__name__} acts on activations: use where='output' or "
                f"'input'"
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
    selected = resolve(model, selector, exclude)
    transform._check_layers(selected, AttachSite(model, where))
    skips = _skip.plan(model, selected, where, element) if _skip.wanted(transform) else None

    param_sets: list[list[str]] = []
    if where == "params":
        # parameters of excluded modules stay untouched, even under a selected ancestor
        seen: set[int] = set() if exclude is None else {
            id(p) for _, m in resolve(model, exclude, None) for p in m.parameters()}
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
        if skips is not None:
            _skip.hang(transform, skips, hooks)
        for i, (name, module) in enumerate(selected if skips is None else ()):
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


def _classes(kind: str) -> str:
    return ", ".join(f":class:`{n}`" for n in catalog(kind)
                     if kind != "forward" or n not in catalog("coordinated"))


# The lists of transforms in the docstring come from the catalog, never written by hand.
attach.__doc__ = (attach.__doc__ or "").replace("{forward}", _classes("forward")).replace(
    "{gradient}", _classes("gradient")).replace("{coordinated}", _classes("coordinated"))


def detach(model: nn.Module, selector: Selector | None = None, *,
           exclude: Selector | None = None) -> int:
    """Remove what plugdrop attached to ``model``: transforms and observers (given a copy,
    the copy's own).

    Args:
        model: any ``nn.Module`` (wrappers seen through).
        selector: only what hangs on the modules it picks (see :func:`select`); default
            ``None``: everything. An attachment that spans more layers keeps the others (its
            handle then acts there only); a coordinated transform
            (:class:`ManifoldMixup`, :class:`PatchUp`) whose layers are all removed loses its
            begin hook on the root too.
        exclude: modules to leave alone, in the forms of ``selector``.

    Returns:
        The number of hooks removed. Handles of attachments removed whole become inert, and
        their transforms may be attached again.

    Raises:
        TypeError: ``model`` is not a module.
        SelectorError: ``selector`` or ``exclude`` matches nothing.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"detach() needs a torch.nn.Module, got {type(model).__name__}")
    if selector is None and exclude is not None:
        selector = "**"
    picked = None if selector is None else {
        id(m) for _, m in resolve(model, selector, exclude)}
    removed: list[object] = []
    for module in _selection.iter_modules(model):
        if picked is not None and id(module) not in picked:
            continue
        for _, hook in list(_registry.iter_hooks(module)):
            if picked is not None and isinstance(hook, BeginHook):
                continue  # the root's begin hook goes with the transform's last layer
            if _registry.remove(Registered(module, hook, None)):
                removed.append(hook.target)
    # what still hangs: a coordinated transform's begin hook without any layer goes too, and
    # a skip-compute branch's entry hook without its exit hook
    left = [h for _, _, h in _registry.scan(model) if not isinstance(h, BeginHook)]
    on_layers = {id(h.target) for h in left}
    exits = {id(h.pending) for h in left if isinstance(h, ExitHook)}
    for module in _selection.iter_modules(model):
        for _, hook in list(_registry.iter_hooks(module)):
            orphan = id(hook.pending) not in exits if isinstance(hook, EntryHook) else (
                isinstance(hook, BeginHook) and id(hook.target) not in on_layers)
            if orphan and _registry.remove(Registered(module, hook, None)):
                removed.append(hook.target)
    for target in removed:
        if id(target) not in on_layers:
            _registry.mark_detached(target)
    if removed:
        _registry.invalidate_compiled()
    return len(removed)


def is_attached(model: nn.Module, name: str | None = None) -> bool:
    """Whether anything plugdrop attached (a transform or an observer) hangs on ``model``, or,
    given ``name``, on that module (a qualified name as :func:`select` gives it; wrappers seen
    through).

    Raises:
        TypeError: ``model`` is not a module.
        SelectorError: no module is called ``name`` (the message names the closest).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"is_attached() needs a torch.nn.Module, got {type(model).__name__}")
    if name is None:
        return any(True for _ in _registry.scan(model))
    picked = {id(m) for _, m in resolve(model, name, None)}
    return any(id(m) in picked for _, m, _ in _registry.scan(model))


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
