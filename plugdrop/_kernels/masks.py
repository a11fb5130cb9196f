"""DropPath's and Dropout's dispatch, in one place: per-sample and per-element Bernoulli masks,
and the hooks' eager fast path for DropPath. Private.

Dropout takes sparse draws (O(p * numel) on CPU, a boolean mask saved) where they are cheaper,
else torch's own ``native_dropout``; DropPath multiplies by a per-sample multiplier drawn in
two torch calls from a cached tensor of ones.

DropPath with ``skip_compute=True`` has its own kernels: :mod:`.kept`.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _layout
from ..errors import ShapeError
from . import autograd as KA
from . import draws

__all__ = ["drop_path", "drop_path_cached", "dropout", "remember_batched"]

Number = float | torch.Tensor


def dropout(x: torch.Tensor, p: Number) -> torch.Tensor:
    """:func:`plugdrop.functional.dropout` with a checked ``p``."""
    if not isinstance(p, torch.Tensor) and p == 0.0:
        return x
    if isinstance(p, torch.Tensor):
        # drawn in the order of x's indices, whatever its memory order (rand_like would draw
        # in memory order: another mask for a channels-last x)
        keep = torch.rand(x.shape, dtype=torch.float32, device=x.device) >= p
        return x * torch.where(keep, 1.0 / (1.0 - p), 0.0).to(x.dtype)
    if draws.use_sparse(x.numel(), p, x.device):
        keep = ~draws.bernoulli(tuple(x.shape), p, x.device)
        scale = torch.full((), 1.0 / (1.0 - p), device=x.device)
        return KA.MaskMul.apply(x, keep, scale, None)
    if not x.is_contiguous():
        # torch's dropout draws its mask in x's memory order: the mask of the contiguous copy,
        # the same for every memory order of the same values
        return _layout.laid_out_as(torch.native_dropout(x.contiguous(), p, True)[0], x)
    # torch's own dropout, one call: it saves a boolean mask for the backward (1 byte per
    # element), which is differentiable again and has a forward-mode derivative.
    return torch.native_dropout(x, p, True)[0]


def drop_path(x: torch.Tensor, p: Number, scale_by_keep: bool) -> torch.Tensor:
    """:func:`plugdrop.functional.drop_path` with a checked ``p``."""
    if x.dim() == 0:
        raise ShapeError("drop_path needs a batch dimension, got a 0-dim tensor")
    if not isinstance(p, torch.Tensor) and p == 0.0:
        return x
    shape = (x.shape[0],) + (1,) * (x.dim() - 1)
    return x * draws.keep_multiplier(x, shape, p, scale_by_keep)


#: (shape, dtype, device) of the float inputs with a batch dim that DropPath's general path
#: took without raising -> the tensor of ones their per-sample mask is drawn from (with the
#: scale of the last ``p``: :class:`.draws.Ones`). Shared by all transform objects, never
#: copied or pickled with them.
_BATCHED: dict[tuple[Any, ...], draws.Ones] = {}


def drop_path_cached(x: torch.Tensor, p: float, scale_by_keep: bool) -> torch.Tensor | None:
    """DropPath in eager mode from a hook, for a float tensor of a shape met before: its
    per-sample multiplier in two torch calls (the per-call cost is the few Python calls around
    three small ops). ``None`` for a shape not met yet: the caller takes its checked path
    (which raises on a 0-dim or integer tensor, naming the layer), then
    :func:`remember_batched`."""
    ones = _BATCHED.get((x.shape, x.dtype, x.device))
    if ones is None:
        return None
    if p == 0.0:
        return x
    return x * ones.mult(p, scale_by_keep)


def remember_batched(x: torch.Tensor) -> None:
    """Record that DropPath's checked path took ``x``'s shape (float tensors only)."""
    if x.is_floating_point():
        draws.remember_ones(_BATCHED, (x.shape, x.dtype, x.device),
                            (x.shape[0],) + (1,) * (x.dim() - 1))
