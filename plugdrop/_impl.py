"""The arithmetic behind :mod:`plugdrop.functional`, without its checks: the transforms check
their settings once (at construction and at each schedule step) and call these from the hooks;
the public functions check and call them too. Private. (The ops with several kernel paths,
DropBlock, Dropout2d, Dropout, DropPath and Gaussian noise, have their dispatch under
:mod:`plugdrop._kernels`.)"""

from __future__ import annotations

import torch

from . import _layout
from ._kernels import blockdrop, draws
from .errors import SettingError, ShapeError

__all__ = ["TOKEN_LAYOUTS", "centralize_grad", "check_token_layout", "clip_grad_adaptive",
           "clip_grad_norm", "clip_grad_value", "drop_head", "drop_token", "grad_noise", "is_zero", "keep_scale", "patchup", "scale_grad",
           "squeeze1", "unitwise_norm"]

Number = float | torch.Tensor


def is_zero(p: Number) -> bool:
    return not isinstance(p, torch.Tensor) and p == 0.0


def keep_scale(p: Number) -> Number:
    return 1.0 / (1.0 - p)


def clip_grad_value(g: torch.Tensor, clip: Number) -> torch.Tensor:
    if isinstance(clip, torch.Tensor):
        clip = clip.to(g.dtype)
        return torch.minimum(torch.maximum(g, -clip), clip)
    return g.clamp(-clip, clip)


def clip_grad_norm(g: torch.Tensor, max_norm: Number, norm_type: float,
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
    if isinstance(factor, torch.Tensor):
        return g * factor.to(g.dtype)
    return g * factor


def grad_noise(g: torch.Tensor, std: Number) -> torch.Tensor:
    if is_zero(std):
        return g
    # drawn in the order of g's indices (randn_like would draw in memory order: other noise
    # for a channels-last gradient)
    z = torch.randn(g.shape, dtype=g.dtype, device=g.device)
    return g + z * (std.to(g.dtype) if isinstance(std, torch.Tensor) else std)


def drop_head(x: torch.Tensor, p: Number, num_heads: int) -> torch.Tensor:
    if x.dim() < 2 or x.shape[-1] % num_heads:
        raise ShapeError(f"drop_head expects (B, ..., C) with C divisible by num_heads="
                         f"{num_heads}, got shape {tuple(x.shape)}")
    if is_zero(p):
        return x
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (num_heads,)
    dropped = draws.bernoulli(shape, p, x.device)
    mult = torch.where(dropped, 0.0, keep_scale(p)).to(x.dtype)
    return x * mult.repeat_interleave(x.shape[-1] // num_heads, dim=-1)


def unitwise_norm(t: torch.Tensor, acc: torch.dtype) -> torch.Tensor:
    """Norm per output unit (dim 0) for weights, of the whole tensor for biases and gains."""
    if t.dim() <= 1:
        return torch.linalg.vector_norm(t, dtype=acc)
    return torch.linalg.vector_norm(t, dim=tuple(range(1, t.dim())), keepdim=True, dtype=acc)


def clip_grad_adaptive(g: torch.Tensor, param: torch.Tensor, clip: Number,
                        eps: Number) -> torch.Tensor:
    acc = torch.promote_types(g.dtype, torch.float32)
    max_norm = unitwise_norm(param.detach(), acc).clamp(min=eps) * clip
    norm = unitwise_norm(g, acc)
    factor = torch.where(norm < max_norm, 1.0, max_norm / norm.clamp(min=1e-6))
    return g * factor.to(g.dtype)


def centralize_grad(g: torch.Tensor, strength: Number) -> torch.Tensor:
    if g.dim() <= 1 or is_zero(strength):
        return g
    mean = g.mean(dim=tuple(range(1, g.dim())), keepdim=True)
    if isinstance(strength, torch.Tensor):
        return g - mean * strength.to(g.dtype)
    return g - mean * strength


def patchup(x: torch.Tensor, p: float, index: torch.Tensor, blocks: int | tuple[int, ...],
             lam: float, layout: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    view, restore = (x.unsqueeze(1), squeeze1) if x.dim() == 2 else _layout.to_channels_first(
        x, layout or "channels_first", (1, 2, 3), "patchup")
    ones = torch.ones((view.shape[0], 1, *view.shape[2:]), device=x.device)
    patched = blockdrop.drop_block(ones, p, blocks, True, "channels_first", None, "none") == 0
    mixed = view[index] if lam == 0.0 else view * lam + view[index] * (1.0 - lam)
    out = torch.where(patched, mixed, view)
    weight = 1.0 - (1.0 - lam) * patched.sum(dtype=torch.float32) / patched.numel()
    return restore(out), weight


def squeeze1(y: torch.Tensor) -> torch.Tensor:
    return y.squeeze(1)


#: the layouts DropToken reads
TOKEN_LAYOUTS = ("tokens", "channels_first", "channels_last")


def check_token_layout(layout: str) -> None:
    if layout not in TOKEN_LAYOUTS:
        raise SettingError(f"drop_token's layout must be one of {TOKEN_LAYOUTS}, got "
                           f"{layout!r}")


def drop_token(x: torch.Tensor, p: Number, layout: str, prefix_tokens: int | None
               ) -> torch.Tensor:
    """Zero whole tokens (the channel vector at a position) with probability ``p``, the
    ``prefix_tokens`` leading ones of a sequence kept, the others rescaled by ``1/(1-p)``."""
    prefix = prefix_tokens or 0
    if layout == "tokens":
        if x.dim() != 3:
            raise ShapeError(f"drop_token with layout='tokens' expects tokens (B, N, C), got "
                             f"shape {tuple(x.shape)}; pass layout='channels_first' for maps "
                             f"(B, C, *spatial) or layout='channels_last' for (B, *spatial, C)")
        if prefix >= x.shape[1]:
            raise ShapeError(f"drop_token: prefix_tokens={prefix} leaves no token of the "
                             f"{x.shape[1]} in shape {tuple(x.shape)} to drop")
    elif x.dim() < 3:
        raise ShapeError(f"drop_token with layout={layout!r} expects maps with a batch, a "
                         f"channel and at least one spatial dim, got shape {tuple(x.shape)}")
    if is_zero(p):
        return x
    if layout == "channels_first":
        return x * draws.keep_multiplier(x, (x.shape[0], 1, *x.shape[2:]), p, True)
    if not prefix:
        return x * draws.keep_multiplier(x, (*x.shape[:-1], 1), p, True)
    mult = draws.keep_multiplier(x, (x.shape[0], x.shape[1] - prefix, 1), p, True)
    keep = torch.ones((x.shape[0], prefix, 1), dtype=mult.dtype, device=mult.device)
    return x * torch.cat([keep, mult], dim=1)
