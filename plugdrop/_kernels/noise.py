"""GaussianNoise's dispatch: the fused noise kernel (normals from a key of torch's generator, one
pass) where it applies, else torch's ``randn``. Private."""

from __future__ import annotations

import torch

from .. import _layout
from . import autograd as KA
from . import gpu

__all__ = ["eager_noise", "gaussian_noise"]

Number = float | torch.Tensor


def eager_noise(x: torch.Tensor, std: float, multiplicative: bool) -> torch.Tensor:
    """:func:`gaussian_noise` of a float ``x`` with a float ``std`` in eager mode (the hooks'
    path): a small contiguous CPU tensor, which no kernel takes (unless a test runs the Triton
    kernels on the CPU), goes straight to torch's draw (the same calls :func:`gaussian_noise`
    makes for it)."""
    if (x.is_cpu and x.numel() < KA.NOISE_MIN_NUMEL and std != 0.0 and x.is_contiguous()
            and not gpu.ON_CPU):
        if multiplicative:
            return torch.addcmul(x, x, torch.randn_like(x), value=std)
        return torch.add(x, torch.randn_like(x), alpha=std)
    return gaussian_noise(x, std, multiplicative)


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
