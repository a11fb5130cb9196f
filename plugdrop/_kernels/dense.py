"""The dense DropBlock mask (CUDA, ``torch.compile``, dense seeds): one random number per seed
position, blocks grown by a logarithmic sliding-window OR of booleans; no host reads. Private.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .draws import bernoulli

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
