"""Every private name of torch that plugdrop relies on, in one place. Private.

torch gives no public way to list or remove a module's hooks by identity, to tell whether
anything was compiled since a point in time, or to read a GradScaler's scale without a host
synchronization, and wrappers keep the wrapped module under private attribute names. Each such
name is used here and nowhere else; ``tests/test_compat.py`` checks that every one still exists
in the installed torch, so a rename fails a test instead of silently disabling a feature.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

import torch
import torch.nn as nn

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["WRAPPERS", "HOOK_DICTS", "hook_dicts", "pop_hook", "compiled_frames",
           "scale_async", "mark_static", "mark_dynamic", "constant_result"]

#: Wrapper class name -> attribute holding the wrapped module (DDP, DataParallel,
#: ``torch.compile``'s OptimizedModule, activation-checkpoint / offload wrappers, FSDP1).
WRAPPERS: dict[str, str] = {
    "DistributedDataParallel": "module",
    "DataParallel": "module",
    "OptimizedModule": "_orig_mod",
    "CheckpointWrapper": "_checkpoint_wrapped_module",
    "OffloadWrapper": "_checkpoint_wrapped_module",
    "FullyShardedDataParallel": "_fsdp_wrapped_module",
}

#: The dicts of ``nn.Module`` that hold forward hooks and forward pre-hooks, by id.
HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks")
#: Per-hook flags kept beside them (keyed by the same id).
_HOOK_FLAG_DICTS = ("_forward_hooks_with_kwargs", "_forward_hooks_always_called",
                    "_forward_pre_hooks_with_kwargs")


def hook_dicts(module: nn.Module) -> Iterator[dict[int, Any]]:
    """The module's forward pre-hook and forward hook dicts (``{id: hook}``)."""
    for name in HOOK_DICTS:
        yield getattr(module, name)


def pop_hook(module: nn.Module, key: int) -> None:
    """Remove the forward (pre-)hook registered under ``key`` and its flags: what
    ``RemovableHandle.remove()`` does, for hooks whose handle is gone (a copy's)."""
    for name in HOOK_DICTS + _HOOK_FLAG_DICTS:
        getattr(module, name, {}).pop(key, None)


def constants() -> contextlib.AbstractContextManager[None]:
    """Where tensors kept across calls are made (cached scale maps, 0-dim settings, tensors
    of ones): outside inference mode (an inference tensor cannot enter a recorded graph),
    without autograd, and outside any ``torch.func`` transform (made inside ``jvp`` or
    ``vmap``, a tensor is the transform's wrapper, without storage, and dead once it
    returns). While ``torch.compile`` traces, nothing: a tensor made there is a graph value
    (dynamo keeps it, then treats it as an input), and dynamo cannot trace the construction
    of ``_DisableFuncTorch`` on every torch (2.11's fails with "Attempted to call function
    marked as skipped"; torch 2.4's cannot trace a generator's context manager at all)."""
    if torch.compiler.is_compiling():
        return contextlib.nullcontext()
    return _constants()


@contextlib.contextmanager
def _constants() -> Iterator[None]:
    with torch.inference_mode(False), torch.no_grad(), torch._C._DisableFuncTorch():
        yield


def functorch_active() -> bool:
    """Whether a ``torch.func`` transform (jvp, vjp, grad, vmap) is running: its custom
    Functions must be written in the ``setup_context`` style, whose ``apply`` costs about
    15 us more per call (it binds the arguments with ``inspect``)."""
    return bool(torch._C._are_functorch_transforms_active())


def forward_ad_active() -> bool:
    """Whether a forward-mode AD level (``torch.autograd.forward_ad.dual_level``) is open: a
    dual tensor may be passing through, with its tangent carried by autograd Functions even
    where grad mode is off."""
    return torch.autograd.forward_ad._current_level >= 0


def compiled_frames() -> int | None:
    """How many frames dynamo has compiled in this process so far (``None`` if unknown)."""
    try:
        from torch._dynamo.utils import counters
    except Exception:  # pragma: no cover - dynamo moved
        return None
    return int(counters["frames"].get("total", 0))


def scale_async(scaler: Any) -> torch.Tensor | None:
    """A ``GradScaler``'s current scale as a device tensor, without synchronizing (``None``
    when the scaler keeps none yet or has no such method)."""
    get = getattr(scaler, "_get_scale_async", None)
    return get() if get is not None else None


def mark_static(t: torch.Tensor) -> torch.Tensor:
    """Mark a small state tensor that compiled code updates in place (a call counter) as a
    static input, as compiled optimizers do with their states: inductor's CUDA graphs then
    accept the in-place update instead of skipping the graph for a mutated input."""
    mark = getattr(getattr(torch, "_dynamo", None), "mark_static_address", None)
    if mark is not None:
        mark(t, guard=False)
    return t


def mark_dynamic(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Tell ``torch.compile`` that dim ``dim`` of ``t`` varies from call to call (the kept
    samples of a skip-compute branch), so that the graphs that take it are traced once with a
    symbolic size instead of once per size. A hint (``maybe_mark_dynamic``): sizes 0 and 1
    still get graphs of their own."""
    mark = getattr(getattr(torch, "_dynamo", None), "maybe_mark_dynamic", None)
    if mark is not None:
        mark(t, dim)
    return t


#: the attribute ``torch.compiler.assume_constant_result`` sets on a function (dynamo's mark)
_CONSTANT_MARK = "_dynamo_marked_constant"


def constant_result(fn: Callable[P, R]) -> Callable[P, R]:
    """``torch.compiler.assume_constant_result``, without importing dynamo: the decorator only
    marks the function (what dynamo reads when it traces a call), and importing dynamo to apply
    it costs seconds at ``import plugdrop``, which no eager user should pay."""
    setattr(fn, _CONSTANT_MARK, True)
    return fn
