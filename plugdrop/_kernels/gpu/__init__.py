"""Triton kernels for accelerator tensors. Private.

- :mod:`.seeds`      DropBlock's seeds by the C kernel's generator (the same seeds for the same
  key, so the same mask on every device)
- :mod:`.rows`       the pass over ``x`` on maps at most 64 wide: each map row's mask made
  once, the blocks grown and applied with the scale
- :mod:`.blockdrop`  DropBlock and Dropout2d: the pass over wider maps, the launches prepared
  once per geometry
- :mod:`.noise`      Gaussian noise fused with the add or multiply (one pass)
- :mod:`.common`     what the kernels share (rounding to bfloat16 as a GPU does)

Triton ships with PyTorch's CUDA wheels. Where it is missing, or fails to compile a kernel,
:func:`available` is false and the dispatch takes the torch-op paths (the same law of masks).
A CPU tensor runs these kernels only when a test asks for it (:data:`ON_CPU`) in a process
started with ``TRITON_INTERPRET=1`` (Triton's interpreter: slow but exact, which is how
their exactness is proven on machines without a GPU; the test suite sets it where no GPU is).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

from ..._compat import constant_result

__all__ = ["ON_CPU", "available", "interpreted", "runs_on", "serves"]

#: Run the kernels on CPU tensors too, through Triton's interpreter (tests switch it on).
ON_CPU = False


@functools.lru_cache(maxsize=1)
def _triton() -> Any:
    if os.environ.get("PLUGDROP_NO_TRITON", "") not in ("", "0"):
        return None
    try:
        import triton
        import triton.language  # noqa: F401
    except Exception:  # not installed, or a build that cannot load here
        return None
    return triton


@constant_result
def available() -> bool:
    """Whether Triton can be imported (``PLUGDROP_NO_TRITON=1`` says no)."""
    return _triton() is not None


def serves(device: torch.device) -> bool:
    """Whether these kernels serve tensors on ``device``: a CUDA (or ROCm) device with Triton,
    or the CPU while :data:`ON_CPU` is set under Triton's interpreter."""
    if device.type == "cuda":
        return available()
    return ON_CPU and device.type == "cpu" and interpreted()


def runs_on(x: torch.Tensor) -> bool:
    """:func:`serves` of ``x``'s device."""
    return serves(x.device)


_INTERPRETED: list[bool] = []


@constant_result
def interpreted() -> bool:
    """Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET=1`` when this
    process first asked)."""
    if not _INTERPRETED:
        triton = _triton()
        _INTERPRETED.append(triton is not None and bool(triton.knobs.runtime.interpret))
    return _INTERPRETED[0]
