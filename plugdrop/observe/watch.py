"""``watch``: running per-layer statistics during training, with the measured drop fraction
of the layers' transforms next to their scheduled values."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.nn as nn

from .. import _attach
from .._attach import Observer, ObserverHandle
from .._selection import Selector
from .._table import format_table
from ..transforms import ForwardTransform

__all__ = ["watch", "Watch"]


class _Stats:
    """Running sums and counts on the device (no host synchronization until read).

    The counts are tensors and a reset zeroes the tensors in place, so that a compiled model
    sees the same objects at every step: a Python integer count would be a constant that
    ``torch.compile`` guards on, recompiling at every step until its recompile limit, and a new
    dictionary at each reset would recompile once more per reset."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, torch.Tensor] = {}

    def add(self, key: str, value: torch.Tensor) -> None:
        value = value.detach().float()
        if key in self.sums:
            self.sums[key] += value
            self.counts[key] += 1
        else:
            self.sums[key] = value.clone()
            self.counts[key] = torch.ones((), device=value.device, dtype=torch.float32)

    def mean(self) -> dict[str, float]:
        """Means of the keys added since the last reset (one host read)."""
        if not self.sums:
            return {}
        keys = list(self.sums)
        sums = torch.stack([self.sums[k].cpu() for k in keys])
        counts = torch.stack([self.counts[k].cpu() for k in keys])
        means = (sums / counts).tolist()  # in float32, as the sums are kept
        return {k: m for k, m, c in zip(keys, means, counts.tolist()) if c}

    def reset(self) -> None:
        for v in (*self.sums.values(), *self.counts.values()):
            v.zero_()


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
        self._handles: list[ObserverHandle] = []
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
        self._stats.reset()

    def state_dict(self) -> dict[str, Any]:
        """The running sums since the last reset (tensors) and their counts: what a checkpoint
        taken in the middle of an epoch keeps so that the epoch's means come out the same."""
        return {"sums": {k: v.detach().clone() for k, v in self._stats.sums.items()},
                "counts": {k: int(v) for k, v in self._stats.counts.items()}, "steps": self.steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict` (the sums move to the device they were on).

        Raises:
            ValueError: ``state`` is not a :meth:`state_dict` of a watch.
        """
        if not (isinstance(state, Mapping) and isinstance(state.get("sums"), Mapping)
                and isinstance(state.get("counts"), Mapping)):
            raise ValueError("watch.load_state_dict: expected the mapping of "
                             "Watch.state_dict() (sums, counts, steps)")
        stats = _Stats()
        counts = {str(k): int(v) for k, v in state["counts"].items()}
        stats.sums = {str(k): v.clone() for k, v in state["sums"].items() if str(k) in counts}
        stats.counts = {k: torch.tensor(float(counts[k]), device=v.device)
                        for k, v in stats.sums.items()}
        self._stats = stats
        self.steps = int(state.get("steps", 0))

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
        return format_table(header, rows)

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
    output (not while the forward runs under ``torch.compile``: see the observation guide);
    for layers carrying plugdrop forward transforms, the measured fraction the transforms
    dropped (zeros after them beyond those before) next to their scheduled values.
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


def _modules_with_transforms(model: nn.Module, names: set[str]
                             ) -> Iterator[tuple[list[ForwardTransform], str]]:
    for entry_name, hooks in _attach.forward_transforms(model).items():
        if entry_name in names:
            yield hooks, entry_name

