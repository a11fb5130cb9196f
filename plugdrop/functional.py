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

import torch

from . import _checks, _layout
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
        meta = (channels, valid, blocks, cext.thresholds(gamma))
        return restore(KA.HashedBlockDrop.apply(view, scale, cext.draw_key(), meta))
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
    view, restore = _layout.to_channels_first(x, layout, (0, 1, 2, 3), "dropout2d",
                                              prefix_tokens)
    if _is_zero(p):
        return x
    shape = (view.shape[0], view.shape[1]) + (1,) * (view.dim() - 2)
    return restore(view * _keep_mult(view, shape, p, True))


def _keep_mult(x: torch.Tensor, shape: tuple[int, ...], p: Number,
               scale_by_keep: bool) -> torch.Tensor:
    """A multiplier of ``shape`` in ``x``'s dtype: 0 with probability ``p``, else
    ``1 / (1 - p)`` (or 1 without ``scale_by_keep``). A float ``p`` draws it in place with
    ``bernoulli_`` (two small ops: the fixed cost of timm's and torch's own)."""
    if isinstance(p, torch.Tensor):
        dropped = draws.bernoulli(shape, p, x.device)
        mult = torch.where(dropped, 0.0, _keep_scale(p) if scale_by_keep else 1.0)
        return mult.to(x.dtype)
    keep = torch.empty(shape, dtype=x.dtype, device=x.device).bernoulli_(1.0 - p)
    return keep.mul_(_keep_scale(p)) if scale_by_keep else keep


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
    keep = ~draws.bernoulli(tuple(x.shape), p, x.device)
    scale = torch.full((), 1.0 / (1.0 - p), device=x.device)
    return KA.MaskMul.apply(x, keep, scale, None)


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
    noise = torch.randn_like(x) * (std.to(x.dtype) if isinstance(std, torch.Tensor) else std)
    return x * (1.0 + noise) if multiplicative else x + noise


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
