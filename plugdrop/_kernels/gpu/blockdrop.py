"""DropBlock on accelerators, in two Triton kernels: the seeds (:mod:`.seeds`: the C kernel's
generator, so for one key the mask is the C kernel's, on every device and in every layout),
then one pass over ``x`` that writes ``x * scale`` or 0: the row kernels (:mod:`.rows`) on maps
at most 64 wide, :func:`_apply_kernel` on wider ones, where each element reads the seed bits
of its own reach. Reads ``x`` once and writes the output once, with ``numel / 8`` bytes of seed
bits besides; the backward redraws the mask from the key (16 bytes saved). Private; imported
only where Triton is.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from . import rows, seeds
from .runtime import interpreted
from .common import block_range, narrow

__all__ = ["PER_ELEMENT", "Prepared", "applies", "block_drop", "layout_of", "prepare"]

#: elements per program of the per-element kernel: on a GPU, and in the interpreter
_BLOCK, _BLOCK_INTERPRETED = 1024, 1 << 16


@triton.jit
def _apply_kernel(x_ptr, out_ptr, bits_ptr, scale_ptr, numel, n_words, C, D, H, W,
                  Vd, Vh, Vw, bd, bh, bw, nd, nh, SHARED: tl.constexpr,
                  CHANNELS_LAST: tl.constexpr, NWORDS: tl.constexpr, HAS_SCALE: tl.constexpr,
                  WIDE: tl.constexpr, BLOCK: tl.constexpr):
    # out[i] = 0 where a seed's block covers element i, else x[i] * scale[spatial position].
    i = block_range(BLOCK, WIDE)
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
    if SHARED:  # one mask per sample
        m = b
    else:
        m = b * C + c
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
        y = narrow(y, xv)
    else:
        y = xv
    tl.store(out_ptr + i, tl.where(dropped != 0, tl.zeros_like(y), y), mask=inside)


#: Use the per-element kernel for maps of any width (tests compare it with the row kernels)
PER_ELEMENT = False


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


class Prepared:
    """:func:`block_drop`'s launches for tensors of one shape, strides, dtype and device and one
    mask law (scale map, thresholds, block, shared or per channel), decided once: a call then
    allocates the output and the seed bits and launches the two kernels. Built by
    :func:`prepare`; call it only on a tensor that :meth:`fits`."""

    __slots__ = ("shape", "stride", "dtype", "device", "scale", "_seeds", "_launch")

    def __init__(self, x: torch.Tensor, layout: int, scale: torch.Tensor | None,
                 thresholds: torch.Tensor, channels: int, valid: tuple[int, ...],
                 blocks: tuple[int, ...]) -> None:
        self.shape, self.stride, self.dtype, self.device = x.shape, x.stride(), x.dtype, x.device
        spatial = tuple(x.shape[2:])
        if scale is not None:
            want = torch.float64 if x.dtype == torch.float64 else torch.float32
            if (scale.dtype != want or scale.device != x.device
                    or tuple(scale.shape) != spatial or not scale.is_contiguous()):
                scale = scale.to(device=x.device, dtype=want).expand(spatial).contiguous()
        self.scale = scale
        pad = (1,) * (5 - x.dim())
        D, H, W = pad + spatial
        Vd, Vh, Vw = pad + tuple(valid)
        bd, bh, bw = pad + tuple(blocks)
        total = x.shape[0] * channels * Vd * Vh * Vw
        self._seeds = seeds.prepare(thresholds, total)
        n_words = 8 * max((total + 255) // 256, 1)
        if W <= rows.ROW_MAX and not PER_ELEMENT:
            self._launch = rows.prepare(tuple(x.shape), layout, channels, (D, H, W),
                                        (Vd, Vh, Vw), (bd, bh, bw), n_words, scale is not None)
            return
        numel = x.numel()
        block = min(_BLOCK_INTERPRETED, triton.next_power_of_2(numel)) if interpreted() \
            else _BLOCK
        kernel = _apply_kernel[(triton.cdiv(numel, block),)]
        args = (numel, n_words, x.shape[1], D, H, W, Vd, Vh, Vw, bd, bh, bw, min(bd, Vd),
                min(bh, Vh))
        options = {"SHARED": channels != x.shape[1], "CHANNELS_LAST": layout == 1,
                   "NWORDS": _words(min(bw, Vw)),
                   "HAS_SCALE": scale is not None,
                   "WIDE": numel + block >= 1 << 31 or n_words * 32 >= 1 << 31, "BLOCK": block}

        def launch(x: torch.Tensor, out: torch.Tensor, bits: torch.Tensor,
                   scale: torch.Tensor) -> None:
            kernel(x, out, bits, scale, *args, **options)
        self._launch = launch

    def fits(self, x: torch.Tensor) -> bool:
        """Whether ``x`` has the geometry this call was prepared for."""
        return (x.shape == self.shape and x.dtype == self.dtype and x.stride() == self.stride
                and x.device == self.device)

    def __call__(self, x: torch.Tensor, k0: int | torch.Tensor,
                 k1: int | None = None) -> torch.Tensor:
        """The mask drawn from the key ``(k0, k1)`` applied to ``x``: a new tensor. ``k0`` alone
        may be the key as an int64 tensor on ``x``'s device (read by the kernel:
        :func:`..key_words`)."""
        out = torch.empty_like(x)
        bits = self._seeds(k0, k1)
        self._launch(x, out, bits, self.scale if self.scale is not None else x)
        return out


def prepare(x: torch.Tensor, scale: torch.Tensor | None, thresh: tuple[int, ...],
            channels: int, valid: tuple[int, ...], blocks: tuple[int, ...]) -> Prepared | None:
    """:func:`block_drop`'s launches prepared for tensors like ``x``; ``None`` where a call of
    :func:`block_drop` is no launch (an empty tensor, no seeds) or ``x``'s memory order is
    neither contiguous nor channels-last (copied at each call)."""
    layout = layout_of(x)
    if layout is None or x.numel() == 0 or thresh[0] >= 1 << 32:
        return None
    return Prepared(x, layout, scale, seeds.thresholds_on(thresh, x.device), channels, valid,
                    blocks)


def block_drop(x: torch.Tensor, scale: torch.Tensor | None, key: seeds.Key,
               thresh: tuple[int, ...], channels: int, valid: tuple[int, ...],
               blocks: tuple[int, ...]) -> torch.Tensor:
    """``x * scale`` with the blocks of the seeds drawn from ``key`` zeroed (the CPU kernel's
    seeds, :func:`..cext.blockdrop`'s values for float32 and float64 ``x``). ``key``: the two
    words, or ``(tensor,)``: the int64 key on ``x``'s device, read there (:func:`..key_words`).

    ``x``: channels-first ``(B, C, *spatial)``, 1 to 3 spatial dims, any float dtype (half
    precision is multiplied in float32, then rounded); contiguous or channels-last (other
    layouts are copied first), the output in the same layout. ``scale``: the multiplier of each
    spatial position (broadcast to the spatial sizes; float32, or float64 for a float64 ``x``),
    or None for 1. ``thresh``: the generator's thresholds (:func:`..cext.thresholds`).
    ``channels``: 1 for a mask shared by the channels, else ``C``. ``valid``: the seed grid's
    spatial sizes; ``blocks``: the block.
    """
    if layout_of(x) is None:
        x = x.contiguous()
    if x.numel() == 0:
        return torch.empty_like(x)
    if thresh[0] >= 1 << 32:  # no seeds at all: the scale alone
        return x * scale.to(x.dtype) if scale is not None else x.clone()
    call = prepare(x, scale, thresh, channels, valid, blocks)
    assert call is not None  # a dense layout, elements, seeds: checked above
    return call(x, *key)


def applies(x: torch.Tensor) -> bool:
    """Whether :func:`block_drop` takes ``x`` (a float tensor of 3 to 5 dims)."""
    return x.is_floating_point() and 3 <= x.dim() <= 5 and math.prod(x.shape) > 0
