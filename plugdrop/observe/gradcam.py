"""Grad-CAM heatmaps through an observer, and their overlays on the images."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import _attach, _layout
from .._attach import Observer

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
        target: class index per image (int, list or tensor); default: the predicted class.

    Returns:
        ``(B, H, W)`` float tensor in ``[0, 1]``.
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
            if target is None:
                idx = logits.argmax(1)
            else:
                idx = torch.as_tensor(target, device=logits.device).long().expand(len(logits))
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


def save_gradcam(path: str | Path, images: torch.Tensor, heatmaps: torch.Tensor, *,
                 titles: list[str] | None = None, alpha: float = 0.45) -> Path:
    """Write a grid of images with their heatmaps overlaid to a PNG.

    ``images``: ``(B, C, H, W)`` (any range: each is min-max scaled for display; 1 or 3
    channels); ``heatmaps``: ``(B, H, W)`` in ``[0, 1]`` as :func:`gradcam` returns.
    """
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
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

