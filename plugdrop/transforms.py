"""Transforms: small objects holding the settings of a :mod:`plugdrop.functional` function.

A forward transform maps an activation to a regularized activation (``transform(x)``, as in
training); a gradient transform maps a gradient to a modified gradient (``transform(g)``) and
never changes forward values. :func:`plugdrop.attach` hangs them on a model's layers; they know
nothing about hooks.

Numeric settings (``p``, ``std``, ``clip``, ``max_norm``, ``factor``) take a number or a schedule
(see :mod:`plugdrop.schedules`). The current value is held as a Python float (used in eager
mode, no device synchronization) and in a 0-dim float32 tensor per device, updated in place at
every step (used under ``torch.compile``, so a changing value does not recompile).
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from . import _checks, _layout, functional as F
from .schedules import Constant, Schedule, ScheduleLike, as_schedule

__all__ = [
    "ManifoldMixup",
    "Transform",
    "ForwardTransform",
    "GradientTransform",
    "DropBlock",
    "Dropout2d",
    "Dropout",
    "DropPath",
    "GaussianNoise",
    "ClipGradValue",
    "ClipGradNorm",
    "ScaleGrad",
    "GradNoise",
]


class _Setting:
    """A scheduled numeric setting: its schedule, current value and per-device tensors."""

    def __init__(self, name: str, value: ScheduleLike, check: Callable[[str, object], float]):
        self.name = name
        self.check = check
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            check(name, value)
        try:
            self.schedule: Schedule = as_schedule(value)
        except TypeError as e:
            raise TypeError(f"{name}: {e}") from None
        for v in self.schedule.values():
            check(f"{name} (schedule {self.schedule!r})", v)
        self.value: float = check(name, self.schedule(0))
        self.tensors: dict[torch.device, torch.Tensor] = {}

    def set_step(self, step: int) -> None:
        value = self.check(f"{self.name} at step {step} of schedule {self.schedule!r}",
                           self.schedule(step))
        self.value = value
        for t in self.tensors.values():
            t.fill_(value)

    def tensor(self, device: torch.device) -> torch.Tensor:
        t = self.tensors.get(device)
        if t is None:
            with torch.inference_mode(False), torch.no_grad():
                t = torch.tensor(self.value, dtype=torch.float32, device=device)
            self.tensors[device] = t
        return t

    def current(self, device: torch.device) -> float | torch.Tensor:
        if torch.compiler.is_compiling():
            return self.tensor(device)
        return self.value

    @property
    def scheduled(self) -> bool:
        return not isinstance(self.schedule, Constant)


class Transform:
    """Base class of all transforms.

    Subclasses declare their numeric settings with :meth:`_setting` in ``__init__`` and
    implement :meth:`apply`, which receives the current values as keyword arguments.
    """

    kind: ClassVar[str] = ""

    def __init__(self) -> None:
        self._settings: dict[str, _Setting] = {}
        self._step = 0
        self._attached = False

    def _setting(self, name: str, value: ScheduleLike,
                 check: Callable[[str, object], float]) -> None:
        self._settings[name] = _Setting(name, value, check)

    # -- schedule state ----------------------------------------------------------------------

    @property
    def step_count(self) -> int:
        """Number of steps taken so far (0 at attach)."""
        return self._step

    def set_step(self, step: int) -> None:
        """Move every schedule of this transform to ``step``."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        for s in self._settings.values():
            s.set_step(step)
        self._step = step

    def values(self) -> dict[str, float]:
        """Current value of each numeric setting, e.g. ``{"p": 0.05}``."""
        return {k: s.value for k, s in self._settings.items()}

    def _values(self, device: torch.device) -> dict[str, float | torch.Tensor]:
        return {k: s.current(device) for k, s in self._settings.items()}

    def _prepare(self, device: torch.device) -> None:
        """Create the value tensors on ``device`` ahead of a compiled forward."""
        for s in self._settings.values():
            s.tensor(device)

    def __getattr__(self, name: str) -> Any:
        settings = self.__dict__.get("_settings")
        if settings is not None and name in settings:
            return settings[name].value
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _options(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        parts = [f"{k}={s.schedule!r}" for k, s in self._settings.items()]
        parts += [f"{k}={v!r}" for k, v in self._options().items()]
        return f"{type(self).__name__}({', '.join(parts)})"

    def apply(self, x: torch.Tensor, **values: Any) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.apply(x, **self._values(x.device))


class ForwardTransform(Transform):
    """A transform of activations, applied in training mode only."""

    kind = "forward"

    def at(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        """Apply at the named layer (the attachment calls this; most transforms ignore the
        name)."""
        return self(x)


class GradientTransform(Transform):
    """A transform of gradients; forward values are left bit-identical."""

    kind = "gradient"

    def apply_param(self, g: torch.Tensor, **values: Any) -> torch.Tensor:
        """Transform the gradient of a parameter tensor (``where="params"``)."""
        return self.apply(g, **values)

    def call_param(self, g: torch.Tensor) -> torch.Tensor:
        return self.apply_param(g, **self._values(g.device))


# ------------------------------------------------------------------------------- forward


class DropBlock(ForwardTransform):
    """DropBlock (Ghiasi et al., 2018), exact: the expected dropped fraction is ``p``.

    Args:
        p: fraction of activations to drop, in ``[0, 1)``; a number or a schedule.
        block_size: block side (int) or one size per spatial dim; clipped to the map.
            Default: 7.
        shared_channels: one mask shared by all channels of a sample. Default: ``False``
            (independent per channel, as in the paper).
        layout: ``"channels_first"`` ``(B, C, *spatial)``, ``"channels_last"``
            ``(B, *spatial, C)`` or ``"tokens"`` ``(B, N, C)``. Default ``None``:
            channels-first, with an error if the shape looks like another layout.
        prefix_tokens: leading tokens left alone with ``layout="tokens"`` (default: inferred).
        rescale: ``"expected"`` (default), ``"count"`` or ``"none"``; see
            :func:`plugdrop.functional.drop_block`.

    Shape: 1D, 2D or 3D maps: ``(B, C, L)``, ``(B, C, H, W)``, ``(B, C, D, H, W)``, in the
    given layout. Output: same shape, dtype and memory format.
    """

    def __init__(self, p: ScheduleLike, block_size: int | tuple[int, ...] = 7, *,
                 shared_channels: bool = False, layout: str | None = None,
                 prefix_tokens: int | None = None, rescale: str = "expected") -> None:
        super().__init__()
        self._setting("p", p, _checks.probability)
        self.block_size = _checks.block_size(block_size)
        if not isinstance(shared_channels, bool):
            raise TypeError(f"shared_channels must be a bool, got {shared_channels!r}")
        _layout.check_layout(layout)
        _layout.check_prefix(prefix_tokens)
        if rescale not in ("expected", "count", "none"):
            raise ValueError(
                f"rescale must be 'expected', 'count' or 'none', got {rescale!r}")
        self.shared_channels = shared_channels
        self.layout = layout
        self.prefix_tokens = prefix_tokens
        self.rescale = rescale

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"block_size": self.block_size}
        if self.shared_channels:
            opts["shared_channels"] = True
        if self.layout is not None:
            opts["layout"] = self.layout
        if self.prefix_tokens is not None:
            opts["prefix_tokens"] = self.prefix_tokens
        if self.rescale != "expected":
            opts["rescale"] = self.rescale
        return opts

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        return F.drop_block(x, p, self.block_size, shared_channels=self.shared_channels,
                            layout=self.layout, prefix_tokens=self.prefix_tokens,
                            rescale=self.rescale)


class Dropout2d(ForwardTransform):
    """Drop whole channels per sample with probability ``p``; rescale by ``1 / (1 - p)``.

    Args:
        p: channel drop probability in ``[0, 1)``; a number or a schedule.
        layout, prefix_tokens: as in :class:`DropBlock`.

    Shape: ``(B, C, *spatial)`` with 0 to 3 spatial dims, or per ``layout``.
    """

    def __init__(self, p: ScheduleLike, *, layout: str | None = None,
                 prefix_tokens: int | None = None) -> None:
        super().__init__()
        self._setting("p", p, _checks.probability)
        _layout.check_layout(layout)
        _layout.check_prefix(prefix_tokens)
        self.layout = layout
        self.prefix_tokens = prefix_tokens

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {}
        if self.layout is not None:
            opts["layout"] = self.layout
        if self.prefix_tokens is not None:
            opts["prefix_tokens"] = self.prefix_tokens
        return opts

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        return F.dropout2d(x, p, layout=self.layout, prefix_tokens=self.prefix_tokens)


class Dropout(ForwardTransform):
    """Elementwise dropout with probability ``p`` (rescaled by ``1 / (1 - p)``). Any shape."""

    def __init__(self, p: ScheduleLike) -> None:
        super().__init__()
        self._setting("p", p, _checks.probability)

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        return F.dropout(x, p)


class DropPath(ForwardTransform):
    """Stochastic depth: drop whole samples with probability ``p``.

    Attach it to a residual *branch* (e.g. timm's ``blocks.*.mlp``), not to a whole block.

    Args:
        p: sample drop probability in ``[0, 1)``; a number or a schedule.
        scale_by_keep: rescale kept samples by ``1 / (1 - p)``. Default: ``True``.
    """

    def __init__(self, p: ScheduleLike, *, scale_by_keep: bool = True) -> None:
        super().__init__()
        self._setting("p", p, _checks.probability)
        if not isinstance(scale_by_keep, bool):
            raise TypeError(f"scale_by_keep must be a bool, got {scale_by_keep!r}")
        self.scale_by_keep = scale_by_keep

    def _options(self) -> dict[str, Any]:
        return {} if self.scale_by_keep else {"scale_by_keep": False}

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        return F.drop_path(x, p, scale_by_keep=self.scale_by_keep)


class GaussianNoise(ForwardTransform):
    """Gaussian noise: ``x + std * N(0, 1)``, or ``x * (1 + std * N(0, 1))`` if
    ``multiplicative``.

    Args:
        std: noise standard deviation, ``>= 0``; a number or a schedule.
        multiplicative: multiply instead of add. Default: ``False``.
    """

    def __init__(self, std: ScheduleLike, *, multiplicative: bool = False) -> None:
        super().__init__()
        self._setting("std", std, _checks.non_negative)
        if not isinstance(multiplicative, bool):
            raise TypeError(f"multiplicative must be a bool, got {multiplicative!r}")
        self.multiplicative = multiplicative

    def _options(self) -> dict[str, Any]:
        return {"multiplicative": True} if self.multiplicative else {}

    def apply(self, x: torch.Tensor, *, std: float | torch.Tensor) -> torch.Tensor:
        return F.gaussian_noise(x, std, multiplicative=self.multiplicative)


# ------------------------------------------------------------------------------ gradients


def _check_scaler(scaler: Any) -> Any:
    if scaler is not None and not hasattr(scaler, "get_scale"):
        raise TypeError(f"scaler must be a torch.amp.GradScaler or None, got "
                        f"{type(scaler).__name__}")
    return scaler


def _loss_scale(scaler: Any) -> float | torch.Tensor:
    """The GradScaler's current scale, as a device tensor when it has one (no host sync)."""
    if scaler is None or not scaler.is_enabled():
        return 1.0
    get_async = getattr(scaler, "_get_scale_async", None)
    scale = get_async() if get_async is not None else None
    return scale if scale is not None else scaler.get_scale()


class _ScaledGradient(GradientTransform):
    """A gradient transform whose thresholds are in unscaled units when given the
    ``GradScaler`` of mixed-precision training (the gradients it sees are scaled)."""

    scaler: Any = None

    def _options(self) -> dict[str, Any]:
        return {"scaler": "GradScaler"} if self.scaler is not None else {}

    def __deepcopy__(self, memo: dict) -> "_ScaledGradient":
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
        super().__init__()
        self._setting("clip", clip, _checks.positive)
        self.scaler = _check_scaler(scaler)

    def apply(self, g: torch.Tensor, *, clip: float | torch.Tensor) -> torch.Tensor:
        return F.clip_grad_value(g, clip * _loss_scale(self.scaler))


class ClipGradNorm(_ScaledGradient):
    """Rescale gradients to a norm of at most ``max_norm``.

    On activations (``where="output"`` / ``"input"``) each sample of the batch is clipped on its
    own norm; on parameters (``where="params"``) each parameter tensor is clipped on its norm.

    Args:
        max_norm: the largest norm allowed, ``> 0``; a number or a schedule.
        norm_type: the p of the p-norm (``float("inf")`` for the max norm). Default: 2.
        scaler: the ``torch.amp.GradScaler`` of mixed-precision training, if any, so that
            ``max_norm`` means an unscaled norm (see :class:`ClipGradValue`).
    """

    def __init__(self, max_norm: ScheduleLike, *, norm_type: float = 2.0,
                 scaler: Any = None) -> None:
        super().__init__()
        self._setting("max_norm", max_norm, _checks.positive)
        self.norm_type = _checks.positive("norm_type", norm_type)
        self.scaler = _check_scaler(scaler)

    def _options(self) -> dict[str, Any]:
        opts = {} if self.norm_type == 2.0 else {"norm_type": self.norm_type}
        return {**opts, **super()._options()}

    def apply(self, g: torch.Tensor, *, max_norm: float | torch.Tensor) -> torch.Tensor:
        return F.clip_grad_norm(g, max_norm * _loss_scale(self.scaler),
                                norm_type=self.norm_type, per_sample=True)

    def apply_param(self, g: torch.Tensor, *, max_norm: float | torch.Tensor) -> torch.Tensor:
        return F.clip_grad_norm(g, max_norm * _loss_scale(self.scaler),
                                norm_type=self.norm_type, per_sample=False)


class ScaleGrad(GradientTransform):
    """Multiply gradients by ``factor``; a negative factor reverses them (gradient reversal,
    as in domain-adversarial training)."""

    def __init__(self, factor: ScheduleLike) -> None:
        super().__init__()
        self._setting("factor", factor, _checks.finite)

    def apply(self, g: torch.Tensor, *, factor: float | torch.Tensor) -> torch.Tensor:
        return F.scale_grad(g, factor)


class GradNoise(_ScaledGradient):
    """Add ``std * N(0, 1)`` to gradients (``std >= 0``, number or schedule).

    With ``scaler=`` (a ``torch.amp.GradScaler``), ``std`` is in unscaled units.
    """

    def __init__(self, std: ScheduleLike, *, scaler: Any = None) -> None:
        super().__init__()
        self._setting("std", std, _checks.non_negative)
        self.scaler = _check_scaler(scaler)

    def apply(self, g: torch.Tensor, *, std: float | torch.Tensor) -> torch.Tensor:
        return F.grad_noise(g, std * _loss_scale(self.scaler))


# ------------------------------------------------------------------------- mixing


def _unit(name: str, value: object) -> float:
    value = _checks.real(name, value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value:g}")
    return value


class ManifoldMixup(ForwardTransform):
    """Manifold Mixup (Verma et al., 2019) and feature-level CutMix across the attached layers.

    On each training forward of the model it was attached to, with probability ``prob``, one of
    the attached layers is picked uniformly at random, ``lam ~ Beta(alpha, alpha)`` and a
    permutation ``index`` of the batch are drawn, and only that layer's output is mixed:
    ``lam * h + (1 - lam) * h[index]`` (``mode="mixup"``), or a random box of the feature map is
    replaced by the same box of ``h[index]`` (``mode="cutmix"``; ``lam`` becomes the kept area
    fraction). Attaching to the root ``""`` mixes the model's input (input mixup). The handle
    returned by :func:`plugdrop.attach` reports ``lam``, ``index`` and ``layer`` of the last
    forward and mixes the targets in ``handle.loss(criterion, logits, target)``.

    Args:
        alpha: Beta distribution parameter, ``>= 0`` (0: no mixing); a number or a schedule.
        mode: ``"mixup"`` (default) or ``"cutmix"``.
        prob: probability that a forward mixes at all, in ``[0, 1]``; a number or a schedule.
        layout: for ``"cutmix"``: ``"channels_first"`` (default) or ``"channels_last"`` maps.
    """

    def __init__(self, alpha: ScheduleLike = 2.0, *, mode: str = "mixup",
                 prob: ScheduleLike = 1.0, layout: str | None = None) -> None:
        super().__init__()
        self._setting("alpha", alpha, _checks.non_negative)
        self._setting("prob", prob, _unit)
        if mode not in ("mixup", "cutmix"):
            raise ValueError(f"mode must be 'mixup' or 'cutmix', got {mode!r}")
        if layout not in (None, "channels_first", "channels_last"):
            raise ValueError(f"ManifoldMixup's layout must be 'channels_first' or "
                             f"'channels_last', got {layout!r}")
        self.mode = mode
        self.layout = layout
        self.layers: list[str] = []
        self.last: dict[str, Any] | None = None
        self._chosen: str | None = None
        self._lam = 1.0

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {} if self.mode == "mixup" else {"mode": self.mode}
        if self.layout is not None:
            opts["layout"] = self.layout
        return opts

    def begin(self) -> None:
        """Start of a training forward: decide whether, where and how much to mix."""
        self.last = None
        self._chosen = None
        if not self.layers:
            return
        alpha, prob = self._settings["alpha"].value, self._settings["prob"].value
        if alpha <= 0.0 or prob <= 0.0 or (prob < 1.0 and float(torch.rand(())) >= prob):
            return
        self._chosen = self.layers[int(torch.randint(len(self.layers), ()))]
        self._lam = float(torch.distributions.Beta(alpha, alpha).sample())

    def at(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        if layer != self._chosen or self.last is not None:
            return x
        index = torch.randperm(x.shape[0], device=x.device)
        if self.mode == "mixup":
            out, lam = F.mixup(x, self._lam, index), self._lam
        else:
            out, lam = F.cutmix(x, self._lam, index, layout=self.layout)
        self.last = {"lam": lam, "index": index, "layer": layer}
        return out

    def apply(self, x: torch.Tensor, **values: Any) -> torch.Tensor:
        raise TypeError("ManifoldMixup acts through plugdrop.attach (it picks one attached "
                        "layer per forward); use plugdrop.functional.mixup / cutmix directly")
