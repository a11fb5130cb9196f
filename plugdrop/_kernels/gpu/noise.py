"""Gaussian noise on accelerators in one Triton kernel: ``x + std * z`` or
``x * (1 + std * z)``, ``z`` standard normal per element from Triton's Philox generator keyed
by the two words plugdrop draws from torch's generator (so ``torch.manual_seed`` reproduces it
and the backward of the multiplicative noise redraws ``z`` from the key). One pass: ``x`` read
once, the output written once (torch's ``randn_like`` and add make four passes). Each Philox
draw makes four normals (two Box-Muller pairs), as torch's own ``randn`` uses them: element
``i`` takes normal ``i % 4`` of the draw at counter ``i // 4``, the same numbers for any tile
(on a GPU and in the interpreter). Private; imported only where Triton is.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .runtime import interpreted
from .common import block_range, narrow

__all__ = ["noise"]

#: elements per program (four per Philox draw): on a GPU, and in the interpreter
_BLOCK, _BLOCK_INTERPRETED = 1024, 1 << 16


@triton.jit(do_not_specialize=["seed", "std"])
def _noise_kernel(x_ptr, out_ptr, key_ptr, numel, seed, std, MULTIPLICATIVE: tl.constexpr,
                  KEY_PTR: tl.constexpr, WIDE: tl.constexpr, DRAWS: tl.constexpr):
    # DRAWS Philox counters q, four elements 4 q + r each (a tile of 4 DRAWS elements in
    # memory order). Philox's seed: ``seed``, or, with KEY_PTR, made on the device from the
    # two int64 key words at key_ptr as the host makes it (a CUDA graph's replay writes a new
    # key there).
    q = block_range(DRAWS, WIDE)
    r = tl.arange(0, 4)
    i = q[:, None] * 4 + r[None, :]
    inside = i < numel
    x = tl.load(x_ptr + i, mask=inside, other=0)
    if KEY_PTR:
        seed = ((tl.load(key_ptr + 1) & 0x7FFFFFFF) << 32) | (tl.load(key_ptr) & 0xFFFFFFFF)
    z0, z1, z2, z3 = tl.randn4x(seed, q)
    z = tl.where(r[None, :] == 0, z0[:, None],
                 tl.where(r[None, :] == 1, z1[:, None],
                          tl.where(r[None, :] == 2, z2[:, None], z3[:, None])))
    if x.dtype == tl.float64:  # float64 stays float64; the others are computed in float32
        xf = x
        zf = z.to(tl.float64)
    else:
        xf = x.to(tl.float32)
        zf = z
    if MULTIPLICATIVE:
        y = xf + std * xf * zf
    else:
        y = xf + std * zf
    out = narrow(y, x)
    tl.store(out_ptr + i, out, mask=inside)


def noise(x: torch.Tensor, key: tuple[int, int] | tuple[torch.Tensor], std: float,
          multiplicative: bool) -> torch.Tensor:
    """``x + std * z`` (``x * (1 + std * z)`` with ``multiplicative``), ``z`` drawn per element
    in memory order from ``key`` (two words, or ``(tensor,)``: the int64 key on ``x``'s
    device, read there: :func:`..key_words`); ``x`` contiguous (other layouts are copied
    first), any float dtype (half precision computed in float32, then rounded)."""
    x = x.contiguous()
    out = torch.empty_like(x)
    numel = x.numel()
    if numel == 0:
        return out
    on_device = isinstance(key[0], torch.Tensor)
    if on_device:
        seed, key_t = 0, key[0]
    else:
        k0, k1 = key  # type: ignore[misc]
        seed, key_t = ((k1 & 0x7FFFFFFF) << 32) | (k0 & 0xFFFFFFFF), x
    block = max(4, min(_BLOCK_INTERPRETED, triton.next_power_of_2(numel))) if interpreted() \
        else _BLOCK
    _noise_kernel[(triton.cdiv(numel, block),)](x, out, key_t, numel, seed, float(std),
                                                MULTIPLICATIVE=multiplicative,
                                                KEY_PTR=on_device,
                                                WIDE=numel + block >= 1 << 31,
                                                DRAWS=block // 4)
    return out
