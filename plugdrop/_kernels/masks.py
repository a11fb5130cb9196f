"""DropPath's and Dropout's dispatch, in one place: per-sample and per-element Bernoulli masks,
and the hooks' eager fast path for DropPath. Private.

Dropout takes sparse draws (O(p * numel) on CPU, a boolean mask saved) where they are cheaper,
else torch's own ``native_dropout``; DropPath multiplies by a per-sample multiplier drawn in
two torch calls from a cached tensor of ones.

DropPath with ``skip_compute=True`` (:func:`draw_kept`, :func:`take_rows`, :func:`put_rows`):
the samples a residual branch keeps are drawn on the host, from the CPU generator, so that
their number, which sets the shapes of the branch's computation, is known without reading
the device: on the CPU the draw is the very one of plain DropPath (the same calls on the same
generator), on CUDA it is copied to the device from pinned memory without a synchronization.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from .. import _layout
from ..errors import ShapeError
from . import autograd as KA
from . import draws

__all__ = ["Kept", "draw_kept", "drop_path", "drop_path_cached", "dropout", "put_rows",
           "remember_batched", "take_rows"]

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
#: took without raising -> the tensor of ones their per-sample mask is drawn from. Shared by
#: all transform objects, never copied or pickled with them.
_BATCHED: dict[tuple[Any, ...], torch.Tensor] = {}


def drop_path_cached(x: torch.Tensor, p: float, scale_by_keep: bool) -> torch.Tensor | None:
    """DropPath in eager mode from a hook, for a float tensor of a shape met before: its
    per-sample multiplier in two torch calls (the per-call cost is the few Python calls around
    three small ops). ``None`` for a shape not met yet: the caller takes its checked path
    (which raises on a 0-dim or integer tensor, naming the layer), then
    :func:`remember_batched`."""
    key = (x.shape, x.dtype, x.device)
    ones = _BATCHED.get(key)
    if ones is None:
        return None
    if p == 0.0:
        return x
    return x * draws.keep_mult_from(ones, p, scale_by_keep, key[1], key[2])


def remember_batched(x: torch.Tensor) -> None:
    """Record that DropPath's checked path took ``x``'s shape (float tensors only)."""
    if x.is_floating_point():
        draws.remember_ones(_BATCHED, (x.shape, x.dtype, x.device),
                            (x.shape[0],) + (1,) * (x.dim() - 1))


# ------------------------------------------------------------------ DropPath, skip_compute


class Kept(NamedTuple):
    """The samples of one forward that run a residual branch (DropPath with
    ``skip_compute=True``), drawn at the branch's entry, used again at its exit."""

    #: the rows of the stream the branch runs on, on its device (``None``: all of them)
    rows: torch.Tensor | None
    #: samples in the stream
    batch: int
    #: samples kept (0: none; the branch then runs on ``rows``, empty or one stand-in row,
    #: and gives zeros)
    kept: int
    #: multiplier of the kept samples' outputs: ``1 / (1 - p)`` rounded to their dtype, as
    #: plain DropPath multiplies by it (``None``: 1)
    scale: float | None


#: (p, dtype) -> ``1 / (1 - p)`` rounded to dtype; bounded by clearing
_SCALES: dict[tuple[float, torch.dtype], float] = {}
#: device -> a one-row index (the stand-in row of a draw that keeps nothing) and an empty one
_ROW0: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def _scale(p: float, dtype: torch.dtype) -> float:
    """``1 / (1 - p)`` rounded to ``dtype``: the factor plain DropPath's multiplier holds."""
    key = (p, dtype)
    value = _SCALES.get(key)
    if value is None:
        if len(_SCALES) >= 512:
            _SCALES.clear()
        value = _SCALES[key] = float(torch.tensor(1.0 / (1.0 - p), dtype=dtype))
    return value


def _on(index: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``index`` (a CPU tensor) on ``device``; to CUDA from pinned memory, asynchronously (the
    pinned block is not reused before the copy ran)."""
    if device.type == "cpu":
        return index
    if device.type == "cuda":
        return index.pin_memory().to(device, non_blocking=True)
    return index.to(device)


def padded(count: int, batch: int, pad: int) -> int:
    """The rows a branch runs on for ``count`` kept samples of ``batch``: ``count`` rounded up
    to a multiple of ``pad`` (at most ``batch``), so that a GPU meets at most
    ``batch / pad + 1`` batch sizes instead of ``batch + 1`` (cuDNN and cuBLAS set up for each
    new one)."""
    if pad <= 1 or count in (0, batch):
        return count
    return min(batch, -(-count // pad) * pad)


def draw_kept(x: torch.Tensor, p: float, scale_by_keep: bool, empty_ok: bool,
              pad: int = 1) -> Kept | None:
    """Which samples of ``x`` (batch first) keep their branch, each with probability
    ``1 - p``; ``None`` when ``p`` is 0 (nothing to draw, nothing to change). With ``pad``
    > 1, the rows the branch runs on are the kept ones followed by dropped ones up to
    :func:`padded` rows; the padding's outputs are thrown away at the exit (:func:`put_rows`),
    so the outputs and gradients are those of the kept rows alone.

    Drawn as plain DropPath draws its mask (``torch.bernoulli`` of ones of shape
    ``(B, 1, ..., 1)``), on the CPU generator whatever ``x``'s device: for a CPU ``x`` the same
    mask as plain DropPath from the same generator state. A draw that keeps no sample runs the
    branch on no row when ``empty_ok`` (the branch was seen to take an empty batch), else on
    one stand-in row whose output is dropped (:func:`put_rows` gives zeros either way).
    """
    if p == 0.0:
        return None
    batch = x.shape[0]
    cpu = torch.device("cpu")
    dtype = x.dtype if x.device.type == "cpu" else torch.float32
    ones = draws.ones((batch,) + (1,) * (x.dim() - 1), dtype, cpu)
    index = torch.bernoulli(ones, 1.0 - p).view(-1).nonzero().view(-1)
    count = index.numel()
    scale = _scale(p, x.dtype) if scale_by_keep else None
    if count == batch:
        return Kept(None, batch, batch, scale)
    if count == 0:
        rows = _ROW0.get(x.device)
        if rows is None:
            one = _on(torch.zeros(1, dtype=torch.int64), x.device)
            rows = _ROW0[x.device] = (one, one[:0])
        return Kept(rows[1] if empty_ok else rows[0], batch, 0, scale)
    run = padded(count, batch, pad)
    if run > count:  # the first dropped samples fill the bucket (their outputs are dropped)
        dropped = torch.ones(batch, dtype=torch.bool)
        dropped[index] = False
        index = torch.cat([index, dropped.nonzero().view(-1)[:run - count]])
    return Kept(_on(index, x.device), batch, count, scale)


def _memory_order(t: torch.Tensor) -> list[int] | None:
    """``t``'s dims from outermost to innermost in memory when ``t`` is dense with its batch
    outermost and not contiguous (channels-last maps...); ``None`` otherwise."""
    if t.is_contiguous():
        return None
    order = sorted(range(t.dim()), key=lambda d: (-t.stride()[d], -t.shape[d], d))
    if order[0] != 0 or not t.permute(order).is_contiguous():
        return None
    return order


def _inverse(order: list[int]) -> list[int]:
    inverse = [0] * len(order)
    for i, d in enumerate(order):
        inverse[d] = i
    return inverse


def take_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The rows ``index`` of ``x`` (a gather autograd follows), in ``x``'s memory order."""
    order = _memory_order(x)
    if order is None:
        return x.index_select(0, index)
    return x.permute(order).index_select(0, index).permute(_inverse(order))


def put_rows(y: torch.Tensor, kept: Kept) -> torch.Tensor:
    """The branch's output for the whole batch from ``y``, its output on the kept rows: the
    kept rows of ``y`` scaled by ``kept.scale`` at their places, zeros elsewhere, in ``y``'s
    dtype, device and memory order. The zeros come from ``y`` through autograd (a draw that
    keeps nothing still gives every parameter of the branch a gradient, of zeros), never from
    a tensor outside the graph.

    Raises:
        ShapeError: ``y`` does not have one row per row the branch ran on.
    """
    ran = kept.batch if kept.rows is None else kept.rows.numel()
    if y.dim() == 0 or y.shape[0] != ran:
        raise ShapeError(
            f"the branch ran on {ran} sample(s) but its exit returned shape "
            f"{tuple(y.shape)}: skip_compute needs a branch that keeps its batch dim first")
    if kept.rows is None:
        return y if kept.scale is None else y * kept.scale
    # the kept rows come first; the rest (a stand-in row, a bucket's padding) is dropped
    y, index = y[:kept.kept], kept.rows[:kept.kept]
    shape = (kept.batch,) + tuple(y.shape[1:])
    order = _memory_order(y)
    if order is None:
        out = y.new_zeros(shape)
    else:
        out = y.new_zeros([shape[d] for d in order]).permute(_inverse(order))
    if kept.scale is None:
        return out.index_copy_(0, index, y)
    # 0 + scale * y, in one pass: scale * y rounded once, as plain DropPath's y * multiplier
    return out.index_add_(0, index, y, alpha=kept.scale)
