"""Look inside a model through the same hooks that regularize it: capture, trace, watch and
Grad-CAM. Everything here attaches through :mod:`plugdrop`'s attachment layer (so
:func:`plugdrop.summary` lists it and :func:`plugdrop.detach` removes it) and leaves nothing
behind when its block or handle ends. Observers never change a value or a gradient.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import _attach, _layout, _selection
from ._attach import Observer
from ._selection import Selector
from .transforms import ForwardTransform

__all__ = ["capture", "trace", "watch", "gradcam", "save_gradcam", "layers", "Trace", "Watch",
           "LayerTable", "LayerRow"]


def _shape(x: Any) -> Any:
    return list(x.shape) if isinstance(x, torch.Tensor) else _attach._describe(x)


# ------------------------------------------------------------------------------ capture


class _Capture(Observer):
    def __init__(self, what: str, all_calls: bool, to_cpu: bool):
        self.what = what
        self.all_calls = all_calls
        self.to_cpu = to_cpu
        self.wants_grad = what == "grad"
        self.strict = True
        self.store: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"capture(what={self.what!r})"

    def _keep(self, layer: str, t: torch.Tensor) -> None:
        t = t.detach()
        if self.to_cpu:
            t = t.to("cpu", non_blocking=False)
        if self.all_calls:
            self.store.setdefault(layer, []).append(t)
        else:
            self.store[layer] = t

    def on_forward(self, layer: str, module: nn.Module, x: torch.Tensor) -> None:
        if self.what != "grad":
            self._keep(layer, x)

    def on_grad(self, layer: str, grad: torch.Tensor) -> None:
        self._keep(layer, grad)


@contextmanager
def capture(model: nn.Module, selector: Selector, *, what: str = "output",
            all_calls: bool = False, to_cpu: bool = False, exclude: Selector | None = None,
            element: int | str | None = None) -> Iterator[dict[str, Any]]:
    """Capture intermediate tensors without editing ``forward``.

    Args:
        model, selector, exclude: which modules (see :func:`plugdrop.select`).
        what: ``"output"`` (default), ``"input"`` (first positional input) or ``"grad"`` (the
            gradient flowing back into the module's output, filled in by ``backward()``).
        all_calls: keep every call's tensor in a list (modules called several times per
            forward, or several forwards); default: the latest call only.
        to_cpu: move captured tensors to the CPU (a host synchronization on CUDA).
        element: which element of a tuple/dict output (default: the first tensor).

    Yields:
        A dict ``layer name -> tensor`` (or list of tensors), filled as the model runs. Tensors
        are detached. Nothing stays attached after the block.

    Example::

        >>> with plugdrop.capture(model, "layer*") as feats:
        ...     model(x)
        >>> feats["layer3"].shape
    """
    if what not in ("output", "input", "grad"):
        raise ValueError(f"what must be 'output', 'input' or 'grad', got {what!r}")
    cap = _Capture(what, all_calls, to_cpu)
    handle = _attach.observe(model, selector, cap, exclude=exclude,
                             where="input" if what == "input" else "output", element=element)
    try:
        yield cap.store
    finally:
        handle.remove()


# -------------------------------------------------------------------------------- trace


class Trace(Observer):
    """The record of a :func:`trace` block: ``events``, a list of dicts with ``index``,
    ``phase`` (``"forward"`` or ``"backward"``), ``module``, ``type`` and ``shapes``."""

    wants_grad = True

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._types: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"trace({len(self.events)} events)"

    def on_forward(self, layer: str, module: nn.Module, x: torch.Tensor) -> None:
        self._types[layer] = type(module).__name__
        self.events.append({"index": len(self.events), "phase": "forward", "module": layer,
                            "type": type(module).__name__, "shapes": [_shape(x)]})

    def on_grad(self, layer: str, grad: torch.Tensor) -> None:
        self.events.append({"index": len(self.events), "phase": "backward", "module": layer,
                            "type": self._types.get(layer, "?"), "shapes": [_shape(grad)]})

    def __len__(self) -> int:
        return len(self.events)

    def __str__(self) -> str:
        if not self.events:
            return "(no events)"
        rows = [(str(e["index"]), e["phase"], e["module"] or "(root)", e["type"],
                 " ".join(str(tuple(s)) if isinstance(s, list) else str(s) for s in e["shapes"]))
                for e in self.events]
        header = ("#", "phase", "module", "type", "shape")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
                         for r in [header, *rows])

    def write_jsonl(self, path: str | Path) -> Path:
        """Write one JSON object per event; returns the path."""
        path = Path(path)
        with path.open("w") as f:
            for e in self.events:
                f.write(json.dumps(e) + "\n")
        return path


@contextmanager
def trace(model: nn.Module, selector: Selector = "**", *,
          exclude: Selector | None = None) -> Iterator[Trace]:
    """Record, in order, every forward and backward pass through the selected modules.

    A forward event is logged when a module returns (so a parent follows its children); a
    backward event when the gradient of a module's output arrives. ``print(t)`` shows the
    table; ``t.write_jsonl(path)`` writes JSON lines. Nothing stays attached after the block.
    """
    t = Trace()
    handle = _attach.observe(model, selector, t, exclude=exclude)
    try:
        yield t
    finally:
        handle.remove()


# -------------------------------------------------------------------------------- watch


class _Stats:
    """Running sums on the device (no host synchronization until read)."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}

    def add(self, key: str, value: torch.Tensor) -> None:
        value = value.detach().float()
        if key in self.sums:
            self.sums[key] += value
        else:
            self.sums[key] = value.clone()
        self.counts[key] = self.counts.get(key, 0) + 1

    def mean(self) -> dict[str, float]:
        return {k: (v / self.counts[k]).item() for k, v in self.sums.items()}


class _WatchBefore(Observer):
    """Sees a module's output before its transforms act (registered first)."""

    def __init__(self, watch: "Watch"):
        self.watch = watch

    def __repr__(self) -> str:
        return "watch(before transforms)"

    def on_forward(self, layer: str, module: nn.Module, x: torch.Tensor) -> None:
        if module.training and x.is_floating_point():
            self.watch._stats.add(f"{layer}\0zeros_before", (x == 0).float().mean())


class Watch(Observer):
    """Running per-layer statistics; see :func:`watch`."""

    wants_grad = True

    def __init__(self) -> None:
        self._stats = _Stats()
        self._handles: list[_attach.Handle] = []
        self._transforms: dict[str, list[ForwardTransform]] = {}
        self.steps = 0

    def __repr__(self) -> str:
        return "watch()"

    def on_forward(self, layer: str, module: nn.Module, x: torch.Tensor) -> None:
        if not module.training or not x.is_floating_point():
            return
        std, mean = torch.std_mean(x.detach().float()) if x.numel() > 1 else (
            torch.zeros((), device=x.device), x.detach().float().mean())
        self._stats.add(f"{layer}\0mean", mean)
        self._stats.add(f"{layer}\0std", std)
        self._stats.add(f"{layer}\0zeros", (x == 0).float().mean())

    def on_grad(self, layer: str, grad: torch.Tensor) -> None:
        self._stats.add(f"{layer}\0grad_norm", torch.linalg.vector_norm(grad.float()))

    def as_dict(self, reset: bool = False) -> dict[str, float]:
        """``{"layer/stat": value}``: means over the forwards since the last reset, for
        loggers. Stats: ``act_mean``, ``act_std``, ``act_zero_frac``, ``grad_norm``, and for
        layers with plugdrop forward transforms ``drop_frac`` (measured) and each transform's
        scheduled value (``p``...)."""
        raw = self._stats.mean()
        out: dict[str, float] = {}
        names = {"mean": "act_mean", "std": "act_std", "zeros": "act_zero_frac",
                 "grad_norm": "grad_norm"}
        for key, value in raw.items():
            layer, stat = key.split("\0")
            if stat in names:
                out[f"{layer}/{names[stat]}"] = value
        for layer, transforms in self._transforms.items():
            before = raw.get(f"{layer}\0zeros_before")
            after = raw.get(f"{layer}\0zeros")
            if before is not None and after is not None and before < 1.0:
                out[f"{layer}/drop_frac"] = (after - before) / (1.0 - before)
            for t in transforms:
                for k, v in t.values().items():
                    out[f"{layer}/{k}"] = v
        if reset:
            self.reset()
        return out

    def reset(self) -> None:
        self._stats = _Stats()

    def table(self) -> str:
        """The statistics as a printable table, one row per layer."""
        d = self.as_dict()
        layers: dict[str, dict[str, float]] = {}
        for key, value in d.items():
            layer, stat = key.rsplit("/", 1)
            layers.setdefault(layer, {})[stat] = value
        cols = ["act_mean", "act_std", "act_zero_frac", "grad_norm", "drop_frac"]
        extra = sorted({s for v in layers.values() for s in v} - set(cols))
        header = ["layer", *cols, *extra]
        rows = [[layer or "(root)"] + [f"{v[c]:.4g}" if c in v else "" for c in cols + extra]
                for layer, v in layers.items()]
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
                         for r in [header, *rows])

    def __str__(self) -> str:
        return self.table()

    def remove(self) -> None:
        """Take the watch off the model."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def watch(model: nn.Module, selector: Selector, *, exclude: Selector | None = None) -> Watch:
    """Keep running statistics of the selected layers in training mode.

    Per layer: activation mean, std and fraction of zeros, and the norm of the gradient of its
    output; for layers carrying plugdrop forward transforms, the measured fraction the
    transforms dropped (zeros after them beyond those before) next to their scheduled values.
    Statistics accumulate on the device without synchronizing; :meth:`Watch.as_dict` (for
    loggers, ``reset=True`` per epoch or step) and :meth:`Watch.table` read them.

    Returns a :class:`Watch`, attached until ``.remove()`` (or the end of a ``with`` block).
    """
    w = Watch()
    w._handles.append(_attach.observe(model, selector, w, exclude=exclude))
    names = _attach.select(model, selector, exclude=exclude)
    transforms: dict[str, list[ForwardTransform]] = {}
    for row_module, row_name in _modules_with_transforms(model, set(names)):
        transforms.setdefault(row_name, []).extend(row_module)
    if transforms:
        w._transforms = transforms
        w._handles.append(_attach.observe(model, list(transforms), _WatchBefore(w),
                                          prepend=True))
    return w


def _modules_with_transforms(model: nn.Module, names: set[str]):
    for entry_name, hooks in _attach.forward_transforms(model).items():
        if entry_name in names:
            yield hooks, entry_name


# ------------------------------------------------------------------------------ Grad-CAM


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


# ------------------------------------------------------------------------------ layers


class LayerRow(NamedTuple):
    """One module in a :class:`LayerTable`."""

    name: str      #: canonical name ("" for the root)
    type: str      #: class name
    depth: int     #: 0 for the root, 1 for its children, ...
    output: str    #: what the module returned in the dry forward, e.g. "Tensor(1, 64, 8, 8)"
    called: bool   #: whether the dry forward called the module at all
    picked: bool   #: whether ``selector`` picks it


class LayerTable(list):
    """The module tree of a model (a list of :class:`LayerRow`); prints as an indented table,
    picked modules marked with ``*``."""

    def __init__(self, rows: list[LayerRow], title: str = "") -> None:
        super().__init__(rows)
        self.title = title

    def __str__(self) -> str:
        lines = [self.title] if self.title else []
        if not self:
            return "\n".join(lines + ["(no modules)"])
        labels = ["  " * r.depth + (r.name or "(root)") for r in self]
        w1 = max(len(x) for x in labels)
        w2 = max(len(r.type) for r in self)
        for r, label in zip(self, labels):
            out = r.output if r.called else "(not called)"
            lines.append(f"{'*' if r.picked else ' '} {label.ljust(w1)}  {r.type.ljust(w2)}  {out}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)


def layers(model: nn.Module, *inputs: Any, selector: Selector | None = None,
           exclude: Selector | None = None, max_depth: int | None = None,
           **kwargs: Any) -> LayerTable:
    """The module tree of ``model`` with each module's type and output from one dry forward.

    The forward runs once in eval mode under ``torch.no_grad()`` with ``inputs`` / ``kwargs``
    (the model's training flag is restored); no hook is left behind. Use it to write a selector
    without reading the model's code: modules that ``selector`` picks are marked.

    Args:
        model: any ``nn.Module``; wrapper segments (DDP, ``torch.compile``) are hidden.
        *inputs, **kwargs: the example input(s) of the dry forward, e.g.
            ``torch.zeros(1, 3, 224, 224)``.
        selector, exclude: optional; see :func:`plugdrop.select`.
        max_depth: keep modules down to this depth only (0: the root). Default: all.

    Returns:
        A :class:`LayerTable` (rows in ``named_modules()`` order); ``print()`` it.

    Raises:
        ValueError: ``selector`` matches nothing (with the closest names), ``max_depth < 0``.
    """
    if max_depth is not None and (isinstance(max_depth, bool) or not isinstance(max_depth, int)
                                  or max_depth < 0):
        raise ValueError(f"max_depth must be an int >= 0 or None, got {max_depth!r}")
    picked = set(_attach.select(model, selector, exclude=exclude)) if selector is not None \
        else set()
    shapes = _attach.output_shapes(model, *inputs, **kwargs)
    rows = []
    for entry in _selection.walk(model):
        if entry.wrapper:
            continue
        depth = 0 if entry.name == "" else entry.name.count(".") + 1
        if max_depth is not None and depth > max_depth:
            continue
        rows.append(LayerRow(entry.name, type(entry.module).__name__, depth,
                             shapes.get(entry.name, ""), entry.name in shapes,
                             entry.name in picked))
    title = f"{type(model).__name__}: {len(rows)} modules"
    if selector is not None:
        title += f"; * = picked ({len(picked)})"
    return LayerTable(rows, title)
