"""What the Triton kernels share. Private; imported only where Triton is."""

from __future__ import annotations

import triton
import triton.language as tl

from .runtime import interpreted

__all__ = ["block_range", "narrow"]

#: whether bfloat16 is rounded by hand (in Triton's interpreter, which truncates)
_BY_HAND = tl.constexpr(interpreted())


@triton.jit
def narrow(y, like):
    # y (float32, or float64 for float64 tensors) in like's dtype. bfloat16 rounds to nearest
    # even: a GPU's own conversion (one instruction for two values); in the interpreter, which
    # truncates, by hand on the bits, so both give the GPU's values; NaN stays NaN.
    if like.dtype == tl.bfloat16:
        if _BY_HAND:
            u = y.to(tl.uint32, bitcast=True)
            u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            return tl.where(y != y, y.to(tl.bfloat16),
                            u.to(tl.uint16).to(tl.bfloat16, bitcast=True))
        else:
            return y.to(tl.bfloat16)
    else:
        return y.to(like.dtype)


@triton.jit
def block_range(BLOCK: tl.constexpr, WIDE: tl.constexpr):
    # This program's BLOCK consecutive indices along the grid's first axis: int64 where the
    # indices may pass 2**31 (WIDE), else int32 (cheaper arithmetic)
    if WIDE:
        return tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        return tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)

