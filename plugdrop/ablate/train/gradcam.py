"""Grad-CAM overlays of a finished run (the first seed of each variant): the layer is the
config's, or the last regularized layer whose map is at least 4x4."""

from __future__ import annotations

import io
import math
from pathlib import Path

import torch
import torch.nn as nn

import plugdrop as pd

from .. import runs
from ..config import AblationConfig
from ..data import DataSets
from .distributed import Dist

__all__ = ["gradcam_layer", "save_gradcam"]


def _output_shapes(model: nn.Module, x: torch.Tensor, names: list[str]) -> dict[str, tuple]:
    """The output shape of each named module whose output is one tensor, from one eval
    forward of ``x`` (:func:`plugdrop.layers`)."""
    wanted = set(names)
    return {r.name: r.shape for r in pd.layers(model, x)
            if r.name in wanted and r.shape is not None}


def _map_size(shape: tuple, prefix_tokens: int) -> int:
    if len(shape) == 4:
        return min(shape[2], shape[3])
    if len(shape) == 3:  # tokens
        n = shape[1] - prefix_tokens
        side = int(math.isqrt(max(n, 0)))
        return side if side * side == n else 0
    return 0


def gradcam_layer(cfg: AblationConfig, model: nn.Module, x: torch.Tensor) -> str | None:
    """The Grad-CAM layer: the config's, or (auto) the last regularized layer whose map is at
    least 4x4, else the last module of the model with such a map (never a 1x1 "heatmap")."""
    spec = cfg.gradcam_at
    if spec is None:
        return None
    if spec.where != "auto":
        return spec.where
    prefix = int(getattr(model, "num_prefix_tokens", 0) or 0)
    candidates: list[str] = []
    layers = cfg.attached_layers()
    if layers:
        for sel in layers:
            try:
                candidates += [n for n in pd.select(model, sel) if n not in candidates]
            except ValueError:
                pass
        order = [n for n, _ in model.named_modules()]
        candidates.sort(key=order.index)
        shapes = _output_shapes(model, x, candidates)
        good = [n for n in candidates if _map_size(shapes.get(n, ()), prefix) >= 4]
        if good:
            return good[-1]
    names = [n for n, _ in model.named_modules() if n]
    shapes = _output_shapes(model, x, names)
    good = [n for n in names if n in shapes and _map_size(shapes[n], prefix) >= 4]
    return good[-1] if good else None


def save_gradcam(cfg: AblationConfig, model: nn.Module, data: DataSets, d: Dist,
                 path: Path) -> str | None:
    """Grad-CAM overlays of the first validation images; returns the layer, or None."""
    spec = cfg.gradcam_at
    n = spec.count if spec is not None else 0
    xs, ys = [], []
    for i in range(min(n, len(data.val))):  # type: ignore[arg-type]
        x, y = data.val[i]
        xs.append(x)
        ys.append(int(y))
    if not xs:
        return None
    x = torch.stack(xs).to(d.device)
    if cfg.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    layer = gradcam_layer(cfg, model, x)
    if layer is None:
        return None
    shapes = _output_shapes(model, x[:1], [layer])
    layout = "tokens" if len(shapes.get(layer, ())) == 3 else None
    model.eval()
    cam = pd.gradcam(model, x, layer, layout=layout)
    with torch.no_grad():
        pred = model(x).argmax(1).cpu()
    titles = [f"{data.classes[t]}->{data.classes[int(p)]}" for t, p in zip(ys, pred)]
    png = io.BytesIO()
    pd.save_gradcam(png, x.float().cpu(), cam.float().cpu(), titles=titles)
    runs.atomic_write_bytes(path, png.getvalue(), "the Grad-CAM image")
    return layer
