"""The dense DropBlock mask (CUDA, ``torch.compile``, dense seeds): one random number per seed
position, no host reads. Private.

Two ways to grow the seeds into blocks, with the same law:

- :func:`block_dropped`: Bernoulli seeds, blocks grown by a logarithmic sliding-window OR of
  booleans (about ``log2(block) + 1`` passes per axis); the CPU's and ``torch.compile``'s path;
- :func:`block_kept`: one float32 uniform per seed position, a position dropped when the largest
  uniform among the seeds whose block covers it is above ``1 - gamma`` (a seed is a uniform
  above ``1 - gamma``: probability ``gamma``); a max pooling per axis. Fewer kernels: the
  accelerators' path for small masks (:func:`pooled`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .draws import bernoulli

_POOLS = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


#: Below this many seed positions an accelerator's mask is drawn by :func:`block_kept`. Measured
#: on an H200 (benchmarks/RESULTS-cuda.md, forward of a 7-block DropBlock): with 160K seeds
#: (shared channels, 64x256x56x56) pooling took 0.78x the window OR's time (fewer kernels, the
#: time of small masks being launches); with 2.1M (per channel, 32x1024x14x14) 1.2-1.3x and with
#: 41M (64x256x56x56) 1.6x (the pooling kernels read the block's side per position and axis,
#: the OR's passes one byte each).
POOLED_MAX_SEEDS = 1 << 19


def pooled(device: torch.device, seeds: int) -> bool:
    """Whether DropBlock's dense mask of ``seeds`` seed positions on ``device`` is drawn by
    :func:`block_kept` (an accelerator and a small mask), else by :func:`block_dropped`."""
    return device.type != "cpu" and seeds < POOLED_MAX_SEEDS


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


def grow(seeds: torch.Tensor, blocks: tuple[int, ...]) -> torch.Tensor:
    """The positions covered by the blocks of boolean ``seeds`` (shape ``(B, C, *valid)``, each
    seed the top-left corner of its block): shape ``(B, C, *sizes)``, except that an axis where
    the block spans the whole map keeps size 1 (it broadcasts)."""
    for d, b in enumerate(blocks):
        if b > 1 and seeds.shape[2 + d] > 1:
            seeds = _window_or(seeds, 2 + d, b)
    return seeds


def block_dropped(batch: int, channels: int, sizes: tuple[int, ...], blocks: tuple[int, ...],
                  gamma, device) -> torch.Tensor:
    """Boolean map of dropped positions, shape ``(batch, channels, *sizes)``, except that an
    axis where the block spans the whole map keeps size 1 (it broadcasts).

    Seeds are Bernoulli(``gamma``) on the valid region; each seed drops the block whose top-left
    corner it is. ``gamma`` is a float or a 0-dim tensor. Dense: one random number per valid
    position, or a sparse draw of the seeds on CPU (see :func:`bernoulli`).
    """
    valid = tuple(s - b + 1 for s, b in zip(sizes, blocks))
    return grow(bernoulli((batch, channels, *valid), gamma, device), blocks)


def block_kept(batch: int, channels: int, sizes: tuple[int, ...], blocks: tuple[int, ...],
               gamma: float, device) -> torch.Tensor:
    """``~block_dropped(...)`` (the same shape and law) drawn by max pooling: the seeds'
    float32 uniforms (``torch.rand``, one per valid position), along each axis a block grows
    on, zero-padded by ``block - 1`` on both sides and max-pooled with the block's side as the
    window (a separable maximum: ``block`` reads per position and axis, not the block's
    volume), then compared with ``1 - gamma``."""
    valid = tuple(s - b + 1 for s, b in zip(sizes, blocks))
    u = torch.rand((batch, channels, *valid), device=device)
    pool = _POOLS[len(sizes)]
    for d, (v, b) in enumerate(zip(valid, blocks)):
        if b > 1 and v > 1:
            pads = [0, 0] * (len(sizes) - 1 - d) + [b - 1, b - 1]  # F.pad: the last axis first
            window = [1] * len(sizes)
            window[d] = b
            u = pool(F.pad(u, pads), window, stride=1)
    return u <= 1.0 - gamma
