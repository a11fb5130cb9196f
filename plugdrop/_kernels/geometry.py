"""DropBlock geometry: how many seed positions cover each position of a map, the seed
probability that drops exactly ``p`` of the map, and the per-position rescaling. Private.

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

from .. import _compat
from .._compat import constant_result
from .._device import on_device

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


def paper_gamma(p: float, sizes: tuple[int, ...], blocks: tuple[int, ...]) -> float:
    """The paper's closed-form seed probability (ignores overlaps and edges)."""
    area = math.prod(sizes)
    valid = math.prod([s - b + 1 for s, b in zip(sizes, blocks)])
    return p * area / (math.prod(blocks) * valid)


@constant_result
def _geometry(sizes: tuple[int, ...], blocks: tuple[int, ...]
              ) -> tuple[tuple[float, ...], tuple[float, ...], float]:
    """(coverage counts, their weights, paper gamma per unit p): constants for a trace."""
    hist = coverage_histogram(sizes, blocks)
    return (tuple(float(n) for n, _ in hist), tuple(w for _, w in hist),
            paper_gamma(1.0, sizes, blocks))


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
    q = 1.0 - paper_gamma(p, sizes, blocks)
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
    out = torch.ones((1,) * len(sizes), dtype=torch.float32, device=device)
    for axis, (s, b) in enumerate(zip(sizes, blocks)):
        i = torch.arange(s, device=device)
        c = (i.clamp(max=s - b) - (i - b + 1).clamp(min=0) + 1).to(torch.float32)
        shape = [1] * len(sizes)
        shape[axis] = s
        c = c.view(shape)
        out = out * c
    return out

@functools.lru_cache(maxsize=64)
def scale_map_as(q: float, sizes: tuple[int, ...], blocks: tuple[int, ...],
                 device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """:func:`scale_map` in float32, cast to ``dtype`` (the values a float32 multiplier cast to
    ``dtype`` has), cached: an accelerator's mask multiplies in the input's dtype without a
    cast at every call."""
    with _compat.constants():
        return scale_map(q, sizes, blocks, device, torch.float32).to(dtype)


def broadcast_scale(scale: torch.Tensor, mask_sizes: tuple[int, ...]) -> torch.Tensor:
    """Cut a scale map down to the axes a :func:`block_dropped` mask keeps (an axis of size 1
    in the mask has a constant scale, the block spanning it)."""
    for d, m in enumerate(mask_sizes):
        if m == 1 and scale.shape[d] != 1:
            scale = scale.narrow(d, 0, 1)
    return scale


@functools.lru_cache(maxsize=64)
def scale_map(q: float, sizes: tuple[int, ...], blocks: tuple[int, ...],
              device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``1 / q ** n`` at every position (shape ``sizes``): the inverse keep probability.

    Cached per (q, geometry, device, dtype): a schedule changes ``q`` once per step. Computed
    on the CPU and then moved (without a synchronization), so every device has the same values.
    """
    with _compat.constants():
        n = coverage_map(sizes, blocks, "cpu").to(torch.float64)
        out = torch.pow(torch.tensor(q, dtype=torch.float64), -n).to(dtype)
        return on_device(out, torch.device(device))

