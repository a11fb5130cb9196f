"""Vectorized mask generation. Private: the public entry points are in ``plugdrop.functional``.

Everything here works on channels-first tensors ``(B, C, *spatial)`` with 1 to 3 spatial dims.
Masks are born on the input's device with torch's own generators (so ``torch.manual_seed``
reproduces them and activation checkpointing, which restores the RNG state, replays them).
No function here synchronizes host and device.

DropBlock geometry
------------------
For a spatial size ``s`` and a block ``b <= s`` (blocks are clipped to the map), seeds are drawn
in the valid region, the ``s - b + 1`` positions where a whole block fits. A position ``i`` along
one axis is covered by ``c(i) = min(i, s - b) - max(0, i - b + 1) + 1`` seed positions, and a
position of the map by the product ``n`` of its per-axis counts. With seed probability ``gamma``
it is dropped with probability ``1 - (1 - gamma) ** n``. We pick ``gamma`` so that the mean of
that over the map is exactly ``p`` (the paper's closed form ignores block overlap and edges),
and rescale each kept position by ``1 / (1 - gamma) ** n`` so that ``E[out] == x`` everywhere.
"""

from __future__ import annotations

import functools
import math
from collections import Counter

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from . import _cext

_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


def coverage(size: int, block: int) -> list[int]:
    """Per-axis seed coverage counts ``c(i)`` for a block ``block <= size``."""
    last = size - block
    return [min(i, last) - max(0, i - block + 1) + 1 for i in range(size)]


@functools.lru_cache(maxsize=256)
def coverage_histogram(sizes: tuple[int, ...], blocks: tuple[int, ...]) -> tuple[tuple[int, float], ...]:
    """Distribution of the coverage count ``n`` over the map: ``((n, weight), ...)``."""
    hist: Counter[int] = Counter({1: 1})
    for s, b in zip(sizes, blocks):
        axis = Counter(coverage(s, b))
        nxt: Counter[int] = Counter()
        for n, w in hist.items():
            for c, k in axis.items():
                nxt[n * c] += w * k
        hist = nxt
    total = math.prod(sizes)
    return tuple(sorted((n, w / total) for n, w in hist.items()))




def _paper_gamma(p, sizes, blocks):
    area = math.prod(sizes)
    valid = math.prod([s - b + 1 for s, b in zip(sizes, blocks)])
    return p * area / (math.prod(blocks) * valid)


@torch.compiler.assume_constant_result
def _geometry(sizes: tuple[int, ...], blocks: tuple[int, ...]
              ) -> tuple[tuple[float, ...], tuple[float, ...], float]:
    """(coverage counts, their weights, paper gamma per unit p): constants for a trace."""
    hist = coverage_histogram(sizes, blocks)
    return (tuple(float(n) for n, _ in hist), tuple(w for _, w in hist),
            _paper_gamma(1.0, sizes, blocks))


@functools.lru_cache(maxsize=1024)
def solve_keep(p: float, sizes: tuple[int, ...], blocks: tuple[int, ...]) -> float:
    """``q = 1 - gamma`` such that the expected dropped fraction of the map is exactly ``p``.

    Solves ``sum_n w_n q**n = 1 - p`` by Newton's method, started at the paper's closed-form
    gamma: there the fraction is at most ``p`` (overlaps only lower it), so the start lies on
    the right of the root of a convex increasing function and the iteration converges
    monotonically.
    """
    if p <= 0.0:
        return 1.0
    hist = coverage_histogram(sizes, blocks)
    target = 1.0 - p
    q = 1.0 - _paper_gamma(p, sizes, blocks)
    if q <= 0.0:
        q = 1.0
    for _ in range(100):
        f = -target
        df = 0.0
        for n, w in hist:
            qn1 = q ** (n - 1)
            f += w * qn1 * q
            df += w * n * qn1
        step = f / df
        q -= step
        if abs(step) <= 1e-15 * max(q, 1e-300):
            break
    return min(max(q, 0.0), 1.0)


def solve_keep_tensor(p: torch.Tensor, sizes: tuple[int, ...], blocks: tuple[int, ...],
                      iters: int = 24) -> torch.Tensor:
    """Tensor version of :func:`solve_keep` for a 0-dim ``p`` (used under ``torch.compile``,
    where ``p`` is a graph input and must not be read on the host)."""
    counts, weights, unit_gamma = _geometry(sizes, blocks)
    p = p.to(torch.float64)
    ns = torch.tensor(counts, dtype=torch.float64, device=p.device)
    ws = torch.tensor(weights, dtype=torch.float64, device=p.device)
    q = 1.0 - p * unit_gamma
    q = torch.where(q > 0, q, torch.ones_like(q))
    for _ in range(iters):
        qn1 = q ** (ns - 1)
        f = (ws * qn1 * q).sum() - (1.0 - p)
        df = (ws * ns * qn1).sum()
        q = q - f / df
    q = q.clamp(0.0, 1.0)
    return torch.where(p > 0, q, torch.ones_like(q))


def coverage_map(sizes: tuple[int, ...], blocks: tuple[int, ...], device) -> torch.Tensor:
    """The coverage count ``n`` of every position, shape ``sizes``, float32 on ``device``."""
    out = None
    for axis, (s, b) in enumerate(zip(sizes, blocks)):
        i = torch.arange(s, device=device)
        c = (i.clamp(max=s - b) - (i - b + 1).clamp(min=0) + 1).to(torch.float32)
        shape = [1] * len(sizes)
        shape[axis] = s
        c = c.view(shape)
        out = c if out is None else out * c
    return out


def _window_or(t: torch.Tensor, dim: int, block: int) -> torch.Tensor:
    """Along ``dim`` (length ``L - block + 1``): ``out[i] = any(t[i - block + 1 .. i])``, with
    output length ``L``. Boolean OR by doubling: about ``log2(block) + 1`` passes."""
    pad = [0, 0] * (t.dim() - 1 - dim) + [block - 1, block - 1]
    w = F.pad(t, pad)  # zeros (False) on both sides: length L + block - 1
    width = 1
    while 2 * width <= block:
        n = w.shape[dim]
        w = w.narrow(dim, 0, n - width) | w.narrow(dim, width, n - width)
        width *= 2
    if width < block:
        n = w.shape[dim]
        w = w.narrow(dim, 0, n - (block - width)) | w.narrow(dim, block - width, n - (block - width))
    return w


def block_dropped(batch: int, channels: int, sizes: tuple[int, ...], blocks: tuple[int, ...],
                  gamma, device) -> torch.Tensor:
    """Boolean map of dropped positions, shape ``(batch, channels, *sizes)``, except that an
    axis where the block spans the whole map keeps size 1 (it broadcasts).

    Seeds are Bernoulli(``gamma``) on the valid region; each seed drops the block whose top-left
    corner it is. ``gamma`` is a float or a 0-dim tensor. Dense: one random number per valid
    position, or a sparse draw of the seeds on CPU (see :func:`bernoulli`).
    """
    valid = tuple(s - b + 1 for s, b in zip(sizes, blocks))
    dropped = bernoulli((batch, channels, *valid), gamma, device)
    for d, (v, b) in enumerate(zip(valid, blocks)):
        if b > 1 and v > 1:
            dropped = _window_or(dropped, 2 + d, b)
    return dropped


def broadcast_scale(scale: torch.Tensor, mask_sizes: tuple[int, ...]) -> torch.Tensor:
    """Cut a scale map down to the axes a :func:`block_dropped` mask keeps (an axis of size 1
    in the mask has a constant scale, the block spanning it)."""
    for d, m in enumerate(mask_sizes):
        if m == 1 and scale.shape[d] != 1:
            scale = scale.narrow(d, 0, 1)
    return scale


# --------------------------------------------------------------------------- scale maps


@functools.lru_cache(maxsize=64)
def scale_map(q: float, sizes: tuple[int, ...], blocks: tuple[int, ...],
              device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``1 / q ** n`` at every position (shape ``sizes``): the inverse keep probability.

    Cached per (q, geometry, device, dtype): a schedule changes ``q`` once per step.
    """
    with torch.inference_mode(False), torch.no_grad():
        n = coverage_map(sizes, blocks, device).to(torch.float64)
        return torch.pow(torch.tensor(q, dtype=torch.float64, device=device), -n).to(dtype)


# ------------------------------------------------------------------- sparse seeds (CPU)

#: Above this probability the dense path (a random number per position) is used on CPU:
#: a sparse draw costs about twice a dense one per success, and the fill costs per success.
SPARSE_MAX_GAMMA = 0.3
#: Below this many positions the dense path is cheaper whatever the probability.
SPARSE_MIN_NUMEL = 4096


def sparse_seeds(total: int, gamma: float) -> torch.Tensor:
    """Sorted positions in ``[0, total)`` of a Bernoulli(``gamma``) process, as int64.

    The gaps between successive successes of independent Bernoulli trials are
    Geometric(``gamma``); a gap is drawn as ``1 + floor(log(1 - u) / log(1 - gamma))`` from a
    uniform ``u`` of torch's generator (so ``torch.manual_seed`` reproduces it). Uniforms are
    float32, as in ``torch.rand(...) < p``, so the law is exact to the same 2**-24 resolution;
    the gaps are computed in float64 when they could exceed float32's exact integers. Costs
    O(``gamma * total``) random numbers instead of one per position. CPU only (the final cut
    reads a value on the host).
    """
    log_q = math.log1p(-gamma)
    wide = 17.0 / gamma > 2**23  # the largest gap float32 uniforms can give
    parts = []
    last = -1
    while True:
        expected = (total - 1 - last) * gamma
        k = int(expected + 6.0 * math.sqrt(expected) + 16)
        u = torch.rand(k, dtype=torch.float64 if wide else torch.float32)
        gaps = torch.log1p(u.neg_()).div_(log_q).floor_().add_(1.0)
        pos = gaps.to(torch.int64).cumsum_(0).add_(last)
        end = int(pos[-1])
        if end >= total:
            parts.append(pos[:int(torch.searchsorted(pos, total))])
            break
        parts.append(pos)
        last = end
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def use_sparse(numel: int, prob: float, device: torch.device) -> bool:
    """Whether to draw a Bernoulli(``prob``) field of ``numel`` positions sparsely."""
    return (device.type == "cpu" and prob <= SPARSE_MAX_GAMMA and numel >= SPARSE_MIN_NUMEL
            and not torch.compiler.is_compiling())


def bernoulli(shape: tuple[int, ...], prob, device: torch.device) -> torch.Tensor:
    """Boolean tensor of independent Bernoulli(``prob``) draws (``True`` with probability
    ``prob``). ``prob`` is a float or a 0-dim tensor (then always dense, no host read)."""
    if not isinstance(prob, torch.Tensor):
        numel = math.prod(shape)
        if use_sparse(numel, prob, device):
            out = torch.zeros(shape, dtype=torch.bool)
            if prob > 0.0:
                out.view(-1).index_fill_(0, sparse_seeds(numel, prob), True)
            return out
    return torch.rand(shape, device=device) < prob


def _dense_strides(t: torch.Tensor) -> bool:
    """True if ``t`` covers exactly ``t.numel()`` consecutive storage elements (any order)."""
    dims = sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz != 1)
    expect = 1
    for st, sz in dims:
        if st != expect:
            return False
        expect *= sz
    return True


def _zero_blocks(t: torch.Tensor, seeds: torch.Tensor, channels: int,
                 valid: tuple[int, ...], blocks: tuple[int, ...]) -> torch.Tensor:
    """Zero, in place, the block of every seed in a dense channels-first tensor ``t``.

    ``seeds`` index the flattened ``(B, channels, *valid)`` seed grid; each seed is the
    top-left corner of a block of size ``blocks``. Memory offsets come from ``t``'s strides, so
    any dense memory order works (channels-last included).
    """
    if seeds.numel() == 0:
        return t
    strides = t.stride()
    v = math.prod(valid)
    m = seeds // v
    r = seeds - m * v
    b = m // channels
    offset = b * strides[0] + (m - b * channels) * strides[1]
    if channels == 1 and t.shape[1] > 1:  # a shared mask: the block in every channel
        offset = (offset[:, None] + torch.arange(t.shape[1]) * strides[1]).reshape(-1)
        r = r.repeat_interleave(t.shape[1])
    for d in range(len(valid) - 1, -1, -1):
        coord = r % valid[d]
        r = r // valid[d]
        offset += coord * strides[2 + d]
    offs = None
    for d, size in enumerate(blocks):
        axis = torch.arange(size, dtype=torch.int64) * strides[2 + d]
        offs = axis if offs is None else (offs[:, None] + axis[None, :]).reshape(-1)
    index = (offset[:, None] + offs[None, :]).reshape(-1)
    flat = t.as_strided((t.numel(),), (1,), t.storage_offset())
    flat.index_fill_(0, index, 0)
    return t


def _dense_copy(t: torch.Tensor) -> torch.Tensor:
    return t if _dense_strides(t) else t.contiguous()


class SparseBlockDrop(torch.autograd.Function):
    """``out = x * scale`` with the blocks of ``seeds`` zeroed; the backward regenerates the
    zeroed positions from the saved seeds (a few bytes per block, not a mask)."""

    @staticmethod
    def forward(ctx, x, scale, seeds, channels, valid, blocks):
        ctx.save_for_backward(scale, seeds)
        ctx.geometry = (channels, valid, blocks)
        return sparse_block_drop(x, scale, seeds, channels, valid, blocks)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        scale, seeds = ctx.saved_tensors
        return sparse_block_drop(grad, scale, seeds, *ctx.geometry), None, None, None, None, None


#: Use the fused C kernel when available (tests switch it off to compare the two paths).
USE_CEXT = True


def fused_available() -> bool:
    return USE_CEXT and _cext.library() is not None


def sparse_block_drop(x: torch.Tensor, scale: torch.Tensor, seeds: torch.Tensor, channels: int,
                      valid: tuple[int, ...], blocks: tuple[int, ...]) -> torch.Tensor:
    """``x * scale`` with the blocks of ``seeds`` zeroed: the fused C kernel where it applies,
    else torch ops. Both give the same result for the same seeds."""
    if USE_CEXT and channels in (1, x.shape[1]):
        out = _cext.blockdrop(x, scale, seeds, blocks, shared=channels != x.shape[1])
        if out is not None:
            return out
    out = _dense_copy(x * scale)
    return _zero_blocks(out, seeds, channels, valid, blocks)


class MaskMul(torch.autograd.Function):
    """``out = x * where(keep, scale, 0)`` saving the boolean ``keep`` (1 byte per element)
    and the small ``scale`` for the backward, instead of a float multiplier."""

    @staticmethod
    def forward(ctx, x, keep, scale):
        ctx.save_for_backward(keep, scale)
        return x * torch.where(keep, scale, 0).to(x.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        keep, scale = ctx.saved_tensors
        return grad * torch.where(keep, scale, 0).to(grad.dtype), None, None
