"""DropBlock's seeds on accelerators: the C kernel's generator (``_csrc/blockdrop.c``,
:func:`..cext.hashed_seeds`) as a Triton kernel. The seed grid ``(B, channels, *valid)`` is cut
into blocks of 256 positions, each block's seeds at geometric gaps drawn from two
counter-based hashes of ``(key, 256 j + k)``. One lane walks one block and writes its seeds as
256 bits (8 words of 32), whole: no atomics and no zeroed buffer, ``total / 8`` bytes in all.
Private; imported only where Triton is.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from ..._device import on_device
from .runtime import interpreted

__all__ = ["Key", "prepare", "seed_bits", "thresholds_on"]

#: blocks of the generator walked by one program: on a GPU, and in the interpreter (numpy:
#: the fewer programs the faster)
_LANES, _LANES_INTERPRETED = 64, 4096
_M32 = 0xFFFFFFFF


@triton.jit
def _mix(x):
    # Wellons' lowbias32 on uint32 (products wrap, as the C kernel's do)
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


@triton.jit(do_not_specialize=["k0", "k1"])
def _seeds_kernel(bits_ptr, thr_ptr, key_ptr, first, n_blocks, total, k0, k1,
                  LANES: tl.constexpr, KEY_PTR: tl.constexpr):
    # One lane per block j = first + lane of 256 seed-grid positions; its seeds' bits go to
    # words 8 (j - first) .. 8 (j - first) + 7. The key: the words k0, k1 (int32 bits), or,
    # with KEY_PTR, the two int64 words at key_ptr (on the device: a CUDA graph's replay
    # writes a new key there before this launch reads it).
    lane = tl.program_id(0).to(tl.int64) * LANES + tl.arange(0, LANES)
    live = lane < n_blocks
    j = first + lane
    idx = tl.arange(0, 16)
    t = tl.load(thr_ptr + idx)  # T_16 .. T_1, ascending, int64
    r = tl.load(thr_ptr + 16 + idx)  # 0, R_15 .. R_1, ascending
    if KEY_PTR:
        key0 = (tl.load(key_ptr) & 0xFFFFFFFF).to(tl.uint32)
        key1 = (tl.load(key_ptr + 1) & 0xFFFFFFFF).to(tl.uint32)
    else:
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
        # A(n) = mix(mix(lo ^ k0) ^ hi ^ k1), B(n) = mix(mix(lo ^ k1) ^ hi ^ k0)
        a = _mix(_mix(c ^ key0) ^ hi ^ key1)
        b = _mix(_mix(c ^ key1) ^ hi ^ key0)
        above_t = tl.sum((t[None, :] <= a.to(tl.int64)[:, None]).to(tl.int32), axis=1)
        above_r = tl.sum((r[None, :] <= b.to(tl.int64)[:, None]).to(tl.int32), axis=1)
        gap = 16 * (16 - above_t) + 16 - above_r
        pos = tl.where(alive > 0, pos + 1 + gap, pos)
        hit = (alive > 0) & (pos < 256) & (j * 256 + pos < total)
        bit = tl.where(hit, 1 << (pos & 31), 0)
        words = words | tl.where(cols[None, :] == (pos >> 5)[:, None], bit[:, None], 0)
        alive = (hit & (pos < 255)).to(tl.int32)  # a block's walk ends at the grid's end too
        k += 1
    tl.store(bits_ptr + lane[:, None] * 8 + cols[None, :], words, mask=live[:, None])


_THRESHOLDS: dict[tuple[tuple[int, ...], torch.device], torch.Tensor] = {}


def thresholds_on(thresh: tuple[int, ...], device: torch.device) -> torch.Tensor:
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


Key = tuple[int, int] | tuple[torch.Tensor]


def prepare(thresholds: torch.Tensor, total: int,
            first_block: int = 0) -> Callable[..., torch.Tensor]:
    """:func:`seed_bits` for ``thresholds`` and ``total``, its grid and arguments decided
    once: ``draw(k0, k1)`` (the key's words) or ``draw(key)`` (the int64 key tensor on the
    device, read by the kernel) returns the bits."""
    n_blocks = max((total + 255) // 256 - first_block, 1)
    lanes = min(_LANES_INTERPRETED, triton.next_power_of_2(n_blocks)) if interpreted() \
        else _LANES
    kernel = _seeds_kernel[(triton.cdiv(n_blocks, lanes),)]
    device = thresholds.device

    def draw(k0: int | torch.Tensor, k1: int | None = None) -> torch.Tensor:
        bits = torch.empty(n_blocks * 8, dtype=torch.int32, device=device)
        if isinstance(k0, torch.Tensor):  # read by the kernel (thresholds: a stand-in)
            kernel(bits, thresholds, k0, first_block, n_blocks, total, 0, 0, LANES=lanes,
                   KEY_PTR=True)
        else:
            kernel(bits, thresholds, thresholds, first_block, n_blocks, total, _signed(k0),
                   _signed(k1 or 0), LANES=lanes, KEY_PTR=False)
        return bits
    return draw


def seed_bits(thresholds: torch.Tensor, key: Key, total: int,
              first_block: int = 0) -> torch.Tensor:
    """The seeds the generator draws among seed-grid positions ``256 * first_block`` to
    ``total - 1``, as bits: int32 words, bit ``n % 32`` of word ``n // 32`` set if position
    ``256 * first_block + n`` is a seed (positions from ``total`` on are never set).
    ``thresholds``: the 32 int64 thresholds on the device; ``key``: its two words, or
    ``(tensor,)``, the two int64 words on the device (:func:`..key_words`)."""
    return prepare(thresholds, total, first_block)(*key)
