"""Data for ablations: the embedded digits set or an ImageFolder tree, held in memory. Private.

``digits`` is scikit-learn's bundled 8x8 handwritten digits (1,797 images, shipped with the
package, nothing downloaded), resized to ``image_size`` and repeated to 3 channels, with a fixed
train/validation split (the same for every seed and variant, so runs compare on equal terms).
An ImageFolder directory (``root/class_x/*.png``) is loaded the same way; if it has ``train/``
and ``val/`` subdirectories those are the split. Images are normalized with the training set's
mean and standard deviation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

SPLIT_SEED = 1234  # the fixed train/validation split


@dataclass
class Dataset:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    classes: list[str]
    name: str

    @property
    def num_classes(self) -> int:
        return len(self.classes)


def _split(x: torch.Tensor, y: torch.Tensor, val_fraction: float):
    g = torch.Generator().manual_seed(SPLIT_SEED)
    perm = torch.randperm(len(x), generator=g)
    n_val = max(1, int(round(len(x) * val_fraction)))
    return x[perm[n_val:]], y[perm[n_val:]], x[perm[:n_val]], y[perm[:n_val]]


def _normalize(ds: Dataset) -> Dataset:
    mean = ds.x_train.mean(dim=(0, 2, 3), keepdim=True)
    std = ds.x_train.std(dim=(0, 2, 3), keepdim=True).clamp(min=1e-6)
    ds.x_train = (ds.x_train - mean) / std
    ds.x_val = (ds.x_val - mean) / std
    return ds


def digits(image_size: int, val_fraction: float) -> Dataset:
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover - sklearn is a dependency of the CLI extra
        raise RuntimeError("the digits data set needs scikit-learn: pip install "
                           "'plugdrop[cli]'") from e
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8)
    x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    x = x.expand(-1, 3, -1, -1).contiguous()
    y = torch.tensor(d.target, dtype=torch.int64)
    return _normalize(Dataset(*_split(x, y, val_fraction), [str(i) for i in range(10)],
                              "digits"))


def _load_folder(root: Path, image_size: int, classes: list[str] | None = None):
    from torchvision import datasets, transforms

    tf = transforms.Compose([transforms.Resize((image_size, image_size)),
                             transforms.Lambda(lambda im: im.convert("RGB")),
                             transforms.ToTensor()])
    ds = datasets.ImageFolder(str(root), transform=tf)
    if classes is not None and ds.classes != classes:
        raise ValueError(f"{root} has classes {ds.classes}, the training split has {classes}")
    if len(ds) == 0:
        raise ValueError(f"no images found under {root}")
    xs, ys = zip(*(ds[i] for i in range(len(ds))))
    return torch.stack(xs), torch.tensor(ys, dtype=torch.int64), ds.classes


def image_folder(path: str, image_size: int, val_fraction: float) -> Dataset:
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"data: {path!r} is neither 'digits' nor a directory of images "
                         f"(ImageFolder layout: {path}/<class>/<image>)")
    if (root / "train").is_dir() and (root / "val").is_dir():
        xt, yt, classes = _load_folder(root / "train", image_size)
        xv, yv, _ = _load_folder(root / "val", image_size, classes)
        return _normalize(Dataset(xt, yt, xv, yv, classes, str(root)))
    x, y, classes = _load_folder(root, image_size)
    return _normalize(Dataset(*_split(x, y, val_fraction), classes, str(root)))


def load(name: str, image_size: int, val_fraction: float) -> Dataset:
    """The data set named by a config's ``data:`` key."""
    if name == "digits":
        return digits(image_size, val_fraction)
    return image_folder(name, image_size, val_fraction)
