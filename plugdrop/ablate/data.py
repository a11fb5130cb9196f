"""TEMPORARY minimal data sets for the runner until the data helper's module is merged
(same API as the spec): digits in memory, an ImageFolder tree read lazily."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset

from .errors import ConfigError

AUGMENT_KEYS: frozenset[str] = frozenset({"hflip", "scale", "auto_augment", "re_prob"})
SPLIT_SEED = 1234


@dataclass(frozen=True)
class DataSpec:
    kind: str
    name: str
    root: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


def parse_data_spec(value: str | Mapping[str, Any]) -> DataSpec:
    if value == "digits":
        return DataSpec("digits", "digits")
    if isinstance(value, str) and value:
        return DataSpec("folder", value, value)
    raise ConfigError(f"data must be 'digits' or an ImageFolder path, got {value!r}")


@dataclass
class DataSets:
    train: Dataset
    val: Dataset
    classes: list[str]
    name: str
    in_memory: bool
    bad_images: Callable[[], int] = lambda: 0


def _split(n: int, val_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_val = max(1, int(round(n * val_fraction)))
    return perm[n_val:], perm[:n_val]


def build_datasets(spec: DataSpec, *, image_size: int, val_fraction: float,
                   augment: Mapping[str, Any] | None, model: torch.nn.Module | None,
                   bad_images: str = "error") -> DataSets:
    if spec.kind == "digits":
        from sklearn.datasets import load_digits

        d = load_digits()
        x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear",
                          align_corners=False).expand(-1, 3, -1, -1).contiguous()
        y = torch.tensor(d.target, dtype=torch.int64)
        tr, va = _split(len(x), val_fraction)
        mean = x[tr].mean(dim=(0, 2, 3), keepdim=True)
        std = x[tr].std(dim=(0, 2, 3), keepdim=True).clamp(min=1e-6)
        x = (x - mean) / std
        return DataSets(TensorDataset(x[tr], y[tr]), TensorDataset(x[va], y[va]),
                        [str(i) for i in range(10)], "digits", True)
    from torchvision import datasets, transforms

    root = Path(spec.name)
    if not root.is_dir():
        raise ConfigError(f"data: {spec.name!r} is not a folder")
    tf = transforms.Compose([transforms.Resize((image_size, image_size)),
                             transforms.Lambda(lambda im: im.convert("RGB")),
                             transforms.ToTensor()])
    if (root / "train").is_dir() and (root / "val").is_dir():
        train = datasets.ImageFolder(str(root / "train"), transform=tf)
        val = datasets.ImageFolder(str(root / "val"), transform=tf)
        return DataSets(train, val, train.classes, str(root), False)
    full = datasets.ImageFolder(str(root), transform=tf)
    tr, va = _split(len(full), val_fraction)
    return DataSets(torch.utils.data.Subset(full, tr.tolist()),
                    torch.utils.data.Subset(full, va.tolist()), full.classes, str(root), False)


def default_workers() -> int:
    return min(8, max(0, (os.cpu_count() or 1) - 1))


def make_loader(ds: Dataset, *, batch_size: int, train: bool, workers: int, seed: int,
                epoch: int, rank: int = 0, world: int = 1,
                device: torch.device = torch.device("cpu")) -> DataLoader:
    if train:
        sampler: Any = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True,
                                          seed=seed, drop_last=True)
        sampler.set_epoch(epoch)
    else:
        sampler = list(range(rank, len(ds), world))  # type: ignore[arg-type]
    return DataLoader(ds, batch_size=batch_size, sampler=sampler, num_workers=workers,
                      drop_last=train, pin_memory=device.type == "cuda",
                      generator=torch.Generator().manual_seed(seed * 1000 + epoch))
