"""What the Triton kernels share. Private; imported only where Triton is."""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["narrow"]


@triton.jit
def narrow(y, like):
    # y (float32, or float64 for float64 tensors) in like's dtype. bfloat16 is rounded to
    # nearest even by hand: the GPU's rounding, which Triton's interpreter does not do (it
    # truncates), so both give the GPU's values; NaN stays NaN.
    if like.dtype == tl.bfloat16:
        u = y.to(tl.uint32, bitcast=True)
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        return tl.where(y != y, y.to(tl.bfloat16), u.to(tl.uint16).to(tl.bfloat16, bitcast=True))
    else:
        return y.to(like.dtype)
