"""Pure tensor functions behind plugdrop's transforms, usable without hooks.

Forward functions take an activation and return a tensor of the same shape, dtype, device and
memory format, connected to the autograd graph (they multiply by a mask; they never return a
fresh tensor of zeros). With ``training=False`` or a probability of exactly ``0`` they return
their input itself. Gradient functions take a gradient and return the transformed gradient.

Probabilities and other settings are Python numbers or 0-dim tensors. A number is checked and
raises on a bad value; a tensor is used as it is (reading it on the host would synchronize with
the device), which is what ``torch.compile`` needs to trace a changing value without recompiling.

Randomness comes from torch's generators: ``torch.manual_seed`` reproduces every mask, the
same for the same values in any memory layout (contiguous, channels-last, a strided view).

Every function raises ``TypeError`` when a tensor argument is not a tensor, or is an integer or
boolean one (token ids, masks: nothing to drop, rescale or perturb); the message names the
function, the dtype and the shape, even where nothing would be done (``training=False``).

Each public function checks its settings and calls an unchecked twin that does not: the
transforms check their settings once, at construction and at each schedule step, and call the
twins from the hooks. The twins of the functions with several kernel paths (DropBlock,
Dropout2d, Dropout, DropPath, Gaussian noise) are their dispatch under :mod:`plugdrop._kernels`
(``blockdrop``, ``masks``, ``noise``: the plans, caches and fast paths of each op in one
place); the others are in :mod:`plugdrop._impl`.
"""

from __future__ import annotations


import torch

from . import _checks, _impl, _layout
from ._kernels import blockdrop, masks, noise
from .errors import SettingError, ShapeError

__all__ = [
    "drop_block",
    "dropout2d",
    "dropout",
    "drop_path",
    "drop_token",
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
        TypeError: non-tensor, integer or boolean ``x``; non-integer ``block_size``.
    """
    _checks.float_tensor("drop_block", "x", x)
    p = _checks.tensor_or("p", p, _checks.probability)
    blocks = _checks.block_size(block_size)
    if rescale not in _RESCALE:
        raise SettingError(f"rescale must be one of {_RESCALE}, got {rescale!r}")
    _layout.check_layout(layout)
    _layout.check_prefix(prefix_tokens)
    if not training:
        return x
    return blockdrop.drop_block(x, p, blocks, shared_channels, layout, prefix_tokens, rescale)


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
    _checks.float_tensor("dropout2d", "x", x)
    p = _checks.tensor_or("p", p, _checks.probability)
    _layout.check_layout(layout)
    _layout.check_prefix(prefix_tokens)
    return blockdrop.dropout2d(x, p, layout, prefix_tokens) if training else x


def dropout(x: torch.Tensor, p: Number, *, training: bool = True) -> torch.Tensor:
    """Elementwise dropout: zero each activation with probability ``p``, rescale the rest by
    ``1 / (1 - p)``. Any shape.

    Raises:
        SettingError: ``p`` outside ``[0, 1)``.
        TypeError: an integer or boolean ``x``.
    """
    _checks.float_tensor("dropout", "x", x)
    p = _checks.tensor_or("p", p, _checks.probability)
    return masks.dropout(x, p) if training else x


def drop_path(x: torch.Tensor, p: Number, *, scale_by_keep: bool = True,
              training: bool = True) -> torch.Tensor:
    """Stochastic depth: zero whole samples (dim 0) with probability ``p``.

    Use it on a residual branch (the output of a block's branch, before it is added to the
    skip connection); on a whole block it drops the sample's features altogether.
    Kept samples are rescaled by ``1 / (1 - p)`` unless ``scale_by_keep=False``.

    Raises:
        SettingError: ``p`` outside ``[0, 1)``.
        TypeError: an integer or boolean ``x``.
    """
    _checks.float_tensor("drop_path", "x", x)
    p = _checks.tensor_or("p", p, _checks.probability)
    return masks.drop_path(x, p, scale_by_keep) if training else x


def drop_token(x: torch.Tensor, p: Number, *, layout: str = "tokens",
               prefix_tokens: int | None = None, training: bool = True) -> torch.Tensor:
    """Drop whole tokens: zero the feature vector of each position independently per sample
    with probability ``p``, and rescale the kept ones by ``1 / (1 - p)``.

    Args:
        x: ``(B, N, C)`` tokens (``layout="tokens"``, the default: a ViT's sequence, an
            LSTM's or a transformer encoder's); ``(B, C, *spatial)`` maps with
            ``layout="channels_first"`` (a token is then the vector of channels at one
            position); ``(B, *spatial, C)`` with ``layout="channels_last"``.
        p: token drop probability in ``[0, 1)``.
        prefix_tokens: with ``layout="tokens"``, leading tokens (class, distillation,
            registers) that are never dropped. Default ``None``: none.
        training: apply only if ``True``; otherwise return ``x``.

    Returns:
        A tensor like ``x``.

    Raises:
        SettingError: ``p`` outside ``[0, 1)``, an unknown ``layout``, a negative
            ``prefix_tokens``.
        ShapeError: ``layout="tokens"`` on a tensor that is not ``(B, N, C)``, or with
            ``prefix_tokens >= N``; a map layout on a tensor without a spatial dim.
        TypeError: an integer or boolean ``x``.
    """
    _checks.float_tensor("drop_token", "x", x)
    p = _checks.tensor_or("p", p, _checks.probability)
    _impl.check_token_layout(layout)
    _layout.check_prefix(prefix_tokens)
    return _impl.drop_token(x, p, layout, prefix_tokens) if training else x


def gaussian_noise(x: torch.Tensor, std: Number, *, multiplicative: bool = False,
                   training: bool = True) -> torch.Tensor:
    """Add ``std * N(0, 1)`` noise, or multiply by ``1 + std * N(0, 1)`` if ``multiplicative``.

    Noise is drawn per element in ``x``'s dtype and memory format (the same noise for the same
    values in any memory layout).

    Raises:
        SettingError: ``std`` negative or not finite.
        TypeError: an integer or boolean ``x`` (normal noise has no integer dtype).
    """
    _checks.float_tensor("gaussian_noise", "x", x)
    std = _checks.tensor_or("std", std, _checks.non_negative)
    return noise.gaussian_noise(x, std, multiplicative) if training else x


# ----------------------------------------------------------------------------- gradients


def clip_grad_value(g: torch.Tensor, clip: Number) -> torch.Tensor:
    """Clamp every gradient element to ``[-clip, clip]``."""
    _checks.float_tensor("clip_grad_value", "g", g)
    return _impl.clip_grad_value(g, _checks.tensor_or("clip", clip, _checks.positive))


def clip_grad_norm(g: torch.Tensor, max_norm: Number, *, norm_type: float = 2.0,
                   per_sample: bool = True) -> torch.Tensor:
    """Rescale the gradient so its norm is at most ``max_norm``.

    With ``per_sample=True`` (for activations) each sample ``g[i]`` is clipped on its own norm;
    otherwise the whole tensor (for a parameter). Norms are accumulated in float32 (float64
    for float64 gradients).
    """
    _checks.float_tensor("clip_grad_norm", "g", g)
    max_norm = _checks.tensor_or("max_norm", max_norm, _checks.positive)
    return _impl.clip_grad_norm(g, max_norm, norm_type, per_sample)


def scale_grad(g: torch.Tensor, factor: Number) -> torch.Tensor:
    """Multiply the gradient by ``factor`` (negative reverses it, as in DANN's gradient
    reversal layer)."""
    _checks.float_tensor("scale_grad", "g", g)
    return _impl.scale_grad(g, _checks.tensor_or("factor", factor, _checks.finite))


def grad_noise(g: torch.Tensor, std: Number) -> torch.Tensor:
    """Add ``std * N(0, 1)`` noise to the gradient."""
    _checks.float_tensor("grad_noise", "g", g)
    return _impl.grad_noise(g, _checks.tensor_or("std", std, _checks.non_negative))


# ----------------------------------------------------------------------------- mixing


def mixup(x: torch.Tensor, lam: float, index: torch.Tensor) -> torch.Tensor:
    """``lam * x + (1 - lam) * x[index]``: mix each sample with the one ``index`` names."""
    _checks.float_tensor("mixup", "x", x)
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
    _checks.float_tensor("cutmix", "x", x)
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
        TypeError: an integer or boolean ``x``.
    """
    _checks.float_tensor("drop_head", "x", x)
    p = _checks.tensor_or("p", p, _checks.probability)
    num_heads = _checks.count("num_heads", num_heads)
    return _impl.drop_head(x, p, num_heads) if training else x


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
    _checks.float_tensor("clip_grad_adaptive", "g", g)
    _checks.float_tensor("clip_grad_adaptive", "param", param)
    if g.shape != param.shape:
        raise ShapeError(f"clip_grad_adaptive: the gradient's shape {tuple(g.shape)} is not the "
                         f"parameter's {tuple(param.shape)}")
    clip = _checks.tensor_or("clip", clip, _checks.positive)
    eps = _checks.tensor_or("eps", eps, _checks.positive)
    return _impl.clip_grad_adaptive(g, param, clip, eps)


def centralize_grad(g: torch.Tensor, strength: Number = 1.0) -> torch.Tensor:
    """Gradient centralization (Yong et al., 2020): subtract from each output unit's gradient
    (dim 0 of a conv or linear weight) its mean over the other dims. Tensors of rank <= 1
    (biases, norms' gains) are returned unchanged. ``strength`` in ``[0, 1]`` scales the mean
    removed (1: the paper)."""
    _checks.float_tensor("centralize_grad", "g", g)
    return _impl.centralize_grad(g, _checks.tensor_or("strength", strength, _checks.unit))


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
    _checks.float_tensor("patchup", "x", x)
    p = _checks.probability("p", p)
    lam = _checks.real("lam", lam)
    blocks = _checks.block_size(block_size)
    _layout.check_layout(layout)
    return _impl.patchup(x, p, index, blocks, lam, layout)


