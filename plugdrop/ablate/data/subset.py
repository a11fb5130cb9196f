"""The part of a training split an ablation trains on (``train_size``): drawn once, with a
fixed generator, the same images for every variant, seed and process (:func:`draw_train`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch

from ..errors import ConfigError

__all__ = ["TRAIN_SIZE_SEED", "draw_train", "targets_of"]

#: Seed of the fixed draw of ``train_size`` images from a training split (:func:`draw_train`).
TRAIN_SIZE_SEED = 4321


def draw_train(labels: Sequence[int] | None, n: int, train_size: int | float | None,
               where: str) -> list[int] | None:
    """The images of a training split of ``n`` that an ablation with ``train_size`` trains on.

    The draw is fixed (a generator seeded with :data:`TRAIN_SIZE_SEED`, whatever the run's
    seed), so every variant, seed and process trains on the same images. With ``labels`` (the
    split's label of each image) it is stratified: each class keeps its share of the split
    (largest remainders; at least one image of each class), so that a small draw holds every
    class; without them (a torchvision data set that does not list its targets) it is a plain
    random draw.

    Args:
        labels: the label of each image of the split, or ``None``.
        n: the number of images of the split.
        train_size: a whole number of images (``300``), a fraction of the split in (0, 1)
            (``0.25``), or ``None``: all of them.
        where: the data's name, for errors.

    Returns:
        the chosen indices into the split, ascending, or ``None`` for all of them.

    Raises:
        ConfigError: more images than the split holds, fewer than its classes, a bad value.
    """
    if train_size is None:
        return None
    whole = isinstance(train_size, int) and not isinstance(train_size, bool)
    if not (whole and train_size >= 1) and not (
            isinstance(train_size, float) and 0 < train_size < 1):
        raise ConfigError(f"train_size: expected a whole number of images >= 1 or a fraction "
                          f"in (0, 1), got {train_size!r}")
    k = int(train_size) if whole else max(1, round(n * train_size))
    if k > n:
        raise ConfigError(f"train_size: {train_size} is more than the {n} images of the "
                          f"training split of {where}; give at most {n}, a fraction such as "
                          f"0.25, or none to train on all of them")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(TRAIN_SIZE_SEED)).tolist()
    if labels is None:
        return sorted(perm[:k])
    by_class: dict[int, list[int]] = {}
    for i in perm:
        by_class.setdefault(int(labels[i]), []).append(i)
    if k < len(by_class):
        raise ConfigError(f"train_size: {train_size} ({k} images) cannot hold one image of "
                          f"each of the {len(by_class)} classes of {where}; give at least "
                          f"{len(by_class)}")
    share = {c: k * len(ix) / n for c, ix in by_class.items()}
    take = {c: max(1, math.floor(q)) for c, q in share.items()}
    order = sorted(by_class, key=lambda c: (math.floor(share[c]) - share[c], c))
    for c in itertools.islice(itertools.cycle(order), max(0, k - sum(take.values()))):
        take[c] += 1
    while sum(take.values()) > k:  # the classes raised to one image take it from the largest
        take[max(take, key=lambda c: (take[c], -c))] -= 1
    return sorted(i for c, ix in by_class.items() for i in ix[:take[c]])


def targets_of(ds: Any) -> list[int] | None:
    """The label of each item of a torchvision data set, where it lists them (``targets``,
    ``labels``); ``None`` where it does not."""
    for name in ("targets", "labels", "_labels"):
        found = getattr(ds, name, None)
        if found is not None:
            try:
                return [int(t) for t in found]
            except (TypeError, ValueError):
                return None
    return None
