"""Tiny generated data for the data and model tests: ImageFolder trees of 16x16 PNGs (optionally
with a corrupt file) and a torchvision MNIST folder in its on-disk (idx) format."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from PIL import Image


def write_png(path: Path, value: int, size: int = 16) -> Path:
    """A ``size`` x ``size`` RGB PNG whose pixels depend on ``value``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(value)
    arr = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    arr[..., value % 3] = (value * 37) % 256
    Image.fromarray(arr).save(path)
    return path


def write_corrupt(path: Path) -> Path:
    """A file named like a PNG that PIL cannot read (a truncated PNG)."""
    good = write_png(path, 999)
    data = good.read_bytes()
    path.write_bytes(data[:len(data) // 3])
    return path


def image_folder(root: Path, classes: tuple[str, ...] = ("cat", "dog", "eel"), per_class: int = 8,
                 corrupt: int = 0) -> Path:
    """``root/<class>/<i>.png`` with ``per_class`` images per class; ``corrupt`` of them (in the
    first class) are truncated files named ``bad<i>.png``."""
    for c, name in enumerate(classes):
        for i in range(per_class):
            write_png(root / name / f"{i}.png", 100 * c + i)
    for i in range(corrupt):
        write_corrupt(root / classes[0] / f"bad{i}.png")
    return root


def split_folder(root: Path, val_name: str = "val", classes: tuple[str, ...] = ("a", "b"),
                 train_per_class: int = 6, val_per_class: int = 3) -> Path:
    """``root/train/<class>/...`` and ``root/<val_name>/<class>/...``."""
    image_folder(root / "train", classes, train_per_class)
    image_folder(root / val_name, classes, val_per_class)
    return root


def _idx(path: Path, arr: np.ndarray) -> None:
    code = 0x08  # unsigned byte
    header = struct.pack(">I", (code << 8) | arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    path.write_bytes(header + arr.astype(np.uint8).tobytes())


def fake_mnist(root: Path, n_train: int = 20, n_test: int = 10) -> Path:
    """``root/MNIST/raw/`` holding the four idx files torchvision's ``MNIST(root)`` reads."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        _idx(raw / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
        _idx(raw / f"{prefix}-labels-idx1-ubyte", np.arange(n) % 10)
    return root


def tiny_net(num_classes: int = 10, width: int = 4):
    """A tiny CNN factory for ``build_model('_gen:tiny_net')`` (stem, body, ``fc`` classifier)."""
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes))
