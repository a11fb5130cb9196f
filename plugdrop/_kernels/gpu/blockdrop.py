"""DropBlock on accelerators in two Triton kernels. Private; imported only where Triton is.

1. :func:`_seeds_kernel`: the seeds, drawn by the CPU kernel's generator
   (``_csrc/blockdrop.c``, :func:`..cext.hashed_seeds`): the seed grid ``(B, channels, *valid)``
   cut into blocks of 256 positions, each block's seeds at geometric gaps drawn from two
   counter-based hashes of ``(key, 256 j + k)``. One lane walks one block; the seeds become
   bits (``total / 8`` bytes, 8 words of 32 bits per block), written whole by their lane: no
   atomics and no zeroing.
2. One pass over ``x`` that writes ``x * scale`` or 0. On maps at most 64 wide (a network's
   DropBlock layers) the row kernels (:func:`_rows_kernel`, :func:`_rows_cl_kernel` for
   channels-last) make each map row's mask once: the seed rows whose blocks reach it, 64 bits
   each, ORed and grown along the row by shifts; each element then reads its bit. Wider maps
   take :func:`_apply_kernel`, where each element reads the bits of its own reach.

So for the same key the mask is the CPU kernel's, on every device and in every layout, and the
backward redraws it from the key (16 bytes saved). Reads ``x`` once, writes the output once,
and moves ``numel / 8`` bytes of seed bits besides.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from ..._device import on_device
from . import interpreted

__all__ = ["block_drop", "seed_bits"]

#: blocks of the generator walked by one program of the seed kernel, elements per program of
#: the apply kernel: on a GPU, and in the interpreter (numpy: the fewer programs the faster)
_LANES, _LANES_INTERPRETED = 64, 4096
_BLOCK, _BLOCK_INTERPRETED = 1024, 1 << 16
_M32 = 0xFFFFFFFF


@triton.jit(do_not_specialize=["k0", "k1"])
def _seeds_kernel(bits_ptr, thr_ptr, first, n_blocks, total, k0, k1, LANES: tl.constexpr):
    # One lane per block j = first + lane of 256 seed-grid positions; its seeds' bits go to
    # words 8 (j - first) .. 8 (j - first) + 7.
    lane = tl.program_id(0).to(tl.int64) * LANES + tl.arange(0, LANES)
    live = lane < n_blocks
    j = first + lane
    idx = tl.arange(0, 16)
    t = tl.load(thr_ptr + idx)  # T_16 .. T_1, ascending, int64
    r = tl.load(thr_ptr + 16 + idx)  # 0, R_15 .. R_1, ascending
    key0 = k0.to(tl.uint32, bitcast=True)
    key1 = k1.to(tl.uint32, bitcast=True)
    hi = (j >> 24).to(tl.uint32)  # the counter's high word: (256 j + k) >> 32
    lo = ((j & 0xFFFFFF) << 8).to(tl.uint32)
    pos = tl.full([LANES], -1, tl.int32)
    alive = live.to(tl.int32)
    cols = tl.arange(0, 8)
    words = tl.zeros([LANES, 8], tl.int32)
    k = 0
    while tl.max(alive, axis=0) > 0:
        c = lo | k
        # A(n) = mix(mix(lo ^ k0) ^ hi ^ k1), B(n) = mix(mix(lo ^ k1) ^ hi ^ k0); mix is
        # Wellons' lowbias32 (written out: a kernel calls no Python function).
        a = c ^ key0
        a = a ^ (a >> 16)
        a = a * 0x7FEB352D
        a = a ^ (a >> 15)
        a = a * 0x846CA68B
        a = a ^ (a >> 16)
        a = a ^ hi ^ key1
        a = a ^ (a >> 16)
        a = a * 0x7FEB352D
        a = a ^ (a >> 15)
        a = a * 0x846CA68B
        a = a ^ (a >> 16)
        b = c ^ key1
        b = b ^ (b >> 16)
        b = b * 0x7FEB352D
        b = b ^ (b >> 15)
        b = b * 0x846CA68B
        b = b ^ (b >> 16)
        b = b ^ hi ^ key0
        b = b ^ (b >> 16)
        b = b * 0x7FEB352D
        b = b ^ (b >> 15)
        b = b * 0x846CA68B
        b = b ^ (b >> 16)
        above_t = tl.sum((t[None, :] <= a.to(tl.int64)[:, None]).to(tl.int32), axis=1)
        above_r = tl.sum((r[None, :] <= b.to(tl.int64)[:, None]).to(tl.int32), axis=1)
        gap = 16 * (16 - above_t) + 16 - above_r
        pos = tl.where(alive > 0, pos + 1 + gap, pos)
        hit = (alive > 0) & (pos < 256) & (j * 256 + pos < total)
        bit = tl.where(hit, 1 << (pos & 31), 0)
        words = words | tl.where(cols[None, :] == (pos >> 5)[:, None], bit[:, None], 0)
        alive = ((alive > 0) & (pos < 255)).to(tl.int32)
        k += 1
    tl.store(bits_ptr + lane[:, None] * 8 + cols[None, :], words, mask=live[:, None])


@triton.jit
def _apply_kernel(x_ptr, out_ptr, bits_ptr, scale_ptr, numel, n_words, C, D, H, W,
                  Vd, Vh, Vw, bd, bh, bw, nd, nh, seed_channels,
                  CHANNELS_LAST: tl.constexpr, NWORDS: tl.constexpr, HAS_SCALE: tl.constexpr,
                  WIDE: tl.constexpr, BLOCK: tl.constexpr):
    # out[i] = 0 where a seed's block covers element i, else x[i] * scale[spatial position].
    if WIDE:
        i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = i < numel
    if CHANNELS_LAST:  # a sample is [D][H][W][C]
        c = i % C
        s = i // C
        w = s % W
        s = s // W
        h = s % H
        s = s // H
        d = s % D
        b = s // D
    else:  # [C][D][H][W]
        w = i % W
        s = i // W
        h = s % H
        s = s // H
        d = s % D
        s = s // D
        c = s % C
        b = s // C
    m = b * seed_channels + tl.where(seed_channels == 1, 0, c)
    # the seed columns whose block reaches column w: wlo .. wlo + nbits - 1
    wlo = tl.maximum(w - bw + 1, 0)
    nbits = tl.minimum(w, Vw - 1) - wlo + 1
    dtop = tl.minimum(d, Vd - 1)
    htop = tl.minimum(h, Vh - 1)
    dropped = tl.zeros([BLOCK], tl.int32)
    for jd in range(0, nd):
        dd = dtop - jd
        ok_d = (dd >= 0) & (dd > d - bd)
        for jh in range(0, nh):
            hh = htop - jh
            ok = inside & ok_d & (hh >= 0) & (hh > h - bh)
            n0 = ((m * Vd + dd) * Vh + hh) * Vw + wlo
            first = n0 >> 5
            off = n0 & 31
            for q in tl.static_range(NWORDS):
                lo_bit = tl.maximum(off - 32 * q, 0)
                hi_bit = tl.minimum(off + nbits - 1 - 32 * q, 31)
                want = ok & (hi_bit >= lo_bit) & (first + q < n_words)
                word = tl.load(bits_ptr + first + q, mask=want, other=0).to(tl.int64) & 0xFFFFFFFF
                span = ((2 << hi_bit.to(tl.int64)) - 1) - ((1 << lo_bit.to(tl.int64)) - 1)
                dropped = dropped | ((want & ((word & span) != 0)).to(tl.int32))
    xv = tl.load(x_ptr + i, mask=inside, other=0)
    if HAS_SCALE:
        sv = tl.load(scale_ptr + (d * H + h) * W + w, mask=inside, other=1)
        y = xv.to(sv.dtype) * sv
        if xv.dtype == tl.bfloat16:
            # rounded to nearest even by hand: the GPU's rounding, which Triton's interpreter
            # does not do (it truncates); NaN kept a NaN
            u = y.to(tl.uint32, bitcast=True)
            u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            y = tl.where(y != y, y.to(tl.bfloat16),
                         u.to(tl.uint16).to(tl.bfloat16, bitcast=True))
        else:
            y = y.to(xv.dtype)
    else:
        y = xv
    tl.store(out_ptr + i, tl.where(dropped != 0, tl.zeros_like(y), y), mask=inside)


@triton.jit
def _row_mask(bits_ptr, n_words, m, d, h, Vd, Vh, Vw, bd, bh, bw, nd, nh):
    # For rows (d, h) of maps m (tensors of one shape): bit w set where a seed's block covers
    # column w (maps at most 64 wide). The seed rows whose blocks reach the row, each's
    # Vw <= 64 bits (three 32-bit words from any offset), ORed, then grown along w by shifts.
    one = tl.full([], 1, tl.uint64)
    low = ((one << (Vw - 1).to(tl.uint64)) << 1) - 1  # Vw ones (all 64 when Vw is 64)
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
def _rows_kernel(x_ptr, out_ptr, bits_ptr, scale_ptr, n_rows, n_words, C, D, H, W,
                 Vd, Vh, Vw, bd, bh, bw, nd, nh, seed_channels,
                 HAS_SCALE: tl.constexpr, WIDE: tl.constexpr, BH: tl.constexpr,
                 BW: tl.constexpr):
    # Channels-first, maps at most 64 wide: a tile of BH map rows (of all maps, in memory
    # order) x BW columns; each row's mask is made once (a 64-bit word), then each element
    # reads its bit.
    if WIDE:
        r = tl.program_id(0).to(tl.int64) * BH + tl.arange(0, BH)
    else:
        r = tl.program_id(0) * BH + tl.arange(0, BH)
    live = r < n_rows
    maps = r // (D * H)
    dh = r % (D * H)
    d = dh // H
    h = dh % H
    m = (maps // C) * seed_channels + tl.where(seed_channels == 1, 0, maps % C)
    drop = _row_mask(bits_ptr, n_words, m, d, h, Vd, Vh, Vw, bd, bh, bw, nd, nh)
    w = tl.arange(0, BW)
    inside = live[:, None] & (w[None, :] < W)
    offs = r[:, None] * W + w[None, :]
    xv = tl.load(x_ptr + offs, mask=inside, other=0)
    dropped = ((drop[:, None] >> w[None, :].to(tl.uint64)) & 1) != 0
    if HAS_SCALE:
        sv = tl.load(scale_ptr + dh[:, None] * W + w[None, :], mask=inside, other=1)
        y = xv.to(sv.dtype) * sv
        if xv.dtype == tl.bfloat16:
            # rounded to nearest even by hand: the GPU's rounding, which Triton's interpreter
            # does not do (it truncates); NaN kept a NaN
            u = y.to(tl.uint32, bitcast=True)
            u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            y = tl.where(y != y, y.to(tl.bfloat16),
                         u.to(tl.uint16).to(tl.bfloat16, bitcast=True))
        else:
            y = y.to(xv.dtype)
    else:
        y = xv
    tl.store(out_ptr + offs, tl.where(dropped, tl.zeros_like(y), y), mask=inside)


@triton.jit
def _rows_cl_kernel(x_ptr, out_ptr, bits_ptr, scale_ptr, n_pos, n_words, C, D, H, W,
                    Vd, Vh, Vw, bd, bh, bw, nd, nh, seed_channels,
                    HAS_SCALE: tl.constexpr, WIDE: tl.constexpr, BP: tl.constexpr,
                    BW: tl.constexpr, BC: tl.constexpr):
    # Channels-last, maps at most 64 wide: BP rows (b, d, h) x BW columns x BC channels, the
    # channels innermost in memory; each (row, channel)'s mask is made once.
    if WIDE:
        p = tl.program_id(0).to(tl.int64) * BP + tl.arange(0, BP)
    else:
        p = tl.program_id(0) * BP + tl.arange(0, BP)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    live = p < n_pos
    dh = p % (D * H)
    d = (dh // H)[:, None] + tl.zeros([BP, BC], tl.int32)
    h = (dh % H)[:, None] + tl.zeros([BP, BC], tl.int32)
    m = (p // (D * H))[:, None] * seed_channels + tl.where(seed_channels == 1, 0, c)[None, :]
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
        if xv.dtype == tl.bfloat16:
            u = y.to(tl.uint32, bitcast=True)
            u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            y = tl.where(y != y, y.to(tl.bfloat16),
                         u.to(tl.uint16).to(tl.bfloat16, bitcast=True))
        else:
            y = y.to(xv.dtype)
    else:
        y = xv
    tl.store(out_ptr + offs, tl.where(dropped, tl.zeros_like(y), y), mask=inside)


#: elements per program of the row kernels: on a GPU, and in the interpreter
_TILE, _TILE_INTERPRETED = 2048, 1 << 16
#: the row kernels take maps at most this wide (a row's mask is one 64-bit word)
ROW_MAX = 64


_THRESHOLDS: dict[tuple[tuple[int, ...], torch.device], torch.Tensor] = {}


def _thresholds_on(thresh: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """The generator's 32 thresholds as an int64 tensor on ``device`` (cached)."""
    t = _THRESHOLDS.get((thresh, device))
    if t is None:
        if len(_THRESHOLDS) >= 256:
            _THRESHOLDS.clear()
        t = on_device(torch.tensor(thresh, dtype=torch.int64), device)
        _THRESHOLDS[(thresh, device)] = t
    return t


def _signed(k: int) -> int:
    """A 32-bit key word as the int32 with its bits (a kernel argument of one type)."""
    k &= _M32
    return k - (1 << 32) if k >= 1 << 31 else k


def seed_bits(thresholds: torch.Tensor, key: tuple[int, int], total: int,
              first_block: int = 0) -> torch.Tensor:
    """The seeds the generator draws among seed-grid positions ``256 * first_block`` to
    ``total - 1``, as bits: int32 words, bit ``n % 32`` of word ``n // 32`` set if position
    ``256 * first_block + n`` is a seed (positions from ``total`` on are never set).
    ``thresholds``: the 32 int64 thresholds on the device."""
    n_blocks = max((total + 255) // 256 - first_block, 1)
    bits = torch.empty(n_blocks * 8, dtype=torch.int32, device=thresholds.device)
    lanes = min(_LANES_INTERPRETED, triton.next_power_of_2(n_blocks)) if interpreted() \
        else _LANES
    _seeds_kernel[(triton.cdiv(n_blocks, lanes),)](bits, thresholds, first_block, n_blocks, total,
                                            _signed(key[0]), _signed(key[1]), LANES=lanes)
    return bits


@functools.lru_cache(maxsize=64)
def _words(reach: int) -> int:
    """Words a row of ``reach`` seed bits can span from any bit offset."""
    return (31 + reach + 31) // 32


def layout_of(x: torch.Tensor) -> int | None:
    """0 if ``x`` (channels-first, 3 to 5 dims) is contiguous, 1 if it is channels-last in
    every sample and the batch (dense, channels innermost), else None."""
    if x.is_contiguous():
        return 0
    shape, stride = x.shape, x.stride()
    expect = 1
    for d in [1, *range(x.dim() - 1, 1, -1), 0]:
        if shape[d] != 1 and stride[d] != expect:
            return None
        expect *= shape[d]
    return 1


def block_drop(x: torch.Tensor, scale: torch.Tensor | None, key: tuple[int, int],
               thresh: tuple[int, ...] | torch.Tensor, channels: int, valid: tuple[int, ...],
               blocks: tuple[int, ...]) -> torch.Tensor:
    """``x * scale`` with the blocks of the seeds drawn from ``key`` zeroed (the CPU kernel's
    seeds, :func:`..cext.blockdrop`'s values for float32 and float64 ``x``).

    ``x``: channels-first ``(B, C, *spatial)``, 1 to 3 spatial dims, any float dtype (half
    precision is multiplied in float32, then rounded); contiguous or channels-last (other
    layouts are copied first), the output in the same layout. ``scale``: the multiplier of each
    spatial position (broadcast to the spatial sizes; float32, or float64 for a float64 ``x``),
    or None for 1. ``thresh``: the generator's thresholds (:func:`..cext.thresholds`), as the
    tuple or as their int64 tensor on ``x``'s device. ``channels``: 1 for a mask shared by the
    channels, else ``C``. ``valid``: the seed grid's spatial sizes; ``blocks``: the block.
    """
    layout = layout_of(x)
    if layout is None:
        x = x.contiguous()
        layout = 0
    out = torch.empty_like(x)
    numel = x.numel()
    if numel == 0:
        return out
    spatial = tuple(x.shape[2:])
    pad = (1,) * (5 - x.dim())
    D, H, W = pad + spatial
    Vd, Vh, Vw = pad + tuple(valid)
    bd, bh, bw = pad + tuple(blocks)
    total = x.shape[0] * channels * Vd * Vh * Vw
    if not isinstance(thresh, torch.Tensor):
        if thresh[0] >= 1 << 32:  # no seeds at all: the scale alone
            return x * scale.to(x.dtype) if scale is not None else x.clone()
        thresh = _thresholds_on(thresh, x.device)
    bits = seed_bits(thresh, key, total)
    if scale is not None:
        want = torch.float64 if x.dtype == torch.float64 else torch.float32
        if (scale.dtype != want or scale.device != x.device or tuple(scale.shape) != spatial
                or not scale.is_contiguous()):
            scale = scale.to(device=x.device, dtype=want).expand(spatial).contiguous()
    if W <= ROW_MAX and not PER_ELEMENT:
        _rows(x, out, bits, scale, layout, channels, (D, H, W), (Vd, Vh, Vw), (bd, bh, bw))
        return out
    block = min(_BLOCK_INTERPRETED, triton.next_power_of_2(numel)) if interpreted() \
        else _BLOCK
    _apply_kernel[(triton.cdiv(numel, block),)](
        x, out, bits, scale if scale is not None else x, numel, bits.numel(), x.shape[1],
        D, H, W, Vd, Vh, Vw, bd, bh, bw, min(bd, Vd), min(bh, Vh), channels,
        CHANNELS_LAST=layout == 1, NWORDS=_words(min(bw, Vw)), HAS_SCALE=scale is not None,
        WIDE=numel + block >= 1 << 31 or bits.numel() * 32 >= 1 << 31, BLOCK=block)
    return out


#: Use the per-element kernel for maps of any width (tests compare it with the row kernels)
PER_ELEMENT = False


def _rows(x: torch.Tensor, out: torch.Tensor, bits: torch.Tensor, scale: torch.Tensor | None,
          layout: int, channels: int, sizes: tuple[int, int, int], valid: tuple[int, int, int],
          blocks: tuple[int, int, int]) -> None:
    """The row kernels' launch (maps at most :data:`ROW_MAX` wide)."""
    D, H, W = sizes
    Vd, Vh, Vw = valid
    bd, bh, bw = blocks
    B, C = x.shape[:2]
    tile = _TILE_INTERPRETED if interpreted() else _TILE
    bw_ = triton.next_power_of_2(W)
    common = (bits.numel(), C, D, H, W, Vd, Vh, Vw, bd, bh, bw, min(bd, Vd), min(bh, Vh),
              channels)
    wide = x.numel() + tile >= 1 << 31 or bits.numel() * 32 >= 1 << 31
    sc = scale if scale is not None else x
    if layout == 0:
        rows = B * C * D * H
        bh_ = max(1, min(tile // bw_, triton.next_power_of_2(rows)))
        _rows_kernel[(triton.cdiv(rows, bh_),)](
            x, out, bits, sc, rows, *common, HAS_SCALE=scale is not None, WIDE=wide, BH=bh_,
            BW=bw_)
    else:
        pos = B * D * H
        bc = min(triton.next_power_of_2(C), max(1, tile // bw_))
        bp = max(1, min(tile // (bw_ * bc), triton.next_power_of_2(pos)))
        _rows_cl_kernel[(triton.cdiv(pos, bp), triton.cdiv(C, bc))](
            x, out, bits, sc, pos, *common, HAS_SCALE=scale is not None, WIDE=wide, BP=bp,
            BW=bw_, BC=bc)


def applies(x: torch.Tensor) -> bool:
    """Whether :func:`block_drop` takes ``x`` (a float tensor of 3 to 5 dims)."""
    return x.is_floating_point() and 3 <= x.dim() <= 5 and math.prod(x.shape) > 0
