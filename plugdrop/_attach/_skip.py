"""``DropPath(skip_compute=True)``: each selected residual branch runs on its kept samples only.

For every selected branch this module finds its span (:mod:`._spans`: the entry the branch
starts from, the modules it runs), refuses in one line what would make the result differ from
plain DropPath's, and hangs a pair of hooks sharing one :class:`~._hooks.Pending`: an
:class:`~._hooks.EntryHook` (forward pre-hook) on the entry and an :class:`~._hooks.ExitHook`
(forward hook) on the exit, the selected layer.
"""

from __future__ import annotations

from typing import Any

import torch.nn as nn

from ..errors import AttachError
from ..transforms import CoordinatedTransform, Transform
from . import _registry, _residual, _spans
from ._hooks import EntryHook, ExitHook, Pending
from ._registry import Registered
from .selecting import bare

__all__ = ["Plan", "hang", "mixes_samples", "plan", "wanted"]

#: BatchNorm classes, whose training forward normalizes with the batch's statistics
_BATCH_NORMS: tuple[type, ...] = (
    nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm,
    nn.LazyBatchNorm1d, nn.LazyBatchNorm2d, nn.LazyBatchNorm3d)

Plan = tuple[str, nn.Module, str, nn.Module, _spans.Span]


def wanted(transform: Transform) -> bool:
    """Whether ``transform`` runs branches on their kept samples (``skip_compute=True``)."""
    return getattr(transform, "skip_compute", False) is True


def mixes_samples(module: nn.Module) -> str | None:
    """How ``module`` makes one sample's output depend on the others in training (``None``:
    it does not, as far as plugdrop knows)."""
    if isinstance(module, _BATCH_NORMS):
        return "normalizes with the statistics of its batch in training"
    if isinstance(module, nn.MultiheadAttention) and not module.batch_first or isinstance(
            module, nn.RNNBase) and not module.batch_first:
        return "has batch_first=False: its batch is dim 1, not dim 0"
    stats = getattr(module, "running_mean", None) is not None or getattr(
        module, "running_var", None) is not None
    if stats and getattr(module, "momentum", None) is not None and getattr(
            module, "track_running_stats", True):
        return "keeps running statistics of its batches"
    return None


def _refuse(name: str, module: nn.Module, why: str) -> AttachError:
    return AttachError(f"DropPath(skip_compute=True) cannot run branch {name!r} "
                       f"({type(module).__name__}) on its kept samples alone: {why}; use "
                       f"skip_compute=False there")


def _entries_in_use(model: nn.Module) -> set[int]:
    return {id(m) for _, m, h in _registry.scan(model) if isinstance(h, EntryHook)}


def plan(model: nn.Module, selected: list[tuple[str, nn.Module]], where: str,
         element: Any) -> list[Plan]:
    """``(exit, exit module, entry, entry module, span)`` of each selected branch.

    Raises:
        AttachError: ``where`` or ``element`` given; a layer that is not a residual branch
            plugdrop found; a branch without an entry, that takes more than the stream, whose
            entry or exit runs twice per forward, or that runs a module mixing samples
            (BatchNorm...), or a mixing transform; a branch whose entry another
            skip-compute branch already uses. One line, naming the module and its class.
    """
    if where != "output" or element is not None:
        raise AttachError("DropPath(skip_compute=True) acts on residual branches' outputs: "
                          "leave where='output' and element=None")
    root = bare(model)
    spans = _spans.known(root)
    if spans is None:
        _residual.try_symbolic(root)
        spans = _spans.known(root) or {}
    named = _spans.modules(root)
    in_use = _entries_in_use(model)
    mixers = {id(m): h.target for _, m, h in _registry.scan(model)
              if isinstance(h.target, CoordinatedTransform)}
    out: list[Plan] = []
    for name, module in selected:
        span = spans.get(name)
        if span is None:
            found = _residual.known(root) or []
            near = [b for b in found if b.startswith(name + ".")] or found
            hint = (f"the residual branches are e.g. {', '.join(map(repr, near[:3]))}"
                    if near else "no residual branch was found (call "
                    "plugdrop.residual_branches(model, example_input))")
            raise _refuse(name, module, f"it is not a residual branch plugdrop found ({hint}; "
                                        f"selector 'residual:')")
        if span.entry is None or span.problem is not None or span.entry not in named or any(
                part not in named for part in span.body):
            raise _refuse(name, module, span.problem or "no entry")
        entry = named[span.entry]
        # the body's modules and everything inside them (a torch.nn container such as
        # TransformerEncoderLayer is one node of a torch.fx graph)
        for part in span.body:
            for inner, sub in named[part].named_modules(prefix=part):
                why = mixes_samples(sub)
                if why is None and id(sub) in mixers:
                    why = (f"{type(mixers[id(sub)]).__name__} is attached there and mixes "
                           f"samples")
                if why is not None:
                    raise _refuse(name, module, f"it runs {inner!r} ({type(sub).__name__}), "
                                                f"which {why}")
        if id(entry) in in_use:
            raise _refuse(name, module, f"its entry {span.entry!r} ({type(entry).__name__}) "
                                        f"already starts another skip-compute branch")
        in_use.add(id(entry))
        out.append((name, module, span.entry, entry, span))
    return out


def hang(transform: Transform, plans: list[Plan], hooks: list[Registered]) -> None:
    """Register the entry and exit hooks of every planned branch, appending them to
    ``hooks`` (which the caller removes if anything fails)."""
    for name, module, entry_name, entry, span in plans:
        pending = Pending()
        device = _registry.module_device(module)
        transform._prepare(device)
        out = ExitHook(transform, name, pending, device)
        hooks.append(Registered(module, out, module.register_forward_hook(out)))
        pre = EntryHook(transform, name, module, entry_name, span.arg, span.empty_ok, pending,
                        device)
        hooks.append(Registered(entry, pre, entry.register_forward_pre_hook(
            pre, with_kwargs=True)))
