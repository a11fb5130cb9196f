"""Hidden-layer augmentation that mixes samples: Manifold Mixup and feature CutMix."""

from __future__ import annotations

from typing import Any

import torch

from .. import _checks
from .. import functional as F
from ..errors import SettingError
from ..schedules import ScheduleLike
from .base import CoordinatedTransform

__all__ = ["ManifoldMixup"]


def _unit(name: str, value: object) -> float:
    value = _checks.real(name, value)
    if not 0.0 <= value <= 1.0:
        raise SettingError(f"{name} must be in [0, 1], got {value:g}")
    return value


class ManifoldMixup(CoordinatedTransform):
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

    def __init__(self, alpha: ScheduleLike = 2.0, *, mode: str = "mixup",
                 prob: ScheduleLike = 1.0, layout: str | None = None) -> None:
        super().__init__(alpha=(alpha, _checks.non_negative), prob=(prob, _unit))
        if mode not in ("mixup", "cutmix"):
            raise SettingError(f"mode must be 'mixup' or 'cutmix', got {mode!r}")
        if layout not in (None, "channels_first", "channels_last"):
            raise SettingError(f"ManifoldMixup's layout must be 'channels_first' or "
                               f"'channels_last', got {layout!r}")
        self.mode = mode
        self.layout = layout
        self._chosen: str | None = None
        self._lam = 1.0

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {} if self.mode == "mixup" else {"mode": self.mode}
        if self.layout is not None:
            opts["layout"] = self.layout
        return opts

    def _begin(self) -> None:
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

    def _at(self, layer: str, x: torch.Tensor) -> torch.Tensor:
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
