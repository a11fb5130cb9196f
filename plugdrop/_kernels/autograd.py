"""Autograd functions that save as little as possible for the backward, and the sparse
block-zeroing (fused C kernel or torch ops). Private.

``SparseBlockDrop`` saves the seeds of the dropped blocks (a few bytes per block) and
regenerates the mask in the backward; ``MaskMul`` saves a boolean mask (1 byte per element).
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from . import cext

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
    offs = torch.zeros(1, dtype=torch.int64)
    for d, size in enumerate(blocks):
        axis = torch.arange(size, dtype=torch.int64) * strides[2 + d]
        offs = (offs[:, None] + axis[None, :]).reshape(-1)
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
    return USE_CEXT and cext.library() is not None


def sparse_block_drop(x: torch.Tensor, scale: torch.Tensor, seeds: torch.Tensor, channels: int,
                      valid: tuple[int, ...], blocks: tuple[int, ...]) -> torch.Tensor:
    """``x * scale`` with the blocks of ``seeds`` zeroed: the fused C kernel where it applies,
    else torch ops. Both give the same result for the same seeds."""
    if USE_CEXT and channels in (1, x.shape[1]):
        out = cext.blockdrop(x, scale, seeds, blocks, shared=channels != x.shape[1])
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
