"""Hidden-layer augmentation that mixes samples: Manifold Mixup and feature CutMix."""

from __future__ import annotations

from typing import Any

import torch

from .. import _checks, _impl
from .. import functional as F
from ..errors import SettingError
from ..schedules import ScheduleLike
from .base import Check, CoordinatedTransform

__all__ = ["ManifoldMixup", "PatchUp"]


class _Mixing(CoordinatedTransform):
    """What the mixing transforms share: a mode (the first is the default), a layout, the
    probability ``prob`` that a forward mixes, and the layer picked for it."""

    MODES: tuple[str, ...] = ()

    def __init__(self, mode: str, layout: str | None,
                 **settings: tuple[ScheduleLike, Check]) -> None:
        super().__init__(**settings)
        name = type(self).__name__
        if mode not in self.MODES:
            raise SettingError(f"{name}'s mode must be one of {self.MODES}, got {mode!r}")
        if layout not in (None, "channels_first", "channels_last"):
            raise SettingError(f"{name}'s layout must be 'channels_first' or "
                               f"'channels_last', got {layout!r}")
        self.mode = mode
        self.layout = layout
        self._chosen: str | None = None

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {} if self.mode == self.MODES[0] else {"mode": self.mode}
        if self.layout is not None:
            opts["layout"] = self.layout
        return opts

    def _pick(self, active: bool) -> bool:
        """Start of a training forward: forget the last mix; if ``active``, with probability
        ``prob``, pick the layer that mixes. Returns whether one was picked."""
        self.last = None
        self._chosen = None
        prob = self._settings["prob"].value
        if not self.layers or not active or prob <= 0.0 or (
                prob < 1.0 and float(torch.rand(())) >= prob):
            return False
        self._chosen = self.layers[int(torch.randint(len(self.layers), ()))]
        return True


class ManifoldMixup(_Mixing):
    """Manifold Mixup (Verma et al., 2019) and feature-level CutMix across the attached layers.

    On each training forward of the model it was attached to, with probability ``prob``, one of
    the attached layers is picked uniformly at random, ``lam ~ Beta(alpha, alpha)`` and a
    permutation ``index`` of the batch are drawn, and only that layer's output is mixed:
    ``lam * h + (1 - lam) * h[index]`` (``mode="mixup"``), or a random box of the feature map is
    replaced by the same box of ``h[index]`` (``mode="cutmix"``; ``lam`` becomes the kept area
    fraction). Attaching to the root ``""`` mixes the model's input (input mixup). The handle
    returned by :func:`plugdrop.attach` (a :class:`plugdrop.MixupHandle`) reports ``lam``,
    ``index`` and ``layer`` of the last forward and mixes the targets in
    ``handle.loss(criterion, logits, target)``.

    Args:
        alpha: Beta distribution parameter, ``>= 0`` (0: no mixing); a number or a schedule.
        mode: ``"mixup"`` (default) or ``"cutmix"``.
        prob: probability that a forward mixes at all, in ``[0, 1]``; a number or a schedule.
        layout: for ``"cutmix"``: ``"channels_first"`` (default) or ``"channels_last"`` maps.
    """

    MODES = ("mixup", "cutmix")

    def __init__(self, alpha: ScheduleLike = 2.0, *, mode: str = "mixup",
                 prob: ScheduleLike = 1.0, layout: str | None = None) -> None:
        super().__init__(mode, layout, alpha=(alpha, _checks.non_negative),
                         prob=(prob, _checks.unit))
        self._lam = 1.0

    def _begin(self) -> None:
        """Start of a training forward: decide whether, where and how much to mix."""
        alpha = self._settings["alpha"].value
        if not self._pick(alpha > 0.0):
            return
        self._lam = float(torch.distributions.Beta(alpha, alpha).sample())

    def _at(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        if layer != self._chosen or self.last is not None:
            return x
        index = torch.randperm(x.shape[0], device=x.device)
        if self.mode == "mixup":
            out, lam = F.mixup(x, self._lam, index), self._lam
        else:
            out, lam = F.cutmix(x, self._lam, index, layout=self.layout)
        self._mixed(lam, index, layer)
        return out

    def apply(self, x: torch.Tensor, **values: Any) -> torch.Tensor:
        raise TypeError("ManifoldMixup acts through plugdrop.attach (it picks one attached "
                        "layer per forward); use plugdrop.functional.mixup / cutmix directly")


class PatchUp(_Mixing):
    """PatchUp (Faramarzi et al., 2022): hidden-feature block mixing across the attached layers.

    On each training forward, with probability ``prob``, one attached layer is picked uniformly
    and a permutation ``index`` of the batch is drawn; blocks drawn by DropBlock's exact mask
    generator (an expected fraction ``p`` of each map, one mask per sample shared by its
    channels) take the features of ``h[index]`` (``mode="hard"``) or
    ``lam * h + (1 - lam) * h[index]`` with ``lam ~ Beta(alpha, alpha)`` (``mode="soft"``).
    The handle (a :class:`plugdrop.MixupHandle`, as for :class:`ManifoldMixup`) mixes the
    targets in ``handle.loss(criterion, logits, target)`` with the weight of the original
    targets ``lam = 1 - (1 - lam_soft) * patched fraction`` (a 0-dim tensor: no host sync).

    Args:
        p: expected fraction of each map patched, in ``[0, 1)``; a number or a schedule.
        block_size: block side (int) or one per spatial dim, clipped to the map. Default: 7.
        mode: ``"hard"`` (default) or ``"soft"``.
        alpha: Beta parameter of the soft mixing weight, ``> 0``. Default: 2.
        prob: probability that a forward mixes at all, in ``[0, 1]``.
        layout: ``"channels_first"`` (default) or ``"channels_last"`` maps; a ``(B, F)``
            feature vector is read as a 1-D map.

    Raises:
        SettingError: a bad setting, mode or layout.
    """

    def __init__(self, p: ScheduleLike = 0.5, block_size: int | tuple[int, ...] = 7, *,
                 mode: str = "hard", alpha: ScheduleLike = 2.0, prob: ScheduleLike = 1.0,
                 layout: str | None = None) -> None:
        super().__init__(mode, layout, p=(p, _checks.probability),
                         alpha=(alpha, _checks.positive), prob=(prob, _checks.unit))
        self.block_size = _checks.block_size(block_size)
        self._lam = 0.0

    MODES = ("hard", "soft")

    def _options(self) -> dict[str, Any]:
        return {"block_size": self.block_size, **super()._options()}

    def _begin(self) -> None:
        if not self._pick(self._settings["p"].value > 0.0):
            return
        alpha = self._settings["alpha"].value
        self._lam = (float(torch.distributions.Beta(alpha, alpha).sample())
                     if self.mode == "soft" else 0.0)

    def _at(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        if layer != self._chosen or self.last is not None:
            return x
        index = torch.randperm(x.shape[0], device=x.device)
        out, lam = _impl.patchup(x, self._settings["p"].value, index, self.block_size, self._lam,
                              self.layout)
        self._mixed(lam, index, layer)
        return out

    def apply(self, x: torch.Tensor, **values: Any) -> torch.Tensor:
        raise TypeError("PatchUp acts through plugdrop.attach (it picks one attached layer per "
                        "forward); use plugdrop.functional.patchup directly")
