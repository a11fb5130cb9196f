"""``DropPath(skip_compute=True)``'s kernels: which samples of a batch run a residual branch,
the gather of their rows at the branch's entry, the scatter of the branch's outputs at its exit,
and the rule for when skipping cannot pay. Private.

The kept samples are drawn on the host, from the CPU generator, so that their number, which
sets the shapes of the branch's computation, is known without reading the device: on the CPU
the draw is the very one of plain DropPath (the same ``torch.bernoulli`` call on the same
generator), on an accelerator its row index goes to the device from pinned memory without a
synchronization. Nothing here reads a value of a tensor on the device.

The gather (:class:`_Take`) and the scatter (:class:`_Put`) are one pass each over the rows
the branch runs on, forward and backward, in the tensors' own memory order: the full batch is
touched once per pass, by the zeros that the dropped samples get (where plain DropPath
multiplies the whole batch once); no clone, no slice of the padded rows copied back.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ..errors import ShapeError
from . import draws

__all__ = ["Kept", "draw", "padded", "pays", "put_rows", "take_rows"]


class Kept(NamedTuple):
    """The samples of one forward that run a residual branch (DropPath with
    ``skip_compute=True``), drawn at the branch's entry, used again at its exit."""

    #: the rows of the stream the branch runs on, on its device: the kept samples first, then
    #: any padding (``None``: all rows)
    rows: torch.Tensor | None
    #: samples in the stream
    batch: int
    #: samples kept (0: none; the branch then runs on ``rows``, empty or one stand-in row,
    #: and gives zeros)
    kept: int
    #: multiplier of the kept samples' outputs: ``1 / (1 - p)`` rounded to their dtype, as
    #: plain DropPath multiplies by it (``None``: 1)
    scale: float | None
    #: where skipping does not pay (:func:`pays`), the branch runs on every sample and its
    #: output is multiplied by this per-sample multiplier, shape ``(batch,)`` on the device:
    #: plain DropPath's mask, of the same draw (``None``: the rows above are used)
    mult: torch.Tensor | None = None


#: (p, dtype) -> ``1 / (1 - p)`` rounded to dtype; bounded by clearing
_SCALES: dict[tuple[float, torch.dtype], float] = {}
#: device -> a one-row index (the stand-in row of a draw that keeps nothing) and an empty one
_ROW0: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
_CPU = torch.device("cpu")


def _scale(p: float, dtype: torch.dtype) -> float:
    """``1 / (1 - p)`` rounded to ``dtype``: the factor plain DropPath's multiplier holds."""
    key = (p, dtype)
    value = _SCALES.get(key)
    if value is None:
        if len(_SCALES) >= 512:
            _SCALES.clear()
        value = _SCALES[key] = float(torch.tensor(1.0 / (1.0 - p), dtype=dtype))
    return value


def _on(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``host`` (a CPU tensor) on ``device``; to CUDA from pinned memory, asynchronously (the
    caching host allocator does not reuse the pinned block before the copy ran)."""
    if device.type == "cpu":
        return host
    if device.type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)


def padded(count: int, batch: int, pad: int) -> int:
    """The rows a branch runs on for ``count`` kept samples of ``batch``: ``count`` rounded up
    to a multiple of ``pad`` (at most ``batch``), so that a GPU meets at most
    ``batch / pad + 1`` batch sizes instead of ``batch + 1`` (cuDNN and cuBLAS set up for each
    new one)."""
    if pad <= 1 or count in (0, batch):
        return count
    return min(batch, -(-count // pad) * pad)


def pays(p: float, batch: int, least: float) -> bool:
    """Whether running a branch on its kept samples can pay: the expected number of dropped
    samples, ``p * batch``, is at least ``least`` (DropPath's ``min_dropped``). Below it the
    rows saved do not cover the gather, the scatter and, on a GPU, the padding to a bucket
    (with fewer dropped samples than one bucket, the padded kept rows are mostly the whole
    batch); the branch then runs on every sample under plain DropPath's mask of the same
    draw."""
    return p * batch >= least


def draw(x: torch.Tensor, p: float, scale_by_keep: bool, empty_ok: bool, pad: int = 1,
         skip: bool = True) -> Kept | None:
    """Which samples of ``x`` (batch first) keep their branch, each with probability
    ``1 - p``; ``None`` when ``p`` is 0 (nothing to draw, nothing to change). With ``pad``
    > 1, the rows the branch runs on are the kept ones followed by dropped ones up to
    :func:`padded` rows; the padding's outputs are thrown away at the exit (:func:`put_rows`),
    so the outputs and gradients are those of the kept rows alone. With ``skip=False`` (see
    :func:`pays`) the same draw is returned as plain DropPath's multiplier (``mult``).

    Drawn as plain DropPath draws its mask (``torch.bernoulli`` of ones of shape
    ``(B, 1, ..., 1)``), on the CPU generator whatever ``x``'s device: for a CPU ``x`` the same
    mask as plain DropPath from the same generator state. A draw that keeps no sample runs the
    branch on no row when ``empty_ok`` (the branch was seen to take an empty batch), else on
    one stand-in row whose output is dropped (:func:`put_rows` gives zeros either way).
    """
    if p == 0.0:
        return None
    batch = x.shape[0]
    dtype = x.dtype if x.device.type == "cpu" else torch.float32
    mask = torch.bernoulli(draws.ones((batch,) + (1,) * (x.dim() - 1), dtype, _CPU), 1.0 - p)
    flags = mask.view(-1).tolist()  # a host tensor: no device read
    index = [i for i, f in enumerate(flags) if f]
    count = len(index)
    scale = _scale(p, x.dtype) if scale_by_keep else None
    if count == batch:
        return Kept(None, batch, batch, scale)
    if not skip:
        mult = mask.view(-1).to(x.dtype)
        if scale is not None:
            mult.mul_(scale)
        return Kept(None, batch, count, scale, _on(mult, x.device))
    if count == 0:
        rows = _ROW0.get(x.device)
        if rows is None:
            one = _on(torch.zeros(1, dtype=torch.int64), x.device)
            rows = _ROW0[x.device] = (one, one[:0])
        return Kept(rows[1] if empty_ok else rows[0], batch, 0, scale)
    run = padded(count, batch, pad)
    if run > count:  # the first dropped samples fill the bucket (their outputs are dropped)
        index += [i for i, f in enumerate(flags) if not f][:run - count]
    return Kept(_on(torch.tensor(index, dtype=torch.int64), x.device), batch, count, scale)


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


class _Take(torch.autograd.Function):
    """``x[index]`` along dim 0; the backward gives the first ``count`` rows' gradients back
    at their rows (zeros elsewhere, the padding's gradient, zero, left out): one zero-fill
    and one row copy, where torch's ``index_select`` backward clones the zeros before adding
    into them."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, index: torch.Tensor, count: int) -> torch.Tensor:
        # the index needs no grad and is never written: held as it is, without the saved
        # tensor machinery (host time per call)
        ctx.index, ctx.count, ctx.shape = index, count, x.shape
        return x.index_select(0, index)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        index, count = ctx.index, ctx.count
        out = grad.new_zeros(ctx.shape)
        if count == index.numel():
            return out.index_copy_(0, index, grad), None, None
        return out.index_copy_(0, index[:count], grad[:count]), None, None


class _Put(torch.autograd.Function):
    """The whole batch from ``y``, the branch's output on ``index``'s rows: its first
    ``count`` rows times ``scale`` at their places, zeros elsewhere (one zero-fill, one scaled
    row add); the backward gathers those rows' gradients once, scales them in place and
    zeroes the padding's."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, index: torch.Tensor, count: int, batch: int,
                scale: float | None) -> torch.Tensor:
        ctx.index, ctx.count, ctx.scale = index, count, scale
        out = y.new_zeros((batch,) + tuple(y.shape[1:]))
        if count == 0:
            return out
        rows, src = (index, y) if count == index.numel() else (index[:count], y[:count])
        if scale is None:
            return out.index_copy_(0, rows, src)
        # 0 + scale * y, in one pass: scale * y rounded once, as plain DropPath's y * multiplier
        return out.index_add_(0, rows, src, alpha=scale)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None, None]:
        index, count, scale = ctx.index, ctx.count, ctx.scale
        g = grad.index_select(0, index)
        kept = g
        if count < index.numel():
            g[count:].zero_()  # the padding's (or the stand-in row's) output was dropped
            kept = g[:count]
        if scale is not None:
            kept.mul_(scale)  # plain DropPath's grad * multiplier, rounded once
        return g, None, None, None, None


def take_rows(x: torch.Tensor, rows: torch.Tensor, count: int) -> torch.Tensor:
    """The rows ``rows`` of ``x`` (a gather autograd follows), in ``x``'s memory order; only
    the first ``count`` (the kept samples, before any padding) get a gradient back."""
    order = _memory_order(x)
    if order is None:
        return _Take.apply(x, rows, count)
    return _Take.apply(x.permute(order), rows, count).permute(_inverse(order))


def put_rows(y: torch.Tensor, kept: Kept) -> torch.Tensor:
    """The branch's output for the whole batch from ``y``, its output on the rows the branch
    ran on: the kept rows of ``y`` scaled by ``kept.scale`` at their places, zeros elsewhere
    (or ``y`` times ``kept.mult``, plain DropPath's mask, where the branch ran on every
    sample), in ``y``'s dtype, device and memory order. The zeros come from ``y`` through
    autograd (a draw that keeps nothing still gives every parameter of the branch a gradient,
    of zeros), never from a tensor outside the graph.

    Raises:
        ShapeError: ``y`` does not have one row per row the branch ran on.
    """
    ran = kept.batch if kept.rows is None else kept.rows.numel()
    if y.dim() == 0 or y.shape[0] != ran:
        raise ShapeError(
            f"the branch ran on {ran} sample(s) but its exit returned shape "
            f"{tuple(y.shape)}: skip_compute needs a branch that keeps its batch dim first")
    if kept.mult is not None:
        return y * kept.mult.to(y.dtype).view((ran,) + (1,) * (y.dim() - 1))
    if kept.rows is None:
        return y if kept.scale is None else y * kept.scale
    order = _memory_order(y)
    if order is None:
        return _Put.apply(y, kept.rows, kept.kept, kept.batch, kept.scale)
    out = _Put.apply(y.permute(order), kept.rows, kept.kept, kept.batch, kept.scale)
    return out.permute(_inverse(order))
