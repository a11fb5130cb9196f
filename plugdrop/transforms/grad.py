"""Gradient transforms: clip, scale or perturb the gradient flowing back through a layer (or
reaching its parameters); forward values stay bit-identical."""

from __future__ import annotations

import copy
from typing import Any

import torch

from .. import _checks, _compat, _impl
from ..schedules import ScheduleLike
from .base import Check, GradientTransform

__all__ = ["ClipGradValue", "ClipGradNorm", "ScaleGrad", "GradNoise", "ClipGradAdaptive",
           "CentralizeGrad"]


def _check_scaler(scaler: Any) -> Any:
    if scaler is not None and not hasattr(scaler, "get_scale"):
        raise TypeError(f"scaler must be a torch.amp.GradScaler or None, got "
                        f"{type(scaler).__name__}")
    return scaler


def _loss_scale(scaler: Any) -> float | torch.Tensor:
    """The GradScaler's current scale, as a device tensor when it has one (no host sync)."""
    if scaler is None or not scaler.is_enabled():
        return 1.0
    scale = _compat.scale_async(scaler)
    return scale if scale is not None else float(scaler.get_scale())


class _ScaledGradient(GradientTransform):
    """A gradient transform whose thresholds are in unscaled units when given the
    ``GradScaler`` of mixed-precision training (the gradients it sees are scaled)."""

    def __init__(self, scaler: Any, **settings: tuple[ScheduleLike, Check]) -> None:
        super().__init__(**settings)
        self.scaler = _check_scaler(scaler)

    def _options(self) -> dict[str, Any]:
        return {"scaler": "GradScaler"} if self.scaler is not None else {}

    def __deepcopy__(self, memo: dict) -> _ScaledGradient:
        # A copy of the model (an EMA, say) keeps following the same scaler.
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            new.__dict__[k] = v if k == "scaler" else copy.deepcopy(v, memo)
        return new


class ClipGradValue(_ScaledGradient):
    """Clamp each gradient element to ``[-clip, clip]``.

    Args:
        clip: the bound, ``> 0``; a number or a schedule.
        scaler: the ``torch.amp.GradScaler`` of mixed-precision training, if any: ``clip`` then
            means an unscaled gradient value (it is multiplied by the current loss scale, read
            on the device without synchronizing). Without it, ``clip`` applies to the
            gradients as autograd computes them, i.e. scaled ones under a GradScaler.
    """

    def __init__(self, clip: ScheduleLike, *, scaler: Any = None) -> None:
        super().__init__(scaler, clip=(clip, _checks.positive))

    def apply(self, g: torch.Tensor, *, clip: float | torch.Tensor) -> torch.Tensor:
        return _impl.clip_grad_value(g, clip * _loss_scale(self.scaler))


class ClipGradNorm(_ScaledGradient):
    """Rescale gradients to a norm of at most ``max_norm``.

    On activations (``where="output"`` / ``"input"``) each sample of the batch is clipped on its
    own norm; on parameters (``where="params"``) each parameter tensor is clipped on its norm.

    Args:
        max_norm: the largest norm allowed, ``> 0``; a number or a schedule.
        norm_type: the p of the p-norm, ``> 0``; ``math.inf`` clips on the largest absolute
            value. Default: 2.
        scaler: the ``torch.amp.GradScaler`` of mixed-precision training, if any, so that
            ``max_norm`` means an unscaled norm (see :class:`ClipGradValue`).
    """

    def __init__(self, max_norm: ScheduleLike, *, norm_type: float = 2.0,
                 scaler: Any = None) -> None:
        super().__init__(scaler, max_norm=(max_norm, _checks.positive))
        self.norm_type = _checks.norm_order("norm_type", norm_type)

    def _options(self) -> dict[str, Any]:
        opts = {} if self.norm_type == 2.0 else {"norm_type": self.norm_type}
        return {**opts, **super()._options()}

    def apply(self, g: torch.Tensor, *, max_norm: float | torch.Tensor) -> torch.Tensor:
        return _impl.clip_grad_norm(g, max_norm * _loss_scale(self.scaler), self.norm_type, True)

    def _apply_param(self, g: torch.Tensor, *, max_norm: float | torch.Tensor) -> torch.Tensor:
        return _impl.clip_grad_norm(g, max_norm * _loss_scale(self.scaler), self.norm_type, False)


class ScaleGrad(GradientTransform):
    """Multiply gradients by ``factor``; a negative factor reverses them (gradient reversal,
    as in domain-adversarial training).

    Args:
        factor: a finite number or a schedule.
    """

    def __init__(self, factor: ScheduleLike) -> None:
        super().__init__(factor=(factor, _checks.finite))

    def apply(self, g: torch.Tensor, *, factor: float | torch.Tensor) -> torch.Tensor:
        return _impl.scale_grad(g, factor)


class GradNoise(_ScaledGradient):
    """Add ``std * N(0, 1)`` to gradients.

    Args:
        std: ``>= 0``; a number or a schedule.
        scaler: a ``torch.amp.GradScaler``: ``std`` is then in unscaled units.
    """

    def __init__(self, std: ScheduleLike, *, scaler: Any = None) -> None:
        super().__init__(scaler, std=(std, _checks.non_negative))

    def apply(self, g: torch.Tensor, *, std: float | torch.Tensor) -> torch.Tensor:
        return _impl.grad_noise(g, std * _loss_scale(self.scaler))


class _ParamsOnly(_ScaledGradient):
    """A gradient transform of parameters: it needs the parameter (``where="params"``)."""

    params_only = True

    def apply(self, x: torch.Tensor, *args: Any, **values: Any) -> torch.Tensor:
        raise TypeError(f"{type(self).__name__} acts on the gradients of parameters: attach it "
                        f"with where='params'")

    def _call_param(self, g: torch.Tensor, layer: str | None = None,
                    param: torch.Tensor | None = None) -> torch.Tensor:
        if param is None:
            raise TypeError(f"{type(self).__name__} needs the parameter of the gradient")
        return self._apply_with(g, param, **self._values(g.device, layer))

    def _apply_with(self, g: torch.Tensor, param: torch.Tensor, *args: Any,
                    **values: Any) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class ClipGradAdaptive(_ParamsOnly):
    """Unit-wise adaptive gradient clipping (AGC; Brock et al., 2021, NFNets) on the parameters
    of the selected layers: each output unit's gradient is rescaled to a norm of at most
    ``clip * max(||unit||, eps)`` (see :func:`plugdrop.functional.clip_grad_adaptive`; the same
    rule as timm's ``adaptive_clip_grad``, but per selected layer, so "all but the classifier"
    is ``attach(model, "", ClipGradAdaptive(), where="params", exclude="head")``: the
    parameters of an excluded module are left alone even under the selected root).

    Args:
        clip: the ratio of gradient to parameter norm allowed, ``> 0``; a number, a schedule or
            :func:`plugdrop.by_depth`. Default: 0.01.
        eps: the smallest parameter norm used, ``> 0``. Default: 1e-3.
        scaler: a ``torch.amp.GradScaler``: the gradients it scales are clipped at the scaled
            bound (read on the device, no synchronization).

    Raises:
        AttachError: attached with a ``where`` other than ``"params"``.
        SettingError: a bad ``clip`` or ``eps``.
    """

    def __init__(self, clip: ScheduleLike = 0.01, eps: ScheduleLike = 1e-3, *,
                 scaler: Any = None) -> None:
        super().__init__(scaler, clip=(clip, _checks.positive), eps=(eps, _checks.positive))

    def _apply_with(self, g: torch.Tensor, param: torch.Tensor, *, clip: float | torch.Tensor,
                    eps: float | torch.Tensor) -> torch.Tensor:
        return _impl.clip_grad_adaptive(g, param, clip * _loss_scale(self.scaler), eps)


class CentralizeGrad(_ParamsOnly):
    """Gradient centralization (Yong et al., 2020) on the conv and linear weights of the
    selected layers: each output unit's gradient has its mean removed (tensors of rank <= 1,
    biases and gains, are left alone); see :func:`plugdrop.functional.centralize_grad`.

    Args:
        strength: the fraction of the mean removed, in ``[0, 1]`` (1: the paper); a number or a
            schedule. Default: 1.

    Raises:
        AttachError: attached with a ``where`` other than ``"params"``.
    """

    def __init__(self, strength: ScheduleLike = 1.0) -> None:
        super().__init__(None, strength=(strength, _checks.unit))

    def _apply_with(self, g: torch.Tensor, param: torch.Tensor, *,
                    strength: float | torch.Tensor) -> torch.Tensor:
        return _impl.centralize_grad(g, strength)
