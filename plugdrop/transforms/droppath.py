"""Stochastic depth: :class:`DropPath`, which drops whole samples of a residual branch, and
with ``skip_compute=True`` runs each branch on its kept samples only."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch

from .. import _checks
from .._kernels import kept as K
from .._kernels import masks
from ..errors import NotResidualWarning, SettingError, ShapeError
from ..schedules import ScheduleLike
from .base import ForwardTransform, Site

__all__ = ["DropPath", "PAD_CUDA"]


#: ``DropPath(skip_compute=True)``'s padding of the kept samples on a GPU unless ``pad`` says:
#: a multiple of 8 rows (at most ``batch / 8 + 1`` batch sizes per branch)
PAD_CUDA = 8


class DropPath(ForwardTransform):
    """Stochastic depth: drop whole samples with probability ``p``.

    Attach it to a residual *branch* (e.g. timm's ``blocks.*.mlp``), not to a whole block;
    the selector ``"residual:"`` picks a model's branches (:func:`plugdrop.residual_branches`).

    Args:
        p: sample drop probability in ``[0, 1)``; a number or a schedule.
        scale_by_keep: rescale kept samples by ``1 / (1 - p)``. Default: ``True``.
        skip_compute: in training, run each branch on its kept samples only: the branch's
            entry (the first module of its block through which the whole branch reads the
            residual stream, found with the branches) takes the kept samples, its exit puts
            their outputs back, scaled, with zeros for the others. The same outputs and
            gradients as without it for the same draw (up to the rounding of the smaller
            batch's arithmetic), less compute by the fraction dropped. Attach to residual
            branches (``"residual:"``) whose modules treat each sample on its own (no
            BatchNorm); anything else is refused at attach with
            :class:`~plugdrop.AttachError`. The kept samples are drawn on the host (the CPU
            generator: ``torch.manual_seed`` reproduces them), so nothing waits for the
            device. Where skipping cannot pay (``min_dropped``) the branch runs on every
            sample under the same draw's mask, as plain DropPath. Saves time on a CPU; on a
            GPU it was measured slower before its gather and scatter became one pass each
            and before that rule (``benchmarks/gpu_skip_syncs.py`` measures it). Default:
            ``False``. See the guide's page "Residual branches".
        pad: with ``skip_compute``, the kept samples are padded (with dropped ones, whose
            outputs are thrown away) to a multiple of ``pad`` rows, so that the branch meets
            at most ``batch / pad + 1`` batch sizes: on a GPU each new batch size costs cuDNN
            and cuBLAS a setup. The outputs and gradients are those of the kept samples
            alone. Default ``None``: 8 for CUDA tensors, 1 (no padding) elsewhere.
        min_dropped: with ``skip_compute``, a branch runs on its kept samples only when the
            expected number of dropped samples of the call, ``p * batch``, is at least this;
            below it (a small batch, a low rate: the first blocks of a rate rising with
            depth) the gather, the scatter and the padding cost more than the rows they
            save, and the branch runs on every sample, its output multiplied by the same
            draw's mask (plain DropPath's result). Default ``None``: the padding (8 rows on
            a GPU, 1 sample elsewhere).

    Shape: any, with the batch first.

    Raises:
        SettingError: a bad ``p`` (or a schedule reaching one).
        ShapeError: at the forward, a 0-dim tensor (naming the layer).
        TypeError: an integer or boolean input.
    """

    def __init__(self, p: ScheduleLike, *, scale_by_keep: bool = True,
                 skip_compute: bool = False, pad: int | None = None,
                 min_dropped: float | None = None) -> None:
        super().__init__(p=(p, _checks.probability))
        self.scale_by_keep = _checks.flag("scale_by_keep", scale_by_keep)
        self.skip_compute = _checks.flag("skip_compute", skip_compute)
        self.pad = None if pad is None else _checks.count("pad", pad)
        if self.pad is not None and not self.skip_compute:
            raise SettingError(f"DropPath(pad={pad}) pads the kept samples of skip_compute: "
                               f"add skip_compute=True, or leave pad out")
        self.min_dropped = None if min_dropped is None else _checks.non_negative(
            "min_dropped", min_dropped)
        if self.min_dropped is not None and not self.skip_compute:
            raise SettingError(f"DropPath(min_dropped={min_dropped}) says when skip_compute "
                               f"skips: add skip_compute=True, or leave min_dropped out")

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {} if self.scale_by_keep else {"scale_by_keep": False}
        if self.skip_compute:
            opts["skip_compute"] = True
        if self.pad is not None:
            opts["pad"] = self.pad
        if self.min_dropped is not None:
            opts["min_dropped"] = self.min_dropped
        return opts

    def _check_layers(self, layers: Sequence[tuple[str, Any]], site: Site) -> None:
        """Warn (:class:`~plugdrop.NotResidualWarning`) when some layers are not residual
        branches of the model (when its branches are known), naming the nearest ones. With
        ``skip_compute``, the attachment refuses them instead."""
        super()._check_layers(layers, site)
        found = None if self.skip_compute else site.residual_branches()
        if not found:
            return
        wrong = [n for n, _ in layers if not site.on_residual_branch(n)]
        if not wrong:
            return
        first = wrong[0]
        near = [b for b in found if b.startswith(first + ".")] or [
            b for b in found if b.rsplit(".", 1)[0] == first.rsplit(".", 1)[0]] or found
        warnings.warn(
            f"DropPath attached to {len(wrong)} module(s) that are not residual branches: "
            f"{', '.join(map(repr, wrong[:6]))}{' ...' if len(wrong) > 6 else ''}. There it "
            f"drops the whole sample's features; the residual branches are e.g. "
            f"{', '.join(map(repr, near[:4]))} (selector 'residual:', see "
            f"plugdrop.residual_branches)", NotResidualWarning, stacklevel=3)

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        return masks.drop_path(x, p, self.scale_by_keep)

    def _eager_at(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        y = masks.drop_path_cached(x, self._eager_value("p", layer), self.scale_by_keep)
        if y is None:
            y = self._at(layer, x)  # raises on a 0-dim or integer tensor
            masks.remember_batched(x)
        return y

    def _enter(self, layer: str, x: torch.Tensor, empty_ok: bool
               ) -> tuple[torch.Tensor, K.Kept | None]:
        """At the entry of branch ``layer`` with ``skip_compute`` (eager mode): draw which
        samples of the stream ``x`` keep the branch; returns the rows the branch runs on
        (``x`` itself when it keeps all, when ``p`` is 0, or where skipping cannot pay) and
        the draw (``None`` for ``p = 0``), which :meth:`_exit` takes back."""
        self._check_input(x)
        if x.dim() == 0:
            raise ShapeError("DropPath needs a batch dimension, got a 0-dim tensor")
        pad = self.pad if self.pad is not None else (PAD_CUDA if x.is_cuda else 1)
        least = self.min_dropped if self.min_dropped is not None else pad
        p = self._eager_value("p", layer)
        kept = K.draw(x, p, self.scale_by_keep, empty_ok, pad, K.pays(p, x.shape[0], least))
        if kept is None or kept.rows is None:
            return x, kept
        return K.take_rows(x, kept.rows, kept.kept), kept

    def _exit(self, layer: str, y: torch.Tensor, kept: K.Kept) -> torch.Tensor:
        """At the exit of branch ``layer``: its output ``y`` on the rows :meth:`_enter` gave,
        as the output for the whole batch (kept rows scaled, zeros elsewhere)."""
        return K.put_rows(y, kept)
