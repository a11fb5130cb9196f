"""GaussianNoise's dispatch: the fused noise kernel (normals from a key of torch's generator, one
pass) where it applies, else torch's ``randn``. Private."""

from __future__ import annotations

import torch

from .. import _layout
from . import autograd as KA
from . import gpu

__all__ = ["gaussian_noise"]

Number = float | torch.Tensor


def gaussian_noise(x: torch.Tensor, std: Number, multiplicative: bool) -> torch.Tensor:
    """:func:`plugdrop.functional.gaussian_noise` with a checked ``std``."""
    if not isinstance(std, torch.Tensor) and std == 0.0:
        return x
    if not x.is_contiguous():
        # The kernel and randn_like draw in memory order (and torch rounds an add with alpha
        # differently on other memory orders): the noise of the contiguous copy, laid out as x,
        # the same for the same values in any memory layout.
        return _layout.laid_out_as(gaussian_noise(x.contiguous(), std, multiplicative), x)
    if (not isinstance(std, torch.Tensor) and KA.noise_applies(x)
            and not torch.compiler.is_compiling()):
        # The kernel draws the noise from a key taken from torch's generator: one pass.
        key = gpu.draw_key(x)  # on the device while a CUDA graph captures
        return KA.GaussianNoise.apply(x, key, key, (float(std), multiplicative, x.stride()))
    if isinstance(std, torch.Tensor):
        noise = torch.randn_like(x) * std.to(x.dtype)
        return x * (1.0 + noise) if multiplicative else x + noise
    # x + std * z, x * (1 + std * z) = x + std * x * z: one op after the draw (a Python scalar
    # operand of its own would cost a tensor wrap per call)
    if multiplicative:
        return torch.addcmul(x, x, torch.randn_like(x), value=std)
    return torch.add(x, torch.randn_like(x), alpha=std)
