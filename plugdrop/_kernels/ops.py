"""The fused DropBlock kernel as a torch custom op, for a 0-dim tensor ``p`` (what
``torch.compile`` traces). Private.

Inductor cannot see into the C kernel, and its own route (a random number per position from
its CPU generator, blocks grown by a sliding-window OR) costs 20-30x the eager kernel; as an
opaque op the compiled graph calls the same kernel as eager mode: compiling never makes
DropBlock slower, and ``p`` stays a graph input (one graph for a whole ramp). The op reads
``p`` on the host (a CPU tensor: no device synchronization involved).

On an accelerator (the Triton kernels) the key is drawn on the device by the compiled graph
(graph-safe: under ``mode="reduce-overhead"`` each replay draws a new one), and the op is
tagged ``cudagraph_unsafe`` where torch has the tag: inductor's CUDA graphs are cut around it,
so that it reads each step's ``p`` on the host and the constants it keeps per ``p`` are made
outside a graph's memory pool (torch without the tag skips CUDA graphs for a graph with a CPU
``p``).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from .._compat import constant_result
from .._device import on_device
from . import autograd as KA
from . import cext, geometry, gpu


#: ``cudagraph_unsafe`` where this torch has it (and ``custom_op`` takes tags: torch 2.5 on)
_UNSAFE = getattr(torch.Tag, "cudagraph_unsafe", None)
_TAGS: dict[str, Any] = {"tags": (_UNSAFE,)} if _UNSAFE is not None else {}
#: The schema, written out: torch 2.4 cannot infer it from this module's annotations (strings,
#: under ``from __future__ import annotations``; ``list[int]``)
_SCHEMA = "(Tensor x, Tensor p, Tensor key, int channels, int[] blocks, bool expected) -> Tensor"


@torch.library.custom_op("plugdrop::block_drop", mutates_args=(), schema=_SCHEMA, **_TAGS)
def block_drop(x: torch.Tensor, p: torch.Tensor, key: torch.Tensor, channels: int,
               blocks: list[int], expected: bool) -> torch.Tensor:
    """``x`` with DropBlock applied at probability ``p`` (the fused kernel, seeds drawn from
    ``key``: on the CPU, or on ``x``'s device for the Triton kernels, which read it there);
    ``expected``: rescale by the inverse keep probability, else not at all."""
    scale, valid, bl, thresh = _plan(float(p), tuple(x.shape[2:]), tuple(blocks), expected,
                                     x.dtype, x.device)
    if math.prod(valid) == 0:  # pragma: no cover - blocks are clipped to the map
        return x * scale
    return KA.hashed_block_drop(x, scale, key, channels, valid, bl, thresh)


@functools.lru_cache(maxsize=256)
def _plan(p: float, sizes: tuple[int, ...], blocks: tuple[int, ...], expected: bool,
          dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, tuple[int, ...], tuple[int, ...],
                                       tuple[int, ...]]:
    """What the kernel needs for one ``p`` and geometry (the scale map in ``dtype``, the valid
    seed grid, the thresholds), on ``x``'s device, computed once: a compiled graph calls the op every step, and
    at a constant ``p`` (after a ramp) each call would otherwise rebuild them (about 60 us)."""
    q = geometry.solve_keep(p, sizes, blocks)
    if KA.USE_TRITON and gpu.serves(device):
        # The Triton kernel's scale: float32 (float64 for float64 tensors), on the device.
        dtype = torch.float64 if dtype == torch.float64 else torch.float32
    if expected:
        scale = geometry.scale_map(q, sizes, blocks, torch.device("cpu"), torch.float32)
        scale = on_device(scale.to(dtype).expand(sizes).contiguous(), device)
    else:
        scale = on_device(torch.ones(sizes, dtype=dtype), device)
    valid = tuple(s - b + 1 for s, b in zip(sizes, blocks))
    return scale, valid, blocks, cext.thresholds(1.0 - q)


@block_drop.register_fake
def _(x: torch.Tensor, p: torch.Tensor, key: torch.Tensor, channels: int, blocks: list[int],
      expected: bool) -> torch.Tensor:
    return torch.empty_like(x)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    _, p, key, channels, blocks, expected = inputs
    ctx.save_for_backward(p, key)
    ctx.meta = (channels, blocks, expected)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    # The same masking of the gradient, through the op itself: differentiable again.
    p, key = ctx.saved_tensors
    return block_drop(grad, p, key, *ctx.meta), None, None, None, None, None


block_drop.register_autograd(_backward, setup_context=_setup_context)


@constant_result
def _kernel_built() -> bool:
    return cext.library() is not None


def host_p(device: torch.device) -> bool:
    """Whether DropBlock's ``p`` under ``torch.compile`` is best a 0-dim CPU tensor for
    tensors on ``device``: an accelerator that the Triton kernel serves (:func:`block_drop`
    reads ``p`` on the host to make its thresholds and scale, which on the device would
    synchronize)."""
    return device.type != "cpu" and KA.USE_TRITON and gpu.serves(device)


def applies(x: torch.Tensor, p: torch.Tensor, rescale: str) -> bool:
    """Whether :func:`block_drop` serves ``x``: the Triton kernel's tensors with ``p`` on the
    CPU, or a CPU float tensor of a layout the C kernel takes (the kernel built and switched
    on)."""
    if rescale == "count":
        return False
    if KA.triton_applies(x):
        return p.device.type == "cpu"
    return (KA.USE_CEXT and x.device.type == "cpu"
            and x.dtype in (torch.float32, torch.float64) and 3 <= x.dim() <= 5
            and cext.sample_layout(x) is not None and _kernel_built())
