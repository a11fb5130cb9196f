"""What plugdrop hung on a model, found by type: plugdrop's hooks among a module's forward
hooks, their removal, and the grouping of a copy's hooks into attachments.

A handle removes the hooks it registered through their ``RemovableHandle``\\ s; the scan here is
for what no handle refers to: a copy (``copy.deepcopy``, ``torch.load``, an EMA model) and
:func:`plugdrop.detach`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import torch
import torch.nn as nn
from torch.utils.hooks import RemovableHandle

from .. import _compat, _selection
from ..transforms import Transform
from ._hooks import Hook
from ._params import ParamsHook


class Registered(NamedTuple):
    """One hook of an attachment: where it hangs, and its handle when this process made it."""

    module: nn.Module
    hook: Hook
    removable: RemovableHandle | None


def iter_hooks(module: nn.Module) -> Iterator[tuple[int, Hook]]:
    """``(key, hook)`` for every plugdrop hook registered on ``module``, pre-hooks first."""
    for d in _compat.hook_dicts(module):
        for key, hook in list(d.items()):
            if isinstance(hook, Hook):
                yield key, hook


def has_hook(module: nn.Module, hook: Hook) -> bool:
    return any(h is hook for _, h in iter_hooks(module))


def remove(entry: Registered) -> bool:
    """Take one hook off; returns whether it was still there."""
    module, hook, removable = entry
    found = False
    for key, h in iter_hooks(module):
        if h is hook:
            found = True
            if removable is not None and removable.id == key:
                removable.remove()
            else:
                _compat.pop_hook(module, key)
    if isinstance(hook, ParamsHook):
        hook.uninstall()
    return found


def scan(model: nn.Module) -> Iterator[tuple[str, nn.Module, Hook]]:
    """``(canonical layer name, module, hook)`` for every plugdrop hook on ``model``, in
    ``named_modules()`` order (wrappers seen through)."""
    for entry in _selection.walk(model):
        for _, hook in iter_hooks(entry.module):
            yield entry.name, entry.module, hook


def module_device(module: nn.Module) -> torch.device:
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return torch.device("cpu")


def mark_detached(target: object) -> None:
    if isinstance(target, Transform):
        target._attached = False


_compiled_frames_seen = 0


def invalidate_compiled() -> None:
    """Make hooks added to (or removed from) a model that ``torch.compile`` already traced
    take effect.

    Dynamo does not guard on the hooks of modules that had none when it traced them, so a
    compiled model would silently keep running without a new attachment. If anything was
    compiled in this process since the last time we looked, the compiled code is dropped
    (``torch.compiler.reset()``) and the next call recompiles with the hooks in place. A
    process that never compiles pays nothing.

    Why the whole process and not only the target model: dynamo keeps its compiled code in a
    cache per *code object* (``Conv2d.forward``, ``Block.forward``...), shared by every
    instance of the class in every model, with the instances told apart only by guards;
    torch has no public call that drops the entries of one model (``torch.compiler.reset``
    and ``reset_code_caches`` are process-wide), and a stale entry cannot be recognised as
    ours without reading dynamo's private cache structures. So other compiled models
    recompile once after an attach, and only when something was compiled since the last
    attach/detach; compile after attaching (or attach everything first) to avoid it.
    """
    global _compiled_frames_seen
    frames = _compat.compiled_frames()
    if frames is None:  # pragma: no cover - dynamo's counter moved: be safe, reset
        frames = _compiled_frames_seen + 1
    if frames > _compiled_frames_seen:
        torch.compiler.reset()
        _compiled_frames_seen = frames
