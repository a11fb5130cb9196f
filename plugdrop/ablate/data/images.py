"""Image data sets read lazily, one file per item, in the DataLoader's worker processes; an
unreadable image becomes a :class:`BadImage` marker that the loader turns into one clear error
naming the file, or drops and counts (``bad_images: skip``). An image that is no longer there
or can no longer be opened (a dropped network mount, a deleted or locked folder) is no bad image
but data that vanished: whatever ``bad_images`` says, it stops the ablation with
:class:`~plugdrop.ablate.errors.DataGone`, and ``--resume`` continues once it is back."""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch.utils.data import Dataset, get_worker_info

from ..errors import ConfigError, DataGone

__all__ = ["AugmentedTensors", "BadImage", "BadImageLog", "ImageFiles", "TorchvisionImages",
           "find_log"]


class BadImage(NamedTuple):
    """What an image data set returns (inside a DataLoader worker) for an unreadable image; the
    loader made by :func:`make_loader` drops it and counts it, or raises :class:`ConfigError`."""

    path: str
    message: str
    gone: bool = False


#: what opening a file that vanished or became unreadable raises (not a damaged image)
_GONE = {errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EIO, errno.ESTALE,
         errno.ENOTCONN, errno.ENODEV, errno.EHOSTDOWN, errno.ETIMEDOUT}


class BadImageLog:
    """The main process's record of unreadable images met by the loaders of one data set."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.paths: set[str] = set()

    def record(self, bad: Sequence[BadImage]) -> None:
        gone = next((b for b in bad if b.gone), None)
        if gone is not None:
            raise DataGone(gone.message, _GONE_FIX)
        if bad and self.mode == "error":
            raise ConfigError(bad[0].message)
        self.paths.update(b.path for b in bad)

    def count(self) -> int:
        return len(self.paths)


_GONE_FIX = "make the data readable there again (remount it), then continue"


def bad_image(log_mode: str, path: str, err: BaseException) -> BadImage:
    if isinstance(err, OSError) and err.errno in _GONE:
        msg = (f"data: {path}: {err.strerror or type(err).__name__} while training: the data "
               f"vanished or became unreadable (a dropped mount, a moved or locked folder?)")
        if get_worker_info() is None:
            raise DataGone(msg, _GONE_FIX) from None
        return BadImage(path, msg, gone=True)
    first = str(err).splitlines()[0] if str(err) else ""
    msg = (f"data: cannot read image {path} ({type(err).__name__}{': ' + first if first else ''}); "
           f"replace or delete the file, or set bad_images: skip to skip unreadable images")
    if log_mode == "error" and get_worker_info() is None:
        raise ConfigError(msg) from None
    return BadImage(path, msg)


def _read_errors() -> tuple[type[BaseException], ...]:
    """What PIL raises for a file it cannot read (truncated, not an image, a decompression bomb)."""
    from PIL import Image

    return (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError)


class ImageFiles(Dataset):
    """Images read lazily from files: ``dataset[i]`` opens ``samples[i]``'s file with PIL.

    Args:
        samples: ``(path, label)`` pairs.
        transform: turns an RGB PIL image into a tensor of shape ``(3, H, W)``.
        bad_images: ``"error"`` or ``"skip"``; an unreadable file makes ``dataset[i]`` raise
            :class:`ConfigError` in the main process and return a :class:`BadImage` in a worker
            process (and with ``"skip"``), which :func:`make_loader`'s loaders handle.
    """

    def __init__(self, samples: Sequence[tuple[str, int]], transform: Callable[[Any], torch.Tensor],
                 bad_images: str, log: BadImageLog) -> None:
        self.samples = samples
        self.transform = transform
        self.bad_mode = bad_images
        self.bad_log = log

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int] | BadImage:
        from torchvision.datasets.folder import default_loader

        path, label = self.samples[index]
        try:
            image = default_loader(path)  # PIL open + convert("RGB"), which reads the whole file
        except _read_errors() as e:
            return bad_image(self.bad_mode, path, e)
        return self.transform(image), label


class TorchvisionImages(Dataset):
    """A torchvision data set with a transform applied to its images converted to RGB.

    Args:
        base: the torchvision data set (without a transform of its own).
        transform: turns an RGB PIL image into a tensor of shape ``(3, H, W)``.
        bad_images, log: as for :class:`ImageFiles` (the item index names the image).
    """

    def __init__(self, base: Dataset, transform: Callable[[Any], torch.Tensor], bad_images: str,
                 log: BadImageLog, name: str) -> None:
        self.base = base
        self.transform = transform
        self.bad_mode = bad_images
        self.bad_log = log
        self.name = name

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int] | BadImage:
        from PIL import Image
        from torchvision.transforms.functional import to_pil_image

        try:
            image, label = self.base[index]
            if isinstance(image, torch.Tensor):
                image = to_pil_image(image)
            if isinstance(image, Image.Image):
                image = image.convert("RGB")
        except _read_errors() as e:
            return bad_image(self.bad_mode, f"{self.name}[{index}]", e)
        return self.transform(image), int(label)


class AugmentedTensors(Dataset):
    """In-memory images (float in [0, 1], ``(N, 3, H, W)``) through a PIL training transform."""

    in_memory = True

    def __init__(self, x: torch.Tensor, y: torch.Tensor,
                 transform: Callable[[Any], torch.Tensor]) -> None:
        self.x, self.y, self.transform = x, y, transform

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        from torchvision.transforms.functional import to_pil_image

        return self.transform(to_pil_image(self.x[index].clamp(0, 1))), self.y[index]


def find_log(ds: Dataset) -> BadImageLog | None:
    seen = 0
    while seen < 8:
        log = getattr(ds, "bad_log", None)
        if isinstance(log, BadImageLog):
            return log
        inner = getattr(ds, "dataset", None)
        if not isinstance(inner, Dataset):
            return None
        ds, seen = inner, seen + 1
    return None
