"""DropBlock's pass over ``x`` on maps at most 64 wide (a network's DropBlock layers), as
Triton kernels: each map row's mask is made once (the seed rows whose blocks reach it, 64 bits
each, ORed and grown along the row by shifts), then each element reads its bit and writes
``x * scale`` or 0. Channels-first (:func:`_rows_kernel`) and channels-last
(:func:`_rows_cl_kernel`). Private; imported only where Triton is.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from .runtime import interpreted
from .common import block_range, narrow

__all__ = ["ROW_MAX", "prepare"]

#: the row kernels take maps at most this wide (a row's mask is one 64-bit word)
ROW_MAX = 64
#: elements per program: on a GPU, and in the interpreter
_TILE, _TILE_INTERPRETED = 2048, 1 << 16


@triton.jit
def _row_mask(bits_ptr, n_words, m, d, h, Vd, Vh, Vw, bd, bh, bw, nd, nh):
    # For rows (d, h) of maps m (tensors of one shape): bit w set where a seed's block covers
    # column w (maps at most 64 wide). The seed rows whose blocks reach the row, each's
    # Vw <= 64 bits (three 32-bit words from any offset), ORed, then grown along w by shifts.
    one = tl.full([], 1, tl.uint64)
    low = ((one << (Vw - 1)) << 1) - 1  # Vw ones (all 64 when Vw is 64)
    rows = tl.zeros_like(m).to(tl.uint64)
    dtop = tl.minimum(d, Vd - 1)
    htop = tl.minimum(h, Vh - 1)
    for jd in range(0, nd):
        dd = dtop - jd
        ok_d = (dd >= 0) & (dd > d - bd)
        for jh in range(0, nh):
            hh = htop - jh
            ok = ok_d & (hh >= 0) & (hh > h - bh)
            n0 = ((m * Vd + dd) * Vh + hh) * Vw
            first = n0 >> 5
            off = (n0 & 31).to(tl.uint64)
            w0 = tl.load(bits_ptr + first, mask=ok & (first < n_words), other=0)
            w1 = tl.load(bits_ptr + first + 1, mask=ok & (first + 1 < n_words), other=0)
            w2 = tl.load(bits_ptr + first + 2, mask=ok & (first + 2 < n_words), other=0)
            w0 = w0.to(tl.uint32, bitcast=True).to(tl.uint64)
            w1 = w1.to(tl.uint32, bitcast=True).to(tl.uint64)
            w2 = w2.to(tl.uint32, bitcast=True).to(tl.uint64)
            seeds = ((w0 | (w1 << 32)) >> off) | ((w2 << 32) << (32 - off))
            rows = rows | tl.where(ok, seeds & low, 0)
    grown = rows
    for j in range(1, bw):
        grown = grown | (rows << j)
    return grown


@triton.jit
def _rows_kernel(x_ptr, out_ptr, bits_ptr, scale_ptr, n_rows, n_words, C, D, H,
                 Vd, Vh, Vw, bd, bh, bw, nd, nh, W: tl.constexpr, SHARED: tl.constexpr,
                 HAS_SCALE: tl.constexpr, WIDE: tl.constexpr, BH: tl.constexpr,
                 BW: tl.constexpr):
    # Channels-first, maps at most 64 wide: a tile of BH map rows (of all maps, in memory
    # order) x BW columns; each row's mask is made once (a 64-bit word), then each element
    # reads its bit. The width W is a constant of the compiled kernel: where a row's bytes
    # are a multiple of 4, 8 or 16 (56 bfloat16 values: 112 bytes), the compiler then knows
    # each row starts aligned and reads and writes x in vectors, several elements per
    # instruction and each thread's elements along one row, instead of one element each.
    r = block_range(BH, WIDE)
    live = r < n_rows
    maps = r // (D * H)
    dh = r % (D * H)
    d = dh // H
    h = dh % H
    if SHARED:  # one mask per sample
        m = maps // C
    else:  # one per map: the seed grid's maps are x's
        m = maps
    drop = _row_mask(bits_ptr, n_words, m, d, h, Vd, Vh, Vw, bd, bh, bw, nd, nh)
    w = tl.arange(0, BW)
    inside = live[:, None] & (w[None, :] < W)
    offs = r[:, None] * W + w[None, :]
    xv = tl.load(x_ptr + offs, mask=inside, other=0)
    dropped = ((drop[:, None] >> w[None, :].to(tl.uint64)) & 1) != 0
    if HAS_SCALE:
        sv = tl.load(scale_ptr + dh[:, None] * W + w[None, :], mask=inside, other=1)
        y = xv.to(sv.dtype) * sv
        y = narrow(y, xv)
    else:
        y = xv
    tl.store(out_ptr + offs, tl.where(dropped, tl.zeros_like(y), y), mask=inside)


@triton.jit
def _rows_cl_kernel(x_ptr, out_ptr, bits_ptr, scale_ptr, n_pos, n_words, C, D, H, W,
                    Vd, Vh, Vw, bd, bh, bw, nd, nh, SHARED: tl.constexpr,
                    HAS_SCALE: tl.constexpr, WIDE: tl.constexpr, BP: tl.constexpr,
                    BW: tl.constexpr, BC: tl.constexpr):
    # Channels-last, maps at most 64 wide: BP rows (b, d, h) x BW columns x BC channels, the
    # channels innermost in memory; each (row, channel)'s mask is made once.
    p = block_range(BP, WIDE)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    live = p < n_pos
    dh = p % (D * H)
    d = (dh // H)[:, None] + tl.zeros([BP, BC], tl.int32)
    h = (dh % H)[:, None] + tl.zeros([BP, BC], tl.int32)
    if SHARED:
        m = (p // (D * H))[:, None] + tl.zeros([BP, BC], tl.int32)
    else:
        m = (p // (D * H))[:, None] * C + c[None, :]
    drop = _row_mask(bits_ptr, n_words, m, d, h, Vd, Vh, Vw, bd, bh, bw, nd, nh)
    w = tl.arange(0, BW)
    inside = (live[:, None, None] & (w[None, :, None] < W)) & (c[None, None, :] < C)
    offs = (p[:, None, None] * W + w[None, :, None]) * C + c[None, None, :]
    xv = tl.load(x_ptr + offs, mask=inside, other=0)
    dropped = ((drop[:, None, :] >> w[None, :, None].to(tl.uint64)) & 1) != 0
    if HAS_SCALE:
        sv = tl.load(scale_ptr + dh[:, None, None] * W + w[None, :, None],
                     mask=live[:, None, None] & (w[None, :, None] < W), other=1)
        y = xv.to(sv.dtype) * sv
        y = narrow(y, xv)
    else:
        y = xv
    tl.store(out_ptr + offs, tl.where(dropped, tl.zeros_like(y), y), mask=inside)


def prepare(shape: tuple[int, ...], layout: int, channels: int, sizes: tuple[int, int, int],
            valid: tuple[int, int, int], blocks: tuple[int, int, int], n_words: int,
            has_scale: bool) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor,
                                          torch.Tensor], None]:
    """The row kernel's launch for channels-first tensors of ``shape`` (``layout`` 0: contiguous,
    1: channels-last; maps at most :data:`ROW_MAX` wide), its grid and arguments decided once:
    ``launch(x, out, bits, scale)`` (``scale`` any tensor when ``has_scale`` is false)."""
    D, H, W = sizes
    Vd, Vh, Vw = valid
    bd, bh, bw = blocks
    B, C = shape[:2]
    tile = _TILE_INTERPRETED if interpreted() else _TILE
    bw_ = triton.next_power_of_2(W)
    reach = (Vd, Vh, Vw, bd, bh, bw, min(bd, Vd), min(bh, Vh))
    wide = math.prod(shape) + tile >= 1 << 31 or n_words * 32 >= 1 << 31
    if layout == 0:
        n = B * C * D * H
        bh_ = max(1, min(tile // bw_, triton.next_power_of_2(n)))
        kernel = _rows_kernel[(triton.cdiv(n, bh_),)]
        common: tuple[int, ...] = (n_words, C, D, H, *reach)  # W: a constant of the kernel
        options = {"W": W, "SHARED": channels != C, "HAS_SCALE": has_scale, "WIDE": wide,
                   "BH": bh_, "BW": bw_}
    else:
        n = B * D * H
        bc = min(triton.next_power_of_2(C), max(1, tile // bw_))
        bp = max(1, min(tile // (bw_ * bc), triton.next_power_of_2(n)))
        kernel = _rows_cl_kernel[(triton.cdiv(n, bp), triton.cdiv(C, bc))]
        common = (n_words, C, D, H, W, *reach)
        options = {"SHARED": channels != C, "HAS_SCALE": has_scale, "WIDE": wide, "BP": bp,
                   "BW": bw_, "BC": bc}

    def launch(x: torch.Tensor, out: torch.Tensor, bits: torch.Tensor,
               scale: torch.Tensor) -> None:
        kernel(x, out, bits, scale, n, *common, **options)
    return launch
