"""Loaders over one process's share of a data set: shuffled in an order fixed by (seed, epoch),
sharded over ranks, with unreadable images handed to the main process (:class:`CheckedLoader`).
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import (DataLoader, Dataset, DistributedSampler, Sampler, TensorDataset,
                              default_collate, get_worker_info)

from ..errors import ConfigError
from .images import BadImage, BadImageLog, find_log

__all__ = ["CheckedLoader", "ShardSampler", "default_workers", "make_loader"]


class ShardSampler(Sampler[int]):
    """Sequential indices of one rank's contiguous shard of ``range(n)``: shards cover every index
    once (no padding duplicates; shard sizes differ by at most one)."""

    def __init__(self, n: int, rank: int, world: int) -> None:
        self.start = n * rank // world
        self.stop = n * (rank + 1) // world

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.stop))

    def __len__(self) -> int:
        return self.stop - self.start


class _Skip(Sampler[int]):
    """``sampler``'s indices without the first ``skip``: where a run resumed in the middle of
    an epoch goes on (the order is the whole epoch's; no skipped image is loaded)."""

    def __init__(self, sampler: Sampler[int], skip: int) -> None:
        self.sampler, self.skip = sampler, skip

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(iter(self.sampler), self.skip, None)

    def __len__(self) -> int:
        return max(0, len(self.sampler) - self.skip)  # type: ignore[arg-type]


class _SeededSamples(Dataset):
    """``ds`` whose sample ``i`` is made, in a worker process, with torch's, Python's and NumPy's
    generators seeded from ``(base, i)``: a random augmentation then depends on the sample and
    the epoch, not on which worker made it or what it made before, so an epoch resumed in the
    middle (or with another worker count) draws the augmentations an uninterrupted one did.
    In the main process (``workers: 0``) the run's own generators go on, as they are saved in
    its checkpoints."""

    def __init__(self, ds: Dataset, base: int) -> None:
        self.ds, self.base = ds, base

    def __len__(self) -> int:
        return len(self.ds)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> Any:
        if get_worker_info() is not None:
            seed = (self.base * 2_654_435_761 + int(i) * 40_503 + 1) % (2 ** 63)
            torch.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed % (2 ** 32))
        return self.ds[i]


def _collate(batch: list[Any]) -> tuple[Any, list[BadImage]]:
    """Collates the readable samples and passes the unreadable ones' markers on (in a worker)."""
    good = [b for b in batch if not isinstance(b, BadImage)]
    bad = [b for b in batch if isinstance(b, BadImage)]
    return (default_collate(good) if good else None), bad


class CheckedLoader(DataLoader):
    """A :class:`~torch.utils.data.DataLoader` that hands unreadable images to the main process's
    log: it raises :class:`ConfigError` naming the file (``bad_images="error"``), or drops and
    counts them (``"skip"``). Yields ``(images, labels)`` like a plain loader."""

    def __init__(self, *args: Any, bad_log: BadImageLog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bad_log = bad_log
        #: batches of the sampler taken so far, dropped ones included (where a resume goes on)
        self.consumed = 0

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        it = super().__iter__()
        self.consumed = 0
        try:
            for batch, bad in it:
                self.consumed += 1
                self.bad_log.record(bad)
                if batch is None:
                    continue
                if bad and self.drop_last and len(batch[-1]) < 2:
                    continue  # skipping left a training batch of one: BatchNorm cannot take it
                yield batch
        finally:
            del it  # shuts the worker processes down now, also when an error is raised


def _loader_seed(seed: int, epoch: int, rank: int) -> int:
    return (int(seed) * 1_000_003 + int(epoch) * 10_007 + int(rank)) % (2 ** 63)


def make_loader(ds: Dataset, *, batch_size: int, train: bool, workers: int, seed: int, epoch: int,
                rank: int = 0, world: int = 1, device: torch.device, start_batch: int = 0
                ) -> DataLoader:
    """A loader over this process's share of ``ds``.

    Args:
        ds: a data set from :func:`build_datasets` (any map-style data set works).
        batch_size: samples per batch in THIS process (the global batch divided by ``world``).
        train: ``True``: shuffled in an order fixed by ``(seed, epoch)`` (so epoch ``k`` of a
            resumed run sees the same batches), sharded over ranks
            (:class:`~torch.utils.data.DistributedSampler` with ``drop_last=True``) and the last
            partial batch dropped (no batch of one reaches BatchNorm). ``False``: sequential,
            each rank a contiguous shard, no sample twice, the last partial batch kept.
        workers: worker processes (0: load in this process; in-memory data always uses 0).
        seed, epoch: fix the order and the workers' random seeds (augmentation).
        rank, world: this process's rank and the number of processes.
        device: where the batches go (pinned memory on CUDA).
        start_batch: (training) begin the epoch's order at this batch, as a run resumed in
            the middle of the epoch does; the batches before it are not loaded.

    Returns:
        a :class:`~torch.utils.data.DataLoader` yielding ``(images, labels)``: images of shape
        ``(B, 3, H, W)`` float, labels ``(B,)`` int64.

    Raises:
        ConfigError: a batch size, worker count or rank out of range; a training shard with fewer
            samples than one batch; (while iterating) an unreadable image with
            ``bad_images="error"``.
    """
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ConfigError(f"batch_size: expected a positive integer, got {batch_size!r}")
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
        raise ConfigError(f"workers: expected a non-negative integer or auto, got {workers!r}")
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"rank {rank} of world size {world} is out of range")
    if getattr(ds, "in_memory", False) or isinstance(ds, TensorDataset):
        workers = 0
    n = len(ds)  # type: ignore[arg-type]
    sampler: Sampler[int]
    if train:
        dist: DistributedSampler[int] = DistributedSampler(
            ds, num_replicas=world, rank=rank, shuffle=True, seed=int(seed), drop_last=True)
        dist.set_epoch(int(epoch))
        if len(dist) < batch_size:
            raise ConfigError(f"batch_size: {batch_size} per process is more than the "
                              f"{len(dist)} training images each of {world} process(es) gets "
                              f"({n} in all); lower batch_size or add data")
        sampler = _Skip(dist, start_batch * batch_size) if start_batch else dist
    else:
        sampler = ShardSampler(n, rank, world)
    gen = torch.Generator().manual_seed(_loader_seed(seed, epoch, rank))
    common: dict[str, Any] = dict(batch_size=batch_size, sampler=sampler, num_workers=workers,
                                  pin_memory=device.type == "cuda", drop_last=train,
                                  persistent_workers=False, generator=gen)
    log = find_log(ds)
    samples = _SeededSamples(ds, _loader_seed(seed, epoch, rank)) if train and workers else ds
    if log is None:  # data that cannot hold unreadable files (in memory, user data sets)
        return DataLoader(samples, **common)
    return CheckedLoader(samples, collate_fn=_collate, bad_log=log, **common)


def default_workers() -> int:
    """Worker processes for ``workers: auto``: the CPUs this process may use (shared by the
    processes of this node under torchrun, ``LOCAL_WORLD_SIZE``), less one for the training loop,
    between 1 and 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    try:
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local = 1
    return max(1, min(8, cpus // local - 1))
