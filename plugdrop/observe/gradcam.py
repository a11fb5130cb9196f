"""Grad-CAM heatmaps through an observer, and their overlays on the images."""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any, BinaryIO

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import _attach, _layout
from .._attach import Observer
from ..errors import SettingError, ShapeError

__all__ = ["gradcam", "save_gradcam"]


class _Keep(Observer):
    strict = True

    def __init__(self) -> None:
        self.act: torch.Tensor | None = None

    def on_forward(self, layer: str, module: nn.Module, x: torch.Tensor) -> None:
        self.act = x  # not detached: Grad-CAM differentiates the score with respect to it


def gradcam(model: nn.Module, x: torch.Tensor, layer: str, target: Any = None, *,
            layout: str | None = None, prefix_tokens: int | None = None) -> torch.Tensor:
    """Grad-CAM heatmaps (Selvaraju et al., 2017) of ``model`` at ``layer``.

    The class score's gradient with respect to the layer's activation is averaged over space
    per channel; the weighted sum of the activation's channels, through a ReLU, is upsampled
    to the input size and scaled to ``[0, 1]`` per image. Works in eval mode (gradients are
    enabled for the call); the model's parameters' ``.grad`` are left untouched.

    Args:
        x: input batch ``(B, C, H, W)``.
        layer: the name of one module (its output must be a feature map, or tokens /
            channels-last with ``layout=``, as in :class:`plugdrop.DropBlock`).
        target: the class whose score is explained: an int for every image, or one per image
            (a list or an integer tensor of ``B`` ints); each in ``0 .. classes - 1``, the
            classes read from the model's output ``(B, classes)`` (negative indices are not
            taken: ``-1`` is more likely a mistake than the last class). Default: the predicted
            class of each image.

    Returns:
        ``(B, H, W)`` float tensor in ``[0, 1]``.

    Raises:
        SettingError: a ``target`` outside ``0 .. classes - 1`` (naming it, the number of
            classes and the valid range).
        ShapeError: per-image targets whose number is not ``B``; a model output that is not
            ``(B, classes)``.
        TypeError: a ``target`` that is not an int, a list of ints or an integer tensor.
        ValueError: ``layer`` picks no module or several, the layer was not called, or its
            activation has no gradient.
    """
    names = _attach.select(model, layer)
    if len(names) != 1:
        raise ValueError(f"gradcam() needs one layer; {layer!r} picks {len(names)}: {names[:5]}")
    keep = _Keep()
    handle = _attach.observe(model, names[0], keep)
    try:
        with torch.enable_grad():
            out = model(x)
            if keep.act is None:
                raise ValueError(f"layer {names[0]!r} was not called in the forward")
            logits = out if isinstance(out, torch.Tensor) else out[0]
            if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
                got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else \
                    type(logits).__name__
                raise ShapeError(f"gradcam() needs class scores (B, classes) from the model, "
                                 f"got {got}")
            idx = logits.argmax(1) if target is None else _targets(target, logits)
            score = logits.gather(1, idx.view(-1, 1)).sum()
            act = keep.act
            if not act.requires_grad:
                raise ValueError(f"the activation of {names[0]!r} does not require grad (frozen "
                                 f"model under no_grad?); Grad-CAM needs its gradient")
            (grad,) = torch.autograd.grad(score, act)
    finally:
        handle.remove()
    a, _ = _layout.to_channels_first(act.detach(), layout, (2,), "gradcam", prefix_tokens)
    g, _ = _layout.to_channels_first(grad, layout, (2,), "gradcam", prefix_tokens)
    weights = g.mean(dim=(2, 3), keepdim=True)
    cam = F.relu((weights * a).sum(1, keepdim=True))
    cam = F.interpolate(cam.float(), size=x.shape[-2:], mode="bilinear", align_corners=False)
    cam = cam.squeeze(1)
    lo = cam.flatten(1).min(1).values.view(-1, 1, 1)
    hi = cam.flatten(1).max(1).values.view(-1, 1, 1)
    return torch.where(hi > lo, (cam - lo) / (hi - lo).clamp(min=1e-12), torch.zeros_like(cam))


def _targets(target: Any, logits: torch.Tensor) -> torch.Tensor:
    """``target`` as one class index per image (int64, on the logits' device), checked against
    the ``(B, classes)`` logits."""
    b, classes = logits.shape
    kinds = "an int, a list of ints or an integer tensor"
    if isinstance(target, bool) or not isinstance(target, (numbers.Integral, list, tuple,
                                                           torch.Tensor)):
        raise TypeError(f"gradcam() target must be {kinds}, got {type(target).__name__} "
                        f"{target!r}")
    if isinstance(target, (list, tuple)) and any(
            isinstance(t, bool) or not isinstance(t, numbers.Integral) for t in target):
        raise TypeError(f"gradcam() target must be {kinds}, got {target!r}")
    t = torch.as_tensor(target)
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"gradcam() target must be {kinds}, got a {t.dtype} tensor")
    if t.dim() == 0:
        t = t.expand(b)
    if t.shape != (b,):
        raise ShapeError(f"gradcam() got targets of shape {tuple(t.shape)} for {b} images: "
                         f"give one class per image, a ({b},) tensor or list, or one int")
    bad = ((t < 0) | (t >= classes)).nonzero().flatten().tolist()
    if bad:
        if isinstance(target, numbers.Integral) or torch.as_tensor(target).dim() == 0:
            which = f"target {int(t[0])} is"
        else:
            which = ", ".join(f"target[{i}] = {int(t[i])}" for i in bad[:3]) + (
                " ..." if len(bad) > 3 else "") + (" is" if len(bad) == 1 else " are")
        negative = "; negative indices are not taken" if bool((t < 0).any()) else ""
        raise SettingError(f"gradcam() {which} out of range: the model's output "
                           f"{tuple(logits.shape)} has {classes} classes, so a target is a "
                           f"class index in 0..{classes - 1}{negative}")
    return t.to(device=logits.device, dtype=torch.int64)


def save_gradcam(path: str | Path | BinaryIO, images: torch.Tensor, heatmaps: torch.Tensor,
                 *, titles: list[str] | None = None, alpha: float = 0.45) -> Path | BinaryIO:
    """Write a grid of images with their heatmaps overlaid to a PNG.

    Args:
        path: the PNG file to write, or a binary file object to write the PNG into (an
            ``io.BytesIO``, to write the bytes elsewhere yourself).
        images: ``(B, C, H, W)`` (any range: each is min-max scaled for display; 1 or 3
            channels shown as such, otherwise the first channel).
        heatmaps: ``(B, H, W)`` in ``[0, 1]``, as :func:`gradcam` returns for ``images``.
        titles: one title per image. Default: none.
        alpha: the heatmaps' opacity. Default: 0.45.

    Returns:
        The path written (a :class:`~pathlib.Path`), or the file object given.

    Raises:
        ShapeError: ``images`` not ``(B, C, H, W)``, ``heatmaps`` not ``(B, H, W)`` of the same
            ``B``, ``H`` and ``W`` (naming both shapes), or ``titles`` not one per image.
    """
    _check_overlay(images, heatmaps, titles)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b = len(images)
    cols = min(b, 8)
    rows = math.ceil(b / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(1.8 * cols, 1.9 * rows), squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i >= b:
            continue
        img = images[i].detach().float().cpu()
        img = (img - img.min()) / (img.max() - img.min()).clamp(min=1e-12)
        img = img.permute(1, 2, 0).squeeze(-1) if img.shape[0] in (1, 3) else img[0]
        ax.imshow(img.numpy(), cmap="gray" if img.dim() == 2 else None)
        ax.imshow(heatmaps[i].detach().float().cpu().numpy(), cmap="jet", alpha=alpha,
                  vmin=0, vmax=1)
        if titles:
            ax.set_title(titles[i], fontsize=8)
    fig.tight_layout()
    try:
        if hasattr(path, "write"):
            fig.savefig(path, dpi=110, format="png")
            return path  # type: ignore[return-value]
        target = Path(path)
        fig.savefig(target, dpi=110)
        return target
    finally:
        plt.close(fig)


def _check_overlay(images: torch.Tensor, heatmaps: torch.Tensor,
                   titles: list[str] | None) -> None:
    """Raise :class:`~plugdrop.ShapeError` unless ``heatmaps`` belong to ``images``."""
    shapes = f"images {tuple(images.shape)} and heatmaps {tuple(heatmaps.shape)}"
    if images.dim() != 4 or heatmaps.dim() != 3:
        raise ShapeError(f"save_gradcam() needs images (B, C, H, W) and heatmaps (B, H, W), got "
                         f"{shapes}")
    if len(images) != len(heatmaps):
        raise ShapeError(f"save_gradcam() got {shapes}: {len(images)} images but "
                         f"{len(heatmaps)} heatmaps; pass the heatmaps gradcam() returned for "
                         f"these images")
    if images.shape[-2:] != heatmaps.shape[-2:]:
        raise ShapeError(f"save_gradcam() got {shapes}: the heatmaps are not the images' size "
                         f"{tuple(images.shape[-2:])}; pass the heatmaps gradcam() returned for "
                         f"these images")
    if titles and len(titles) != len(images):
        raise ShapeError(f"save_gradcam() got {len(titles)} titles for {len(images)} images: "
                         f"give one per image")
