"""Autograd functions that save as little as possible for the backward, and the sparse
block-zeroing (fused C kernel or torch ops). Private.

Each multiplies ``x`` by a mask (a diagonal Jacobian), so its backward and its forward-mode
derivative are the same masking applied to the gradient or the tangent, through the Function
itself: they are differentiable again (double backward, Hessian-vector products) and work
under ``torch.func.jvp``, while what is saved stays small:

- ``KeyedDrop`` (the fused kernels' DropBlock and Dropout2d) keeps the two key words of the
  kernel's generator and the plan of its call, no tensor, and regenerates the mask in the
  backward;
- ``SparseBlockDrop`` saves the seeds of the dropped blocks (a few bytes per block);
- ``MaskMul`` saves a boolean mask (1 byte per element).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import torch

from .. import _compat
from . import cext, gpu

def _dense_strides(t: torch.Tensor) -> bool:
    """True if ``t`` covers exactly ``t.numel()`` consecutive storage elements (any order)."""
    return cext.is_dense(t.shape, t.stride())


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


class _Pair:
    """One autograd op ``out = op(x, a, b, c)`` as two Functions: one in the classic style (its
    ``apply`` is cheap) and, while a ``torch.func`` transform runs, one in the ``setup_context``
    style that ``torch.func`` requires (its ``apply`` binds arguments with ``inspect``: about
    15 us a call). ``save(ctx, a, b, c)`` keeps what ``backward`` and ``jvp`` need."""

    eager: Any
    func: Any

    def _make(self, name: str, op: Callable[..., torch.Tensor], save: Callable[..., None],
              backward: Callable[..., Any], jvp: Callable[..., Any]) -> None:
        def eager_forward(ctx: Any, x: torch.Tensor, a: Any, b: Any, c: Any) -> torch.Tensor:
            save(ctx, a, b, c)
            return op(x, a, b, c)

        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            save(ctx, *inputs[1:])

        common = {"backward": staticmethod(backward), "jvp": staticmethod(jvp)}
        self.eager = type(name, (torch.autograd.Function,),
                          {"forward": staticmethod(eager_forward), **common})
        self.func = type(name, (torch.autograd.Function,),
                         {"forward": staticmethod(op),
                          "setup_context": staticmethod(setup_context), **common})

    def apply(self, x: torch.Tensor, a: Any, b: Any, c: Any) -> torch.Tensor:
        fn = self.func if _compat.functorch_active() else self.eager
        return fn.apply(x, a, b, c)


class _SelfAdjoint(_Pair):
    """An autograd op ``out = op(x, a, b, meta)``, linear in ``x`` with a diagonal Jacobian
    (a masking); ``a`` and ``b`` are the small tensors it needs, ``meta`` a tuple of Python
    values. Its backward and its jvp are the same masking of the gradient or the tangent,
    through the op itself, so both are differentiable again.

    """

    def __init__(self, name: str, op: Callable[..., torch.Tensor],
                 linear: Callable[[Any], bool] = lambda meta: True) -> None:
        # With ``linear(meta)`` false, the op is ``x`` plus a constant: its Jacobian is the
        # identity.
        def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
            if not linear(ctx.meta):
                return grad, None, None, None
            a, b = ctx.saved_tensors
            return self.apply(grad, a, b, ctx.meta), None, None, None

        def jvp(ctx: Any, x_t: torch.Tensor, *_: Any) -> torch.Tensor:
            if not linear(ctx.meta):
                return x_t
            a, b = ctx.saved_tensors
            return self.apply(x_t, a, b, ctx.meta)

        def save(ctx: Any, a: torch.Tensor, b: torch.Tensor, meta: Any) -> None:
            ctx.save_for_backward(a, b)
            ctx.save_for_forward(a, b)
            ctx.meta = meta

        self._make(name, op, save, backward, jvp)


class _Keyed(_Pair):
    """An autograd op ``out = plan.run(x, k0, k1)``: a masking of ``x`` that ``plan`` (a
    :class:`KeyedPlan`, the kernel's call prepared once per geometry) draws from the key
    ``(k0, k1)``, two Python ints. Nothing is saved but the plan and the key (no tensor); the
    backward and the jvp redraw the same masking of the gradient or the tangent, through the op
    itself where that must be differentiable again (``create_graph``, ``torch.func``, forward
    AD), else by the plan's call directly (no second Function: the host cost of a plain
    backward is one kernel call).
    """

    def __init__(self, name: str) -> None:
        def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
            plan, k0, k1 = ctx.keyed
            if not plan.linear:
                return grad, None, None, None
            if (torch.is_grad_enabled() or _compat.functorch_active()
                    or _compat.forward_ad_active()):
                return self.apply(grad, plan, k0, k1), None, None, None
            return plan.run(grad, k0, k1), None, None, None

        def jvp(ctx: Any, x_t: torch.Tensor, *_: Any) -> torch.Tensor:
            plan, k0, k1 = ctx.keyed
            return self.apply(x_t, plan, k0, k1) if plan.linear else x_t

        def op(x: torch.Tensor, plan: Any, k0: int, k1: int) -> torch.Tensor:
            return plan.run(x, k0, k1)

        def save(ctx: Any, plan: Any, k0: int, k1: int) -> None:
            ctx.keyed = (plan, k0, k1)

        self._make(name, op, save, backward, jvp)


class KeyedPlan(Protocol):
    """What :data:`KeyedDrop` runs: ``run(x, k0, k1)`` draws the masking of key ``(k0, k1)``
    and applies it to any ``x`` of the plan's shape (its prepared call where ``x`` fits it);
    ``linear``: whether the op is a masking (else ``x`` plus a constant: its Jacobian is the
    identity)."""

    linear: bool

    def run(self, x: torch.Tensor, k0: int, k1: int) -> torch.Tensor: ...


#: ``out = plan.run(x, k0, k1)`` (a :class:`KeyedPlan`, e.g. DropBlock's and Dropout2d's fused
#: plans); the backward redraws the mask from the key, nothing saved but the plan and the key.
KeyedDrop = _Keyed("KeyedDrop")


#: Use the fused C kernel when available (tests switch it off to compare the two paths).
USE_CEXT = True


#: Use the Triton kernels for accelerator tensors where Triton is (tests and benchmarks switch
#: it off to compare with the torch-op paths).
USE_TRITON = True


def triton_applies(x: torch.Tensor) -> bool:
    """Whether the fused Triton DropBlock kernel will run on ``x`` (a float tensor of 3 to 5
    dims on a device :func:`.gpu.runs_on`)."""
    return (USE_TRITON and x.is_floating_point() and 3 <= x.dim() <= 5
            and gpu.runs_on(x))


def fused_applies(x: torch.Tensor) -> bool:
    """Whether a fused kernel (Triton's on an accelerator, else the C kernel) will run on
    ``x``."""
    return triton_applies(x) or (USE_CEXT and cext.applies(x))


def gpu_blockdrop() -> Any:
    """The Triton DropBlock module (imports Triton: only once a tensor needs it)."""
    from .gpu import blockdrop

    return blockdrop


def sparse_block_drop(x: torch.Tensor, scale: torch.Tensor, seeds: torch.Tensor, channels: int,
                      valid: tuple[int, ...], blocks: tuple[int, ...]) -> torch.Tensor:
    """``x * scale`` with the blocks of ``seeds`` zeroed, in torch ops."""
    out = _dense_copy(x * scale)
    return _zero_blocks(out, seeds, channels, valid, blocks)


def hashed_block_drop(x: torch.Tensor, scale: torch.Tensor, key: torch.Tensor | tuple[int, int],
                      channels: int,
                      valid: tuple[int, ...], blocks: tuple[int, ...],
                      thresh: tuple[int, ...], call: Any = None) -> torch.Tensor:
    """``x * scale`` with the blocks of the seeds drawn from ``key`` (two int64 words, in a
    tensor or as ints) zeroed: the Triton kernels on an accelerator (the same seeds), the fused
    C kernel, or, where neither applies to ``x``, the same seeds from the generator's torch-op
    definition. ``call``:
    the kernel's call prepared for tensors like ``x`` (a :class:`.cext.Prepared`, or the
    Triton kernels' ``Prepared``), used if ``x`` fits it."""
    if triton_applies(x):
        words = gpu.key_words(key)  # a key on the device is read there (CUDA graphs)
        if call is not None and call.fits(x):  # the plan's prepared launches
            return call(x, *words)
        return gpu_blockdrop().block_drop(x, scale, words, thresh, channels, valid, blocks)
    k0, k1 = key if isinstance(key, tuple) else key.tolist()
    if USE_CEXT:
        if isinstance(call, cext.Prepared) and call.fits(x):
            out = call(x, k0, k1)
        else:
            out = cext.blockdrop(x, scale, (k0, k1), thresh, blocks,
                                 shared=channels != x.shape[1])
        if out is not None:
            return out
    seeds = cext.hashed_seeds((k0, k1), thresh, x.shape[0] * channels * math.prod(valid))
    return sparse_block_drop(x, scale, seeds, channels, valid, blocks)


def _mask_mul(x: torch.Tensor, keep: torch.Tensor, scale: torch.Tensor,
              meta: Any = None) -> torch.Tensor:
    return x * torch.where(keep, scale, 0).to(x.dtype)


#: ``out = x * scale`` with the blocks of ``seeds`` zeroed (``meta``: channels, valid,
#: blocks); the backward re-zeroes them from the saved seeds (a few bytes per block).
SparseBlockDrop = _SelfAdjoint(
    "SparseBlockDrop", lambda x, scale, seeds, meta: sparse_block_drop(x, scale, seeds, *meta))
#: ``out = x * where(keep, scale, 0)`` saving the boolean ``keep`` (1 byte per element) and
#: the small ``scale`` for the backward, instead of a float multiplier.
MaskMul = _SelfAdjoint("MaskMul", _mask_mul)

#: ``x + std * z`` or ``x * (1 + std * z)`` (``meta``: std, multiplicative, strides) with the
#: normal ``z`` the kernel draws from ``key`` (passed as both ``a`` and ``b``); the backward
#: of the multiplicative one redraws ``z``.
GaussianNoise = _SelfAdjoint(
    "GaussianNoise", lambda x, key, _, meta: _noise(x, key, *meta), linear=lambda meta: meta[1])


def _noise(x: torch.Tensor, key: torch.Tensor, std: float, multiplicative: bool,
           strides: tuple[int, ...]) -> torch.Tensor:
    if USE_TRITON and gpu.runs_on(x):
        from .gpu import noise  # imports Triton: only once a tensor needs it

        if x.stride() != strides:
            x = x.contiguous()  # the draw's memory order (strides are contiguous here)
        return noise.noise(x, gpu.key_words(key), std, multiplicative)
    out = cext.noise(x, key, std, multiplicative, strides)
    if out is None:
        raise RuntimeError("plugdrop: the noise kernel does not apply to this tensor")
    return out


#: Below this many elements torch's ``randn`` and an add cost less than the kernel's fixed cost
#: (drawing its key, the autograd Function).
NOISE_MIN_NUMEL = 16384


def noise_applies(x: torch.Tensor) -> bool:
    """Whether a fused noise kernel will run on ``x`` (Triton's on an accelerator for
    contiguous float tensors, the C kernel for float32 CPU tensors of a dense layout)."""
    if USE_TRITON and gpu.runs_on(x):
        return x.is_floating_point() and x.is_contiguous() and x.numel() > 0
    return (USE_CEXT and x.numel() >= NOISE_MIN_NUMEL and x.dtype == torch.float32
            and x.device.type == "cpu"
            and _dense_strides(x) and cext.library() is not None)
