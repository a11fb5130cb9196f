"""Forward transforms that add noise."""

from __future__ import annotations

from typing import Any

import torch

from .. import _checks
from .._kernels import noise as noise_kernel
from ..schedules import ScheduleLike
from .base import ForwardTransform

__all__ = ["GaussianNoise"]


class GaussianNoise(ForwardTransform):
    """Gaussian noise: ``x + std * N(0, 1)``, or ``x * (1 + std * N(0, 1))`` if
    ``multiplicative``.

    Args:
        std: noise standard deviation, ``>= 0``; a number or a schedule.
        multiplicative: multiply instead of add. Default: ``False``.

    Shape: any; the noise is drawn per element in ``x``'s dtype and memory format (the same
    noise for the same values in any memory layout).

    Raises:
        SettingError: a bad ``std`` (or a schedule reaching one).
        TypeError: an integer or boolean input.
    """

    def __init__(self, std: ScheduleLike, *, multiplicative: bool = False) -> None:
        super().__init__(std=(std, _checks.non_negative))
        self.multiplicative = _checks.flag("multiplicative", multiplicative)

    def _options(self) -> dict[str, Any]:
        return {"multiplicative": True} if self.multiplicative else {}

    def apply(self, x: torch.Tensor, *, std: float | torch.Tensor) -> torch.Tensor:
        return noise_kernel.gaussian_noise(x, std, self.multiplicative)

    def _eager_at(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        if x.is_floating_point():
            return noise_kernel.eager_noise(x, self._settings["std"].of(layer).value,
                                            self.multiplicative)
        return self._at(layer, x)
