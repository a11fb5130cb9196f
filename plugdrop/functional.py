"""Pure tensor functions behind plugdrop's transforms, usable without hooks.

Forward functions take an activation and return a tensor of the same shape, dtype, device and
memory format, connected to the autograd graph (they multiply by a mask; they never return a
fresh tensor of zeros). With ``training=False`` or a probability of exactly ``0`` they return
their input itself. Gradient functions take a gradient and return the transformed gradient.

Probabilities and other settings are Python numbers or 0-dim tensors. A number is checked and
raises on a bad value; a tensor is used as it is (reading it on the host would synchronize with
the device), which is what ``torch.compile`` needs to trace a changing value without recompiling.

Randomness comes from torch's generators: ``torch.manual_seed`` reproduces every mask.

Each public function checks its settings and calls a private twin (``_drop_block``...) that
does not: the transforms check their settings once, at construction and at each schedule
step, and call the twins from the hooks.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from . import _checks, _compat, _layout
from ._device import PerDevice
from ._kernels import autograd as KA
from ._kernels import cext, dense, draws, geometry
from ._kernels import ops as kernel_ops
from .errors import SettingError, ShapeError

__all__ = [
    "drop_block",
    "dropout2d",
    "dropout",
    "drop_path",
    "gaussian_noise",
    "clip_grad_value",
    "clip_grad_norm",
    "scale_grad",
    "grad_noise",
    "mixup",
    "cutmix",
    "drop_head",
    "clip_grad_adaptive",
    "centralize_grad",
    "patchup",
]

Number = float | torch.Tensor

_RESCALE = ("expected", "count", "none")


def _is_zero(p: Number) -> bool:
    return not isinstance(p, torch.Tensor) and p == 0.0


def _keep_scale(p: Number) -> Number:
    return 1.0 / (1.0 - p)


def drop_block(
    x: torch.Tensor,
    p: Number,
    block_size: int | tuple[int, ...] = 7,
    *,
    shared_channels: bool = False,
    layout: str | None = None,
    prefix_tokens: int | None = None,
    rescale: str = "expected",
    training: bool = True,
) -> torch.Tensor:
    """DropBlock (Ghiasi et al., 2018): drop contiguous blocks of a feature map.

    Seeds are drawn in the region where a whole block fits, each seed drops a
    ``block_size``-sized block (clipped to the map: a block larger than the map covers all of
    it), and the seed probability is solved so that the expected fraction of dropped activations
    is exactly ``p`` for every map size, block size and rank.

    Args:
        x: ``(B, C, L)``, ``(B, C, H, W)`` or ``(B, C, D, H, W)``; or channels-last
            ``(B, ..., C)`` with ``layout="channels_last"``; or tokens ``(B, N, C)`` with
            ``layout="tokens"``.
        p: fraction of activations to drop, in ``[0, 1)``.
        block_size: side of the square (cubic) block, or one size per spatial dim. Even sizes
            work. Default: 7.
        shared_channels: one mask per sample shared by all channels. Default: ``False``, an
            independent mask per channel as in the paper.
        layout: ``"channels_first"``, ``"channels_last"`` or ``"tokens"``. Default ``None`` is
            channels-first, raising if the shape looks like another layout.
        prefix_tokens: with ``layout="tokens"``: number of leading tokens (class, distillation)
            left untouched. Default: inferred as ``N - floor(sqrt(N))**2``.
        rescale: ``"expected"`` (default) multiplies each kept activation by the inverse of its
            keep probability, so ``E[out] == x`` at every position; ``"count"`` multiplies by
            ``numel / kept`` over the whole tensor, as in the paper's Algorithm 1 (accumulated in
            float32, never dividing by zero); ``"none"`` does not rescale.
        training: apply only if ``True``; otherwise return ``x``.

    Returns:
        A tensor like ``x``.

    Raises:
        SettingError: ``p`` outside ``[0, 1)`` or NaN, ``block_size < 1``.
        ShapeError: an input rank or shape that does not fit the layout.
        TypeError: non-tensor ``x``, non-integer ``block_size``.
    """
    _checks.tensor("x", x)
    p = _checks.tensor_or("p", p, _checks.probability)
    blocks = _checks.block_size(block_size)
    if rescale not in _RESCALE:
        raise SettingError(f"rescale must be one of {_RESCALE}, got {rescale!r}")
    _layout.check_layout(layout)
    _layout.check_prefix(prefix_tokens)
    if not training:
        return x
    return _drop_block(x, p, blocks, shared_channels, layout, prefix_tokens, rescale)


def _drop_block(x: torch.Tensor, p: Number, blocks: int | tuple[int, ...],
                shared_channels: bool, layout: str | None, prefix_tokens: int | None,
                rescale: str) -> torch.Tensor:
    """:func:`drop_block` with checked settings (shapes are still checked)."""
    plan_key = None
    if not isinstance(p, torch.Tensor) and KA.USE_CEXT and (layout is None
                                                            or layout == "channels_first"):
        plan_key = (x.shape, x.stride(), x.dtype, x.device, p, blocks, shared_channels,
                    rescale)
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
    b, c = view.shape[:2]
    channels = 1 if shared_channels else c
    if isinstance(p, torch.Tensor):
        if kernel_ops.applies(view, rescale):
            key = torch.randint(0, 2**32, (2,), dtype=torch.int64)
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
    if (rescale != "count" and gamma <= draws.SPARSE_MAX_GAMMA and KA.fused_applies(view)
            and not torch.compiler.is_compiling()):
        # The fused kernel draws the seeds from a key taken from torch's generator: one pass
        # over x, and 16 bytes saved for the backward.
        plan = _FusedPlan(scale, (channels, valid, blocks, cext.thresholds(gamma)), view)
        _remember_plan(plan_key, x, plan)
        return restore(plan(view))
    if (rescale != "count" and draws.use_sparse(n_seeds, gamma, view.device)
            and channels == c):
        # Sparse seeds: O(p * numel) work besides one pass over x; nothing big saved.
        seeds = draws.sparse_seeds(n_seeds, gamma)
        out = KA.SparseBlockDrop.apply(view, scale.to(view.dtype), seeds,
                                       (channels, valid, blocks))
        return restore(out)
    keep = ~dense.block_dropped(b, channels, sizes, blocks, gamma, view.device)
    if rescale == "expected":
        scale = geometry.broadcast_scale(scale, tuple(keep.shape[2:]))
    elif rescale == "count":
        # The paper's normalization over the whole tensor (a mask broadcast over channels or
        # whole axes has the same kept ratio).
        scale = float(keep.numel()) / keep.sum(dtype=torch.float32).clamp(min=1.0)
    return restore(KA.MaskMul.apply(view, keep, scale, None))


_ONE = PerDevice(1.0)


class _FusedPlan:
    """What the fused kernel needs for one geometry and ``p``, decided once: applied to a
    channels-first ``x`` (its own view), it draws a key and runs the kernel. ``meta``:
    channels, valid seed grid, blocks, thresholds; the kernel's call is prepared for tensors
    like ``like`` (the view it is made for; a repeated call's tensor has its shape, strides
    and dtype)."""

    def __init__(self, scale: torch.Tensor, meta: tuple[Any, ...], like: torch.Tensor) -> None:
        self.scale = scale
        self.meta = (*meta, cext.prepare(like, scale, meta[3], meta[2],
                                         shared=meta[0] != like.shape[1]))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        key = cext.draw_key()
        if not _compat.forward_ad_active() and (
                not torch.is_grad_enabled()
                or (not x.requires_grad and not _compat.functorch_active())):
            # Nothing to differentiate (grad mode off, or an input that does not require a
            # gradient and no torch.func transform): the kernel without the autograd Function
            # around it (the same values: the Function's forward is this call). ``x`` fits the
            # prepared call: it is the view the plan was made for, or a tensor of the same
            # shape, strides and dtype (the plan's cache key).
            call = self.meta[4]
            if call is not None and KA.USE_CEXT:
                k0, k1 = key.tolist()
                out = call(x, k0, k1)
                if out is not None:
                    return out
            return KA.hashed_block_drop(x, self.scale, key, *self.meta)
        return KA.HashedBlockDrop.apply(x, self.scale, key, self.meta)


#: The fused plan of each (shape, strides, dtype, device, p, block size, shared, rescale) met on
#: the default layout by DropBlock, and of each ("dropout2d", shape, strides, dtype, device, p)
#: by Dropout2d: a repeated call skips the layout checks and the geometry (what they decide
#: depends on nothing else). Bounded: a schedule makes a new ``p`` per step.
_FUSED_PLANS: dict[tuple[Any, ...], _FusedPlan] = {}
_FUSED_PLANS_MAX = 256


def _cached_plan(key: tuple[Any, ...]) -> _FusedPlan | None:
    """The fused plan remembered under ``key``, unless ``torch.compile`` is tracing."""
    plan = _FUSED_PLANS.get(key)
    return None if plan is None or torch.compiler.is_compiling() else plan


def _remember_plan(key: tuple[Any, ...] | None, x: torch.Tensor, plan: _FusedPlan) -> None:
    """Remember ``plan`` under ``key`` (None: not cacheable) if the kernel applies to ``x`` as
    given (what ``fused_applies`` said of its view, unpatched); bounded by clearing."""
    if key is None or not cext.applies(x):
        return
    if len(_FUSED_PLANS) >= _FUSED_PLANS_MAX:
        _FUSED_PLANS.clear()
    _FUSED_PLANS[key] = plan


def _drop_block_traced(view: torch.Tensor, p: torch.Tensor, sizes: tuple[int, ...],
                       blocks: tuple[int, ...], channels: int, rescale: str) -> torch.Tensor:
    """DropBlock with a 0-dim tensor ``p``: plain tensor ops, no host reads (torch.compile)."""
    q = geometry.solve_keep_tensor(p, sizes, blocks).to(view.device)
    gamma = (1.0 - q).to(torch.float32)
    q = q.to(torch.float32)
    dropped = dense.block_dropped(view.shape[0], channels, sizes, blocks, gamma,
                                     view.device)
    if rescale == "expected":
        mult = torch.where(dropped, 0.0, torch.pow(q, -geometry.coverage_map(sizes, blocks,
                                                                             view.device)))
    else:
        mult = (~dropped).to(torch.float32)
        if rescale == "count":
            kept = mult.sum(dtype=torch.float32).clamp(min=1.0)
            mult = mult * (float(mult.numel()) / kept)
    return view * mult.to(view.dtype)


def dropout2d(
    x: torch.Tensor,
    p: Number,
    *,
    layout: str | None = None,
    prefix_tokens: int | None = None,
    training: bool = True,
) -> torch.Tensor:
    """Drop whole channels, independently per sample, and rescale by ``1 / (1 - p)``.

    Args:
        x: ``(B, C, *spatial)`` with 0 to 3 spatial dims; channels-last ``(B, *spatial, C)``
            with ``layout="channels_last"``; tokens ``(B, N, C)`` with ``layout="tokens"``
            (prefix tokens are left alone).
        p: probability of dropping a channel, in ``[0, 1)``.
        layout, prefix_tokens, training: as in :func:`drop_block`.
    """
    _checks.tensor("x", x)
    p = _checks.tensor_or("p", p, _checks.probability)
    _layout.check_layout(layout)
    _layout.check_prefix(prefix_tokens)
    return _dropout2d(x, p, layout, prefix_tokens) if training else x


def _dropout2d(x: torch.Tensor, p: Number, layout: str | None,
               prefix_tokens: int | None) -> torch.Tensor:
    plan_key = None
    if (not isinstance(p, torch.Tensor) and KA.USE_CEXT
            and (layout is None or layout == "channels_first") and _dropout2d_fused(x)):
        plan_key = ("dropout2d", x.shape, x.stride(), x.dtype, x.device, p)
        plan = _cached_plan(plan_key)
        if plan is not None:
            return plan(x)
    view, restore = _layout.to_channels_first(x, layout, (0, 1, 2, 3), "dropout2d",
                                              prefix_tokens)
    if _is_zero(p):
        return x
    if (not isinstance(p, torch.Tensor) and _dropout2d_fused(view)
            and KA.fused_applies(view) and not torch.compiler.is_compiling()):
        # The DropBlock kernel with the whole map as the block: one seed per map, drawn with
        # probability p, drops the map; one pass over x (a broadcast multiply by a (B, C, 1, 1)
        # mask is slow on small maps), 16 bytes and the scale saved for the backward.
        sizes = tuple(view.shape[2:])
        scale = torch.full(sizes, 1.0 / (1.0 - p), dtype=view.dtype)
        meta = (view.shape[1], (1,) * len(sizes), sizes, cext.thresholds(float(p)))
        plan = _FusedPlan(scale, meta, view)
        _remember_plan(plan_key, x, plan)
        return restore(plan(view))
    shape = (view.shape[0], view.shape[1]) + (1,) * (view.dim() - 2)
    return restore(view * _keep_mult(view, shape, p, True))


#: From this many elements, Dropout2d runs on the fused kernel (below, the fixed cost of its
#: key and autograd Function is more than a broadcast multiply costs) ...
FUSED_MIN_NUMEL = 65536
#: ... on maps of fewer than this many elements (on larger maps torch's broadcast multiply
#: runs at the speed of ``x * x`` and the kernel's bit work would only add to it).
FUSED_MAX_MAP = 256


def _dropout2d_fused(x: torch.Tensor) -> bool:
    """Whether Dropout2d of channels-first ``x`` runs on the fused kernel (by its size and its
    maps' size; the kernel's own conditions are :func:`~._kernels.autograd.fused_applies`)."""
    return (x.dim() >= 3 and x.numel() >= FUSED_MIN_NUMEL
            and x.numel() < FUSED_MAX_MAP * x.shape[0] * x.shape[1])


def _keep_mult(x: torch.Tensor, shape: tuple[int, ...], p: Number,
               scale_by_keep: bool) -> torch.Tensor:
    """A multiplier of ``shape`` in ``x``'s dtype: 0 with probability ``p``, else
    ``1 / (1 - p)`` (or 1 without ``scale_by_keep``). A float ``p``: two small torch calls
    (:func:`~._kernels.draws.keep_mult`)."""
    if isinstance(p, torch.Tensor):
        dropped = draws.bernoulli(shape, p, x.device)
        mult = torch.where(dropped, 0.0, _keep_scale(p) if scale_by_keep else 1.0)
        return mult.to(x.dtype)
    return draws.keep_mult(shape, p, scale_by_keep, x.dtype, x.device)


def dropout(x: torch.Tensor, p: Number, *, training: bool = True) -> torch.Tensor:
    """Elementwise dropout: zero each activation with probability ``p``, rescale the rest by
    ``1 / (1 - p)``. Any shape."""
    _checks.tensor("x", x)
    p = _checks.tensor_or("p", p, _checks.probability)
    return _dropout(x, p) if training else x


def _dropout(x: torch.Tensor, p: Number) -> torch.Tensor:
    if _is_zero(p):
        return x
    if isinstance(p, torch.Tensor):
        keep = torch.rand_like(x, dtype=torch.float32) >= p
        return x * torch.where(keep, 1.0 / (1.0 - p), 0.0).to(x.dtype)
    if draws.use_sparse(x.numel(), p, x.device):
        keep = ~draws.bernoulli(tuple(x.shape), p, x.device)
        scale = torch.full((), 1.0 / (1.0 - p), device=x.device)
        return KA.MaskMul.apply(x, keep, scale, None)
    # torch's own dropout, one call: it saves a boolean mask for the backward (1 byte per
    # element), which is differentiable again and has a forward-mode derivative.
    return torch.native_dropout(x, p, True)[0]


def drop_path(x: torch.Tensor, p: Number, *, scale_by_keep: bool = True,
              training: bool = True) -> torch.Tensor:
    """Stochastic depth: zero whole samples (dim 0) with probability ``p``.

    Use it on a residual branch (the output of a block's branch, before it is added to the
    skip connection); on a whole block it drops the sample's features altogether.
    Kept samples are rescaled by ``1 / (1 - p)`` unless ``scale_by_keep=False``.
    """
    _checks.tensor("x", x)
    p = _checks.tensor_or("p", p, _checks.probability)
    return _drop_path(x, p, scale_by_keep) if training else x


def _drop_path(x: torch.Tensor, p: Number, scale_by_keep: bool) -> torch.Tensor:
    if x.dim() == 0:
        raise ShapeError("drop_path needs a batch dimension, got a 0-dim tensor")
    if _is_zero(p):
        return x
    shape = (x.shape[0],) + (1,) * (x.dim() - 1)
    return x * _keep_mult(x, shape, p, scale_by_keep)


def gaussian_noise(x: torch.Tensor, std: Number, *, multiplicative: bool = False,
                   training: bool = True) -> torch.Tensor:
    """Add ``std * N(0, 1)`` noise, or multiply by ``1 + std * N(0, 1)`` if ``multiplicative``.

    Noise is drawn per element in ``x``'s dtype and memory format.
    """
    _checks.tensor("x", x)
    std = _checks.tensor_or("std", std, _checks.non_negative)
    return _gaussian_noise(x, std, multiplicative) if training else x


def _gaussian_noise(x: torch.Tensor, std: Number, multiplicative: bool) -> torch.Tensor:
    if _is_zero(std):
        return x
    if (not isinstance(std, torch.Tensor) and KA.noise_applies(x)
            and not torch.compiler.is_compiling()):
        # The kernel draws the noise from a key taken from torch's generator: one pass.
        key = cext.draw_key()
        return KA.GaussianNoise.apply(x, key, key, (float(std), multiplicative, x.stride()))
    if isinstance(std, torch.Tensor):
        noise = torch.randn_like(x) * std.to(x.dtype)
        return x * (1.0 + noise) if multiplicative else x + noise
    # x + std * z, x * (1 + std * z) = x + std * x * z: one op after the draw (a Python scalar
    # operand of its own would cost a tensor wrap per call)
    if multiplicative:
        return torch.addcmul(x, x, torch.randn_like(x), value=std)
    return torch.add(x, torch.randn_like(x), alpha=std)


# ----------------------------------------------------------------------------- gradients


def clip_grad_value(g: torch.Tensor, clip: Number) -> torch.Tensor:
    """Clamp every gradient element to ``[-clip, clip]``."""
    return _clip_grad_value(g, _checks.tensor_or("clip", clip, _checks.positive))


def _clip_grad_value(g: torch.Tensor, clip: Number) -> torch.Tensor:
    if isinstance(clip, torch.Tensor):
        clip = clip.to(g.dtype)
        return torch.minimum(torch.maximum(g, -clip), clip)
    return g.clamp(-clip, clip)


def clip_grad_norm(g: torch.Tensor, max_norm: Number, *, norm_type: float = 2.0,
                   per_sample: bool = True) -> torch.Tensor:
    """Rescale the gradient so its norm is at most ``max_norm``.

    With ``per_sample=True`` (for activations) each sample ``g[i]`` is clipped on its own norm;
    otherwise the whole tensor (for a parameter). Norms are accumulated in float32 (float64
    for float64 gradients).
    """
    max_norm = _checks.tensor_or("max_norm", max_norm, _checks.positive)
    return _clip_grad_norm(g, max_norm, norm_type, per_sample)


def _clip_grad_norm(g: torch.Tensor, max_norm: Number, norm_type: float,
                    per_sample: bool) -> torch.Tensor:
    acc = torch.promote_types(g.dtype, torch.float32)  # float32 at least, float64 kept
    if per_sample and g.dim() >= 2:
        dims = tuple(range(1, g.dim()))
        norms = torch.linalg.vector_norm(g, norm_type, dim=dims, keepdim=True, dtype=acc)
    else:
        norms = torch.linalg.vector_norm(g, norm_type, dtype=acc)
    factor = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    return g * factor.to(g.dtype)


def scale_grad(g: torch.Tensor, factor: Number) -> torch.Tensor:
    """Multiply the gradient by ``factor`` (negative reverses it, as in DANN's gradient
    reversal layer)."""
    return _scale_grad(g, _checks.tensor_or("factor", factor, _checks.finite))


def _scale_grad(g: torch.Tensor, factor: Number) -> torch.Tensor:
    if isinstance(factor, torch.Tensor):
        return g * factor.to(g.dtype)
    return g * factor


def grad_noise(g: torch.Tensor, std: Number) -> torch.Tensor:
    """Add ``std * N(0, 1)`` noise to the gradient."""
    return _grad_noise(g, _checks.tensor_or("std", std, _checks.non_negative))


def _grad_noise(g: torch.Tensor, std: Number) -> torch.Tensor:
    if _is_zero(std):
        return g
    return g + torch.randn_like(g) * (std.to(g.dtype) if isinstance(std, torch.Tensor) else std)


# ----------------------------------------------------------------------------- mixing


def mixup(x: torch.Tensor, lam: float, index: torch.Tensor) -> torch.Tensor:
    """``lam * x + (1 - lam) * x[index]``: mix each sample with the one ``index`` names."""
    _checks.tensor("x", x)
    lam = _checks.real("lam", lam)
    return x * lam + x[index] * (1.0 - lam)


def cutmix(x: torch.Tensor, lam: float, index: torch.Tensor, *,
           layout: str | None = None) -> tuple[torch.Tensor, float]:
    """Replace a random box of each feature map with the same box of ``x[index]``.

    The box covers about ``1 - lam`` of the map (side ``size * (1 - lam) ** (1 / dims)``,
    centred uniformly, clipped to the map); returns the mixed tensor and the exact kept
    fraction, the ``lam`` to mix targets with. ``x``: ``(B, C, *spatial)``, or
    ``(B, *spatial, C)`` with ``layout="channels_last"``.
    """
    _checks.tensor("x", x)
    lam = _checks.real("lam", lam)
    _layout.check_layout(layout)
    view, restore = _layout.to_channels_first(x, layout or "channels_first", (1, 2, 3),
                                                  "cutmix")
    sizes = view.shape[2:]
    ratio = max(0.0, 1.0 - lam) ** (1.0 / len(sizes))
    keep = torch.ones(tuple(sizes), dtype=torch.bool, device=x.device)
    box = []
    for s in sizes:
        cut = int(round(s * ratio))
        centre = int(torch.randint(s, ()))
        lo, hi = max(centre - cut // 2, 0), min(centre + (cut - cut // 2), s)
        box.append(slice(lo, hi))
    keep[tuple(box)] = False
    kept = float(keep.sum()) / keep.numel()
    mixed = torch.where(keep, view, view[index])
    return restore(mixed), kept


# ------------------------------------------------- heads, adaptive clipping, centralization


def drop_head(x: torch.Tensor, p: Number, num_heads: int, *,
              training: bool = True) -> torch.Tensor:
    """DropHead: drop whole attention heads per sample with probability ``p`` and rescale the
    kept ones by ``1 / (1 - p)``.

    Args:
        x: ``(B, ..., C)`` with ``C = num_heads * head_dim`` laid out head by head, as the input
            of a timm / PyTorch attention's output projection (``attn.proj``).
        p: head drop probability in ``[0, 1)``.
        num_heads: number of heads, dividing ``C``.

    Raises:
        ShapeError: ``C`` not divisible by ``num_heads``, or a tensor without a batch and
            channel dim.
    """
    _checks.tensor("x", x)
    p = _checks.tensor_or("p", p, _checks.probability)
    num_heads = _checks.count("num_heads", num_heads)
    return _drop_head(x, p, num_heads) if training else x


def _drop_head(x: torch.Tensor, p: Number, num_heads: int) -> torch.Tensor:
    if x.dim() < 2 or x.shape[-1] % num_heads:
        raise ShapeError(f"drop_head expects (B, ..., C) with C divisible by num_heads="
                         f"{num_heads}, got shape {tuple(x.shape)}")
    if _is_zero(p):
        return x
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (num_heads,)
    dropped = draws.bernoulli(shape, p, x.device)
    mult = torch.where(dropped, 0.0, _keep_scale(p)).to(x.dtype)
    return x * mult.repeat_interleave(x.shape[-1] // num_heads, dim=-1)


def _unitwise_norm(t: torch.Tensor, acc: torch.dtype) -> torch.Tensor:
    """Norm per output unit (dim 0) for weights, of the whole tensor for biases and gains."""
    if t.dim() <= 1:
        return torch.linalg.vector_norm(t, dtype=acc)
    return torch.linalg.vector_norm(t, dim=tuple(range(1, t.dim())), keepdim=True, dtype=acc)


def clip_grad_adaptive(g: torch.Tensor, param: torch.Tensor, clip: Number = 0.01,
                       eps: Number = 1e-3) -> torch.Tensor:
    """Unit-wise adaptive gradient clipping (Brock et al., 2021, NFNets).

    Each output unit's gradient (a row of a linear weight, a filter of a conv; a bias or gain as
    a whole) is rescaled to a norm of at most ``clip * max(||unit of param||, eps)``.

    Args:
        g: the gradient of ``param``, same shape.
        param: the parameter.
        clip: the ratio, ``> 0``. Default: 0.01.
        eps: the smallest parameter norm used, ``> 0`` (zero-initialized units still learn).
            Default: 1e-3.
    """
    _checks.tensor("g", g)
    _checks.tensor("param", param)
    if g.shape != param.shape:
        raise ShapeError(f"clip_grad_adaptive: the gradient's shape {tuple(g.shape)} is not the "
                         f"parameter's {tuple(param.shape)}")
    clip = _checks.tensor_or("clip", clip, _checks.positive)
    eps = _checks.tensor_or("eps", eps, _checks.positive)
    return _clip_grad_adaptive(g, param, clip, eps)


def _clip_grad_adaptive(g: torch.Tensor, param: torch.Tensor, clip: Number,
                        eps: Number) -> torch.Tensor:
    acc = torch.promote_types(g.dtype, torch.float32)
    max_norm = _unitwise_norm(param.detach(), acc).clamp(min=eps) * clip
    norm = _unitwise_norm(g, acc)
    factor = torch.where(norm < max_norm, 1.0, max_norm / norm.clamp(min=1e-6))
    return g * factor.to(g.dtype)


def centralize_grad(g: torch.Tensor, strength: Number = 1.0) -> torch.Tensor:
    """Gradient centralization (Yong et al., 2020): subtract from each output unit's gradient
    (dim 0 of a conv or linear weight) its mean over the other dims. Tensors of rank <= 1
    (biases, norms' gains) are returned unchanged. ``strength`` in ``[0, 1]`` scales the mean
    removed (1: the paper)."""
    _checks.tensor("g", g)
    return _centralize_grad(g, _checks.tensor_or("strength", strength, _checks.unit))


def _centralize_grad(g: torch.Tensor, strength: Number) -> torch.Tensor:
    if g.dim() <= 1 or _is_zero(strength):
        return g
    mean = g.mean(dim=tuple(range(1, g.dim())), keepdim=True)
    if isinstance(strength, torch.Tensor):
        return g - mean * strength.to(g.dtype)
    return g - mean * strength


def patchup(x: torch.Tensor, p: float, index: torch.Tensor, block_size: int | tuple[int, ...]
            = 7, *, lam: float = 0.0, layout: str | None = None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """PatchUp (Faramarzi et al., 2022): in blocks drawn by DropBlock's mask generator (an
    expected fraction ``p`` of each map, one mask per sample shared by its channels), replace
    the features by those of ``x[index]`` (``lam=0``: hard PatchUp) or by
    ``lam * x + (1 - lam) * x[index]`` (soft PatchUp).

    ``x``: ``(B, C, *spatial)`` (or per ``layout``); a ``(B, F)`` feature vector is read as a
    1-D map of ``F`` positions. Returns the mixed tensor and the weight of the original targets
    (a 0-dim float32 tensor, read without host synchronization):
    ``1 - (1 - lam) * patched fraction``.
    """
    _checks.tensor("x", x)
    p = _checks.probability("p", p)
    lam = _checks.real("lam", lam)
    blocks = _checks.block_size(block_size)
    _layout.check_layout(layout)
    return _patchup(x, p, index, blocks, lam, layout)


def _patchup(x: torch.Tensor, p: float, index: torch.Tensor, blocks: int | tuple[int, ...],
             lam: float, layout: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    view, restore = (x.unsqueeze(1), _squeeze1) if x.dim() == 2 else _layout.to_channels_first(
        x, layout or "channels_first", (1, 2, 3), "patchup")
    ones = torch.ones((view.shape[0], 1, *view.shape[2:]), device=x.device)
    patched = _drop_block(ones, p, blocks, True, "channels_first", None, "none") == 0
    mixed = view[index] if lam == 0.0 else view * lam + view[index] * (1.0 - lam)
    out = torch.where(patched, mixed, view)
    weight = 1.0 - (1.0 - lam) * patched.sum(dtype=torch.float32) / patched.numel()
    return restore(out), weight


def _squeeze1(y: torch.Tensor) -> torch.Tensor:
    return y.squeeze(1)
