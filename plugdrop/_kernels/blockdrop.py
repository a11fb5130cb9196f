"""DropBlock's and Dropout2d's dispatch, in one place: which kernel serves a call, the plans and
caches that make a repeated call cheap, and the eager fast paths the hooks take. Private.

DropBlock (:func:`drop_block`), with its settings checked by the caller:

- a 0-dim tensor ``p`` (``torch.compile``): the fused kernel as a custom op (:mod:`.ops`) on CPU,
  else plain tensor ops (:func:`_drop_block_traced`);
- a float ``p``, the fused C kernel where it applies (seeds from a key of torch's generator, one
  pass, no tensor saved: the backward redraws the mask from the key); a :class:`FusedPlan` per
  geometry and ``p`` is remembered, so that a repeated call of the same shape skips the layout
  checks and the geometry, and runs the kernel's call prepared once;
- else sparse seeds (:mod:`.draws`, O(p * numel)) or the dense mask (:mod:`.dense`).

Dropout2d (:func:`dropout2d`) runs on the same fused kernel with the whole map as the block
where that is faster than a broadcast multiply, and keeps, for the hooks, the shapes it has
checked (:func:`dropout2d_eager`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import _compat, _layout
from .._device import PerDevice, on_device
from ..errors import ShapeError
from . import autograd as KA
from . import cext, dense, draws, geometry, gpu
from . import ops as kernel_ops

__all__ = ["FUSED_MAX_MAP", "FUSED_MIN_NUMEL", "MASK_MUL_MAX_NUMEL", "FusedPlan", "drop_block",
           "dropout2d", "dropout2d_cached", "dropout2d_fused", "plan_for", "remember_map"]

Number = float | torch.Tensor

_ONE = PerDevice(1.0)


def _is_zero(p: Number) -> bool:
    return not isinstance(p, torch.Tensor) and p == 0.0


#: Up to this many elements (float32 and float64, where the multiplier is exact), a fused plan
#: multiplies ``x`` by its mask: the kernel run on ones gives the multiplier (``scale`` where
#: kept, 0 where dropped) and ``x * multiplier`` is one native op with a native backward. At
#: such sizes a call's cost is the host's work, and this saves the autograd Function, its
#: Python backward and the kernel's second call (the redraw), for 4 bytes per element saved
#: (16 KiB at most). The same mask and values (``x * scale``; a dropped element is ``x * 0``, a
#: signed zero, NaN for an infinite ``x``, as in torch's dropout); larger tensors keep the
#: redraw, which saves nothing.
MASK_MUL_MAX_NUMEL = 4096


class FusedPlan:
    """What the fused kernel needs for one geometry and ``p``, decided once: applied to a
    channels-first ``x`` (its own view), it draws a key and runs the kernel. ``meta``:
    channels, valid seed grid, blocks, thresholds; the kernel's call (``call``) is prepared for
    tensors like ``like`` (the view it is made for; a repeated call's tensor has its shape,
    strides and dtype). A :class:`~.autograd.KeyedPlan`: the autograd op saves the plan and the
    key, and the backward runs the same prepared call on the gradient."""

    __slots__ = ("scale", "meta", "call", "ones", "triton", "masker")
    linear = True

    def __init__(self, scale: torch.Tensor, meta: tuple[Any, ...], like: torch.Tensor) -> None:
        self.triton = KA.triton_applies(like)
        if self.triton:
            # The Triton kernel: its scale map as it reads it (float32, float64 for float64
            # tensors, on the device), converted once per plan.
            want = torch.float64 if like.dtype == torch.float64 else torch.float32
            with _compat.constants():
                scale = on_device(scale.to(dtype=want).expand(like.shape[2:]).contiguous(),
                                  like.device)
            call: Any = KA.gpu_blockdrop().prepare(like, scale, meta[3], meta[0], meta[1],
                                                   meta[2])
        else:
            call = cext.prepare(like, scale, meta[3], meta[2], shared=meta[0] != like.shape[1])
        self.scale = scale
        self.meta = meta
        self.call = call
        # A small tensor is multiplied by its mask (below): the ones the mask is drawn on, laid
        # out as the tensors of the plan (so that the prepared call fits them).
        self.ones: torch.Tensor | None = None
        # ... by the C kernel's call bound to them once: ``masker()`` draws a key and the mask
        self.masker: Any = None
        if like.numel() <= MASK_MUL_MAX_NUMEL and like.dtype in (torch.float32, torch.float64):
            with _compat.constants():
                self.ones = torch.empty_strided(like.shape, like.stride(), dtype=like.dtype,
                                                device=like.device).fill_(1.0)
            if type(call) is cext.Prepared:
                self.masker = call.bound(self.ones)

    def key(self, x: torch.Tensor) -> tuple[Any, Any]:
        """A new key for a mask of ``x``: two ints from torch's CPU generator, or, for the
        Triton kernels while a CUDA graph captures (:func:`.gpu.keyed_on_device`), ``(key,
        None)``: the two words in a tensor drawn on the device by its own generator, which the
        kernels read there (a new mask at every replay)."""
        if self.triton and gpu.keyed_on_device(x):
            return gpu.draw_key(x), None
        return draws.draw_words()

    def run(self, x: torch.Tensor, k0: Any, k1: Any) -> torch.Tensor:
        """The mask of key ``(k0, k1)`` (:meth:`key`) applied to ``x`` (any tensor of the
        plan's shape: the prepared call where ``x`` fits it, else the kernel's general path)."""
        call = self.call
        words = (k0,) if k1 is None else (k0, k1)
        if call is not None and (KA.USE_CEXT or not isinstance(call, cext.Prepared)) \
                and call.fits(x):
            out = call(x, *words)
            if out is not None:
                return out
        return KA.hashed_block_drop(x, self.scale, k0 if k1 is None else (k0, k1), *self.meta)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Draw a key and apply its mask to ``x``, the view the plan was made for or a tensor
        of the same shape, strides and dtype (the plan's cache key)."""
        ones = self.ones
        if ones is not None:
            # The multiplier (``scale`` where kept, 0 where dropped) times x: one native op,
            # whose backward is native too (see MASK_MUL_MAX_NUMEL).
            masker = self.masker
            if masker is not None and not _compat.functorch_active():
                # the key read by the kernel where torch drew it, the call bound to the ones
                mult = masker()
                if mult is None:  # the kernel could not allocate: its general path
                    mult = self.run(ones, *draws.last_key())
                return x * mult
            k0, k1 = self.key(x)
            if not _compat.functorch_active():
                return x * self.run(ones, k0, k1)
            with _compat.constants():  # the multiplier a plain tensor, not jvp's
                mult = self.run(ones, k0, k1)
            return x * mult
        k0, k1 = self.key(x)
        if not _compat.forward_ad_active() and (
                not torch.is_grad_enabled()
                or (not x.requires_grad and not _compat.functorch_active())):
            # Nothing to differentiate (grad mode off, or an input that does not require a
            # gradient and no torch.func transform): the kernel without the autograd Function
            # around it (the same values: the Function's forward is this call).
            return self.run(x, k0, k1)
        return KA.KeyedDrop.apply(x, self, k0, k1)


#: The fused plan of each (shape, strides, dtype, device, p, (block size, shared, rescale),
#: switches) met on the default layout by DropBlock, and of each ("dropout2d", shape, strides,
#: dtype, device, p, switches) by Dropout2d: a repeated call skips the layout checks and the
#: geometry (what they decide depends on nothing else). Bounded: a schedule makes a new ``p``
#: per step.
_FUSED_PLANS: dict[tuple[Any, ...], FusedPlan] = {}
_FUSED_PLANS_MAX = 256


def _switches() -> tuple[bool, bool, bool]:
    """The switches that choose a kernel (part of a plan's key: a plan made under others is
    not reused when tests or benchmarks turn them)."""
    return KA.USE_CEXT, KA.USE_TRITON, gpu.ON_CPU


def plan_for(x: torch.Tensor, p: float, law: tuple[Any, ...]) -> FusedPlan | None:
    """DropBlock's fused plan remembered for ``x`` (its shape, strides, dtype and device) on
    the default layout at ``p`` and ``law`` (block size, shared channels, rescale), if a call
    made one: the hooks' eager path (one lookup, no check: the plan's key says that ``x``
    passed them)."""
    return _FUSED_PLANS.get((x.shape, x.stride(), x.dtype, x.device, p, law, KA.USE_CEXT,
                             KA.USE_TRITON, gpu.ON_CPU))


def _cached_plan(key: tuple[Any, ...]) -> FusedPlan | None:
    """The fused plan remembered under ``key``, unless ``torch.compile`` is tracing."""
    plan = _FUSED_PLANS.get(key)
    return None if plan is None or torch.compiler.is_compiling() else plan


def _remember_plan(key: tuple[Any, ...] | None, x: torch.Tensor, plan: FusedPlan) -> None:
    """Remember ``plan`` under ``key`` (None: not cacheable) if the kernel applies to ``x`` as
    given (what ``fused_applies`` said of its view, unpatched); bounded by clearing."""
    if key is None or not KA.fused_applies(x):
        return
    if len(_FUSED_PLANS) >= _FUSED_PLANS_MAX:
        _FUSED_PLANS.clear()
    _FUSED_PLANS[key] = plan


def drop_block(x: torch.Tensor, p: Number, blocks: int | tuple[int, ...],
               shared_channels: bool, layout: str | None, prefix_tokens: int | None,
               rescale: str) -> torch.Tensor:
    """:func:`plugdrop.functional.drop_block` with checked settings (shapes are still
    checked: a :class:`~plugdrop.ShapeError` names the shape and the fix)."""
    plan_key = None
    if not isinstance(p, torch.Tensor) and (KA.USE_CEXT or KA.USE_TRITON) and (
            layout is None or layout == "channels_first"):
        plan_key = (x.shape, x.stride(), x.dtype, x.device, p,
                    (blocks, shared_channels, rescale), *_switches())
        plan = _cached_plan(plan_key)
        if plan is not None:
            return plan(x)
    view, restore = _layout.to_channels_first(x, layout, (1, 2, 3), "drop_block",
                                              prefix_tokens)
    if _is_zero(p):
        return x
    sizes = tuple(view.shape[2:])
    if isinstance(blocks, tuple):
        if len(blocks) != len(sizes):
            raise ShapeError(
                f"block_size {blocks} has {len(blocks)} entries but the input has "
                f"{len(sizes)} spatial dims (shape {tuple(x.shape)})"
            )
    else:
        blocks = (blocks,) * len(sizes)
    if 0 in sizes or view.shape[0] == 0 or view.shape[1] == 0:
        return x
    blocks = tuple(min(b, s) for b, s in zip(blocks, sizes))
    if rescale != "count" and KA.USE_CEXT and cext.odd_layout(view):
        # A memory order the fused kernel does not take (a transposed or strided view): the
        # mask of the contiguous copy, as for the same values in any other layout.
        out = drop_block(view.contiguous(), p, blocks, shared_channels, "channels_first", None,
                         rescale)
        return restore(_layout.laid_out_as(out, view))
    b, c = view.shape[:2]
    channels = 1 if shared_channels else c
    if isinstance(p, torch.Tensor):
        if kernel_ops.applies(view, p, rescale):
            # on the device for the Triton kernel: compiled, a graph-safe draw there
            key = torch.randint(0, 2**32, (2,), dtype=torch.int64,
                                device=view.device if KA.triton_applies(view) else None)
            return restore(kernel_ops.block_drop(view, p, key, channels, list(blocks),
                                                 rescale == "expected"))
        return restore(_drop_block_traced(view, p, sizes, blocks, channels, rescale))
    q = geometry.solve_keep(float(p), sizes, blocks)
    gamma = 1.0 - q
    if rescale == "expected":
        scale = geometry.scale_map(q, sizes, blocks, view.device, torch.float32)
    else:
        scale = _ONE.get(view.device)
    valid = tuple(s - k + 1 for s, k in zip(sizes, blocks))
    n_seeds = b * channels * math.prod(valid)
    if (rescale != "count" and (KA.triton_applies(view) or (
            gamma <= draws.SPARSE_MAX_GAMMA and KA.fused_applies(view)))
            and not torch.compiler.is_compiling()):
        # The fused kernel (Triton's on an accelerator, at any rate: the seeds' walk costs
        # little beside the pass) draws the seeds from a key taken from torch's generator: one
        # pass over x, and 16 bytes saved for the backward.
        plan = FusedPlan(scale, (channels, valid, blocks, cext.thresholds(gamma)), view)
        _remember_plan(plan_key, x, plan)
        return restore(plan(view))
    if (rescale != "count" and draws.use_sparse(n_seeds, gamma, view.device)
            and channels == c):
        # Sparse seeds: O(p * numel) work besides one pass over x; nothing big saved.
        seeds = draws.sparse_seeds(n_seeds, gamma)
        out = KA.SparseBlockDrop.apply(view, scale.to(view.dtype), seeds,
                                       (channels, valid, blocks))
        return restore(out)
    if dense.pooled(view.device, n_seeds):
        keep = dense.block_kept(b, channels, sizes, blocks, gamma, view.device)
    else:
        keep = ~dense.block_dropped(b, channels, sizes, blocks, gamma, view.device)
    if rescale == "expected":
        if view.device.type != "cpu":
            # MaskMul selects from the scale, then casts to x's dtype: the map cast first
            # gives the same values without a full-size float32 multiplier.
            scale = geometry.scale_map_as(q, sizes, blocks, view.device, view.dtype)
        scale = geometry.broadcast_scale(scale, tuple(keep.shape[2:]))
    elif rescale == "count":
        # The paper's normalization over the whole tensor (a mask broadcast over channels or
        # whole axes has the same kept ratio).
        scale = float(keep.numel()) / keep.sum(dtype=torch.float32).clamp(min=1.0)
    return restore(KA.MaskMul.apply(view, keep, scale, None))


def _drop_block_traced(view: torch.Tensor, p: torch.Tensor, sizes: tuple[int, ...],
                       blocks: tuple[int, ...], channels: int, rescale: str) -> torch.Tensor:
    """DropBlock with a 0-dim tensor ``p``: plain tensor ops, no host reads (torch.compile)."""
    q = geometry.solve_keep_tensor(p, sizes, blocks).to(view.device)
    gamma = (1.0 - q).to(torch.float32)
    q = q.to(torch.float32)
    dropped = dense.block_dropped(view.shape[0], channels, sizes, blocks, gamma, view.device)
    if rescale == "expected":
        mult = torch.where(dropped, 0.0, torch.pow(q, -geometry.coverage_map(sizes, blocks,
                                                                             view.device)))
    else:
        mult = (~dropped).to(torch.float32)
        if rescale == "count":
            kept = mult.sum(dtype=torch.float32).clamp(min=1.0)
            mult = mult * (float(mult.numel()) / kept)
    return view * mult.to(view.dtype)


# ------------------------------------------------------------------------------ Dropout2d

#: From this many elements, Dropout2d runs on the fused kernel (below, the fixed cost of its
#: key and autograd Function is more than a broadcast multiply costs) ...
FUSED_MIN_NUMEL = 65536
#: ... on maps of fewer than this many elements (on larger maps torch's broadcast multiply
#: runs at the speed of ``x * x`` and the kernel's bit work would only add to it).
FUSED_MAX_MAP = 256


def dropout2d_fused(x: torch.Tensor) -> bool:
    """Whether Dropout2d of channels-first ``x`` runs on the fused kernel (by its size and its
    maps' size; the kernel's own conditions are :func:`~.autograd.fused_applies`)."""
    return (x.dim() >= 3 and x.numel() >= FUSED_MIN_NUMEL
            and x.numel() < FUSED_MAX_MAP * x.shape[0] * x.shape[1])


def dropout2d(x: torch.Tensor, p: Number, layout: str | None,
              prefix_tokens: int | None) -> torch.Tensor:
    """:func:`plugdrop.functional.dropout2d` with checked settings."""
    plan_key = None
    if (not isinstance(p, torch.Tensor) and (KA.USE_CEXT or KA.USE_TRITON)
            and (layout is None or layout == "channels_first") and dropout2d_fused(x)):
        plan_key = ("dropout2d", x.shape, x.stride(), x.dtype, x.device, p, *_switches())
        plan = _cached_plan(plan_key)
        if plan is not None:
            return plan(x)
    view, restore = _layout.to_channels_first(x, layout, (0, 1, 2, 3), "dropout2d",
                                              prefix_tokens)
    if _is_zero(p):
        return x
    if (not isinstance(p, torch.Tensor) and dropout2d_fused(view)
            and not torch.compiler.is_compiling() and (KA.USE_CEXT or KA.triton_applies(view))):
        if not KA.triton_applies(view) and cext.odd_layout(view):
            # A memory order the fused kernel does not take: the mask of the contiguous copy.
            out = dropout2d(view.contiguous(), p, "channels_first", None)
            return restore(_layout.laid_out_as(out, view))
        if KA.fused_applies(view):
            # The DropBlock kernel with the whole map as the block: one seed per map, drawn
            # with probability p, drops the map; one pass over x (a broadcast multiply by a
            # (B, C, 1, 1) mask is slow on small maps), 16 bytes and the scale saved for the
            # backward.
            sizes = tuple(view.shape[2:])
            scale = torch.full(sizes, 1.0 / (1.0 - p), dtype=view.dtype)
            meta = (view.shape[1], (1,) * len(sizes), sizes, cext.thresholds(float(p)))
            plan = FusedPlan(scale, meta, view)
            _remember_plan(plan_key, x, plan)
            return restore(plan(view))
    shape = (view.shape[0], view.shape[1]) + (1,) * (view.dim() - 2)
    return restore(view * draws.keep_multiplier(view, shape, p, True))


#: The channels-first float shapes (with their layout setting) Dropout2d's general path took
#: without raising -> the tensor of ones its per-channel mask is drawn from (with the scale of
#: the last ``p``: :class:`.draws.Ones`): the checks depend on the shape and the layout only.
#: Shared by all transform objects, never copied or pickled with them.
_CHECKED_MAPS: dict[tuple[Any, ...], draws.Ones] = {}


def dropout2d_cached(x: torch.Tensor, p: float, layout: str | None,
                     prefix_tokens: int | None) -> torch.Tensor | None:
    """Dropout2d in eager mode from a hook: tensors the fused kernel takes go to
    :func:`dropout2d` (its cached plan) with the float ``p``; channels-first float maps of a
    shape checked before get their mask in two torch calls. ``None`` for anything else: the
    caller takes its checked path (which raises on a bad shape, naming the layer), then
    :func:`remember_map`."""
    ones = _CHECKED_MAPS.get((x.shape, x.dtype, x.device, layout))
    if ones is not None:  # a shape met before (which the fused kernel does not take)
        if p == 0.0:
            return x
        return x * ones.mult(p, True)
    if dropout2d_fused(x):
        if x.is_floating_point() and (layout is None or layout == "channels_first"):
            return dropout2d(x, p, layout, prefix_tokens)
    return None


def remember_map(x: torch.Tensor, layout: str | None) -> None:
    """Record that Dropout2d's checked path took ``x``'s shape with ``layout`` (channels-first
    float maps the fused kernel does not take)."""
    if (x.is_floating_point() and (layout is None or layout == "channels_first")
            and not dropout2d_fused(x)):
        draws.remember_ones(_CHECKED_MAPS, (x.shape, x.dtype, x.device, layout),
                            (x.shape[0], x.shape[1]) + (1,) * (x.dim() - 2))
