"""Data sets and loaders for ablations.

Three kinds of data, named by a config's ``data:`` key (see :func:`parse_data_spec`):

* ``digits`` (the default): scikit-learn's bundled 8x8 handwritten digits (1,797 images, nothing
  downloaded), resized to ``image_size``, repeated to 3 channels, held in memory and normalized with
  the training split's mean and standard deviation.
* an ImageFolder tree, ``PATH/<class>/<image>`` (split into train/val with a fixed seed) or
  ``PATH/train/<class>/...`` + ``PATH/val/<class>/...`` (``valid``, ``validation``, ``eval`` and
  ``test`` also name the validation split). Images are read lazily, one file per item, in the
  :class:`~torch.utils.data.DataLoader`'s worker processes.
* a torchvision data set class with a local root, ``{name: CIFAR10, root: /data/cifar}``; nothing is
  ever downloaded.

Preprocessing of folder and torchvision data comes from timm's data package
(:func:`timm.data.resolve_data_config` with the model's pretrained config, so normalization follows
the model, and :func:`timm.data.create_transform`). Without ``augment`` both splits get timm's
evaluation transform (resize, center crop, normalize) so runs are deterministic; with ``augment``
(timm's names, :data:`AUGMENT_KEYS`) the training split gets timm's training transform.

Every split is the same for every seed and variant, so runs compare on equal terms.
"""

from __future__ import annotations

import difflib
import inspect
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.data import (DataLoader, Dataset, DistributedSampler, Sampler, Subset,
                              TensorDataset, default_collate, get_worker_info)

from .errors import ConfigError

__all__ = ["AUGMENT_KEYS", "BAD_IMAGES", "DataSets", "DataSpec", "VAL_SPLIT_NAMES",
           "build_datasets", "default_workers", "make_loader", "parse_data_spec"]

#: Seed of the fixed train/validation split of data sets that come as one pool of images.
SPLIT_SEED = 1234

#: Folder names taken as the validation split next to ``train/`` (first match wins).
VAL_SPLIT_NAMES = ("val", "valid", "validation", "eval", "test")

#: The keys accepted in a config's ``augment:`` block: timm's own names
#: (:func:`timm.data.create_transform` / :func:`timm.data.resolve_data_config`).
AUGMENT_KEYS: frozenset[str] = frozenset({
    "hflip", "vflip", "color_jitter", "color_jitter_prob", "grayscale_prob", "gaussian_blur_prob",
    "auto_augment", "re_prob", "re_mode", "re_count", "scale", "ratio", "train_crop_mode",
    "interpolation", "crop_pct", "crop_mode", "mean", "std",
})

#: The values of the ``bad_images`` setting.
BAD_IMAGES = ("error", "skip")

# augment keys that resolve_data_config reads (they shape evaluation preprocessing too)
_RESOLVED_KEYS = ("interpolation", "crop_pct", "crop_mode", "mean", "std")
# keywords of torchvision data set classes that the runner sets itself
_TV_RESERVED = ("root", "transform", "target_transform", "transforms", "download", "train",
                "split", "loader")


@dataclass(frozen=True)
class DataSpec:
    """What a config's ``data:`` key resolves to.

    Args:
        kind: ``"digits"``, ``"folder"`` or ``"torchvision"``.
        name: ``"digits"``, the folder path, or the torchvision class name (``"CIFAR10"``).
        root: the folder holding a torchvision data set (``None`` for the other kinds).
        options: extra keyword arguments for a torchvision class; ``train_split`` / ``val_split``
            choose the ``split=`` values of classes that take one (default ``"train"`` and the
            first of ``"val"``, ``"test"`` the class accepts).
    """

    kind: str
    name: str
    root: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class DataSets:
    """The training and validation data of an ablation.

    Attributes:
        train: yields ``(image, label)``: a float tensor of shape ``(3, image_size, image_size)``
            and an int label (a 0-dim int64 tensor for ``digits``).
        val: the same for the validation split.
        classes: class names; label ``i`` is ``classes[i]``.
        name: ``"digits"``, the folder path or the torchvision class name.
        in_memory: ``True`` for ``digits`` (the loader then uses no worker processes).
        bad_images: a callable returning how many distinct unreadable images were skipped so far
            by this process's loaders (``bad_images="skip"``; always 0 otherwise).
        data_config: timm's resolved data config (input_size, interpolation, mean, std, crop_pct,
            crop_mode) for folder and torchvision data; for ``digits`` the training set's mean/std.
    """

    train: Dataset
    val: Dataset
    classes: list[str]
    name: str
    in_memory: bool
    bad_images: Callable[[], int]
    data_config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def num_classes(self) -> int:
        """The number of classes."""
        return len(self.classes)


# ----------------------------------------------------------------------------- parsing

def _torchvision_names() -> list[str]:
    import torchvision.datasets as tvd

    skip = {"VisionDataset", "DatasetFolder", "ImageFolder", "FakeData"}
    classes = {n: getattr(tvd, n, None) for n in tvd.__all__ if n not in skip}
    return sorted(n for n, c in classes.items() if isinstance(c, type) and issubclass(c, Dataset))


def _close(word: str, choices: Sequence[str]) -> list[str]:
    lower = {c.lower(): c for c in choices}
    return [lower[c] for c in difflib.get_close_matches(word.lower(), list(lower), n=3, cutoff=0.6)]


def _suggest(word: str, choices: Sequence[str]) -> str:
    close = _close(word, choices)
    return f"; did you mean {' or '.join(map(repr, close))}?" if close else ""


def parse_data_spec(value: str | Mapping[str, Any]) -> DataSpec:
    """The :class:`DataSpec` a config's ``data:`` value names.

    Args:
        value: ``"digits"``, a folder path, ``{path: PATH}``, ``{name: digits}`` or
            ``{name: CIFAR10, root: PATH, **options}`` (options may also be given as ``options:``).

    Returns:
        the parsed spec (nothing is read from disk yet).

    Raises:
        ConfigError: an empty value, a mapping without ``name``/``path``, a torchvision class
            without ``root``, an unknown torchvision class (with a suggestion), options for a
            folder or for ``digits``.
    """
    if isinstance(value, (str, Path)):
        text = str(value).strip()
        if not text:
            raise ConfigError("data: empty; give 'digits', an ImageFolder directory or "
                              "{name: CIFAR10, root: PATH}")
        if text == "digits":
            return DataSpec("digits", "digits")
        return DataSpec("folder", text)
    if not isinstance(value, Mapping):
        raise ConfigError(f"data: expected 'digits', a folder path or a mapping "
                          f"{{name: CIFAR10, root: PATH}}, got {type(value).__name__} {value!r}")
    rest = dict(value)
    if "path" in rest:
        path = rest.pop("path")
        if rest:
            raise ConfigError(f"data: {{path: {path}}} takes no other keys (got "
                              f"{', '.join(map(str, rest))}); options are for torchvision classes")
        return parse_data_spec(str(path))
    if "name" not in rest:
        raise ConfigError(f"data: the mapping {value!r} needs 'name' (digits or a torchvision "
                          f"class such as CIFAR10, with root:) or 'path' (an ImageFolder "
                          f"directory)")
    name = str(rest.pop("name")).strip()
    root = rest.pop("root", None)
    options = dict(rest.pop("options", None) or {})
    options.update(rest)
    if name == "digits":
        if root is not None or options:
            raise ConfigError("data: digits takes no root or options; remove them")
        return DataSpec("digits", "digits")
    names = _torchvision_names()
    if name in names:
        if root is None or not str(root).strip():
            raise ConfigError(f"data: {name} needs root: the folder that holds it (nothing is "
                              f"downloaded), e.g. {{name: {name}, root: /data/{name.lower()}}}")
        _check_tv_options(name, options)
        return DataSpec("torchvision", name, str(root), options)
    if root is not None or options:
        raise ConfigError(f"data: {name!r} is not a torchvision data set class"
                          + (_suggest(name, names) or f" (known: {', '.join(names[:8])}, ...)"))
    return DataSpec("folder", name)


def _check_tv_options(name: str, options: Mapping[str, Any]) -> None:
    import torchvision.datasets as tvd

    params = inspect.signature(getattr(tvd, name).__init__).parameters
    takes_split = "split" in params
    for key in options:
        if key in ("train_split", "val_split"):
            if not takes_split:
                raise ConfigError(f"data: {name} has no split= argument; remove {key}")
            continue
        if key in _TV_RESERVED:
            raise ConfigError(f"data: {key} is set by the runner for {name}; remove it"
                              + ("; choose splits with train_split: / val_split:"
                                 if key in ("split", "train") and takes_split else ""))
        if key not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            accepted = [p for p in params if p not in _TV_RESERVED and p != "self"]
            raise ConfigError(f"data: {name} has no option {key!r}"
                              + (_suggest(key, accepted) or
                                 f" (it takes {', '.join(accepted) or 'none'})"))


# ----------------------------------------------------------------------------- transforms

def _check_augment(augment: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if augment is None:
        return None
    if not isinstance(augment, Mapping):
        raise ConfigError(f"augment: expected a mapping of timm augmentation settings "
                          f"(e.g. {{hflip: 0.5, auto_augment: rand-m9-mstd0.5}}), got {augment!r}")
    out = dict(augment)
    for key, val in out.items():
        if key not in AUGMENT_KEYS:
            raise ConfigError(f"augment: unknown setting {key!r}"
                              + (_suggest(str(key), sorted(AUGMENT_KEYS))
                                 or f" (timm's names: {', '.join(sorted(AUGMENT_KEYS))})"))
        if key in ("mean", "std"):
            seq = [val] if isinstance(val, (int, float)) else val
            if (not isinstance(seq, Sequence) or isinstance(seq, str) or len(seq) not in (1, 3)
                    or not all(isinstance(v, (int, float)) for v in seq)):
                raise ConfigError(f"augment: {key} must be one number or three (per channel), "
                                  f"got {val!r}")
            out[key] = tuple(float(v) for v in seq)
        elif key in ("scale", "ratio"):
            if (not isinstance(val, Sequence) or isinstance(val, str) or len(val) != 2
                    or not all(isinstance(v, (int, float)) for v in val)):
                raise ConfigError(f"augment: {key} must be two numbers [low, high], got {val!r}")
            out[key] = (float(val[0]), float(val[1]))
        elif key == "color_jitter" and isinstance(val, list):
            out[key] = tuple(val)
    return out


def _pretrained_cfg(name: str) -> dict[str, Any] | None:
    """timm's pretrained config of a model name (``None`` for factories and unknown names)."""
    import timm
    from timm.models import get_pretrained_cfg

    if ":" in name or not timm.is_model(name):
        return None
    try:
        cfg = get_pretrained_cfg(name)
    except RuntimeError:  # an unknown weights tag: build_model reports it
        return None
    return cfg.to_dict() if cfg is not None else None


def _transforms(augment: dict[str, Any] | None, model: torch.nn.Module | str | None,
                image_size: int, stats: tuple[tuple[float, ...], tuple[float, ...]] | None = None
                ) -> tuple[Callable[[Any], torch.Tensor] | None, Callable[[Any], torch.Tensor],
                           dict[str, Any]]:
    """(train transform or None when there is no augmentation, eval transform, data config)."""
    from timm.data import create_transform, resolve_data_config

    args: dict[str, Any] = {k: v for k, v in (augment or {}).items() if k in _RESOLVED_KEYS}
    args["input_size"] = (3, image_size, image_size)
    if stats is not None:
        args.setdefault("mean", stats[0])
        args.setdefault("std", stats[1])
    try:
        if isinstance(model, str):
            cfg = resolve_data_config(args, pretrained_cfg=_pretrained_cfg(model))
        else:
            cfg = resolve_data_config(args, model=model)
    except (AssertionError, ValueError, TypeError) as e:
        raise ConfigError(f"augment: {e or type(e).__name__}") from None
    eval_tf = create_transform(**cfg, is_training=False)
    train_tf = None
    if augment is not None:
        extra = {k: v for k, v in augment.items() if k not in _RESOLVED_KEYS}
        try:
            train_tf = create_transform(**{k: v for k, v in cfg.items() if k != "crop_pct"},
                                        is_training=True, **extra)
        except (AssertionError, ValueError, TypeError, KeyError) as e:
            shown = ", ".join(f"{k}: {v}" for k, v in extra.items())
            raise ConfigError(f"augment: timm rejects {{{shown}}}: "
                              f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return train_tf, eval_tf, dict(cfg)


# ----------------------------------------------------------------------------- bad images

class BadImage(NamedTuple):
    """What an image data set returns (inside a DataLoader worker) for an unreadable image; the
    loader made by :func:`make_loader` drops it and counts it, or raises :class:`ConfigError`."""

    path: str
    message: str


class _BadImageLog:
    """The main process's record of unreadable images met by the loaders of one data set."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.paths: set[str] = set()

    def record(self, bad: Sequence[BadImage]) -> None:
        if bad and self.mode == "error":
            raise ConfigError(bad[0].message)
        self.paths.update(b.path for b in bad)

    def count(self) -> int:
        return len(self.paths)


def _bad(log_mode: str, path: str, err: BaseException) -> BadImage:
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
                 bad_images: str, log: _BadImageLog) -> None:
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
            return _bad(self.bad_mode, path, e)
        return self.transform(image), label


class TorchvisionImages(Dataset):
    """A torchvision data set with a transform applied to its images converted to RGB.

    Args:
        base: the torchvision data set (without a transform of its own).
        transform: turns an RGB PIL image into a tensor of shape ``(3, H, W)``.
        bad_images, log: as for :class:`ImageFiles` (the item index names the image).
    """

    def __init__(self, base: Dataset, transform: Callable[[Any], torch.Tensor], bad_images: str,
                 log: _BadImageLog, name: str) -> None:
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
            return _bad(self.bad_mode, f"{self.name}[{index}]", e)
        return self.transform(image), int(label)


class _AugmentedTensors(Dataset):
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


def _find_log(ds: Dataset) -> _BadImageLog | None:
    seen = 0
    while seen < 8:
        log = getattr(ds, "bad_log", None)
        if isinstance(log, _BadImageLog):
            return log
        inner = getattr(ds, "dataset", None)
        if not isinstance(inner, Dataset):
            return None
        ds, seen = inner, seen + 1
    return None


# ----------------------------------------------------------------------------- data sets

def _split_indices(n: int, val_fraction: float, where: str) -> tuple[list[int], list[int]]:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(SPLIT_SEED)).tolist()
    n_val = max(1, int(round(n * val_fraction)))
    if n_val >= n:
        raise ConfigError(f"data: {where} has {n} images, too few to hold out val_fraction "
                          f"{val_fraction} and keep a training set; add images or lower "
                          f"val_fraction")
    return perm[n_val:], perm[:n_val]


def _digits(image_size: int, val_fraction: float, augment: dict[str, Any] | None) -> DataSets:
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover - scikit-learn is in the cli extra
        raise ConfigError("data: digits needs scikit-learn: pip install 'plugdrop[cli]'") from e
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8)
    x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    x = x.expand(-1, 3, -1, -1).contiguous()
    y = torch.tensor(d.target, dtype=torch.int64)
    g = torch.Generator().manual_seed(SPLIT_SEED)
    perm = torch.randperm(len(x), generator=g)
    n_val = max(1, int(round(len(x) * val_fraction)))
    xt, yt, xv, yv = x[perm[n_val:]], y[perm[n_val:]], x[perm[:n_val]], y[perm[:n_val]]
    mean = xt.mean(dim=(0, 2, 3), keepdim=True)
    std = xt.std(dim=(0, 2, 3), keepdim=True).clamp(min=1e-6)
    config: dict[str, Any] = {"input_size": (3, image_size, image_size),
                              "mean": tuple(mean.flatten().tolist()),
                              "std": tuple(std.flatten().tolist())}
    train: Dataset
    if augment is None:
        train = TensorDataset((xt - mean) / std, yt)
    else:
        train_tf, _, config = _transforms(augment, None, image_size,
                                          (config["mean"], config["std"]))
        assert train_tf is not None
        train = _AugmentedTensors(xt, yt, train_tf)
    return DataSets(train, TensorDataset((xv - mean) / std, yv), [str(i) for i in range(10)],
                    "digits", True, lambda: 0, config)


def _subdirs(path: Path) -> list[Path]:
    return sorted((p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")),
                  key=lambda p: p.name)


def _layout_hint(root: Path) -> str:
    return (f"an ImageFolder tree is {root}/<class>/<image> or {root}/train/<class>/... + "
            f"{root}/val/<class>/...")


def _scan(folder: Path, classes: list[str] | None) -> tuple[list[tuple[str, int]], list[str]]:
    """``(path, label)`` pairs of the images under ``folder/<class>/``, and the class names."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, make_dataset

    names = [p.name for p in _subdirs(folder)]
    if not names:
        loose = any(p.suffix.lower() in IMG_EXTENSIONS for p in folder.iterdir() if p.is_file())
        raise ConfigError(f"data: {folder} has no class folders"
                          + (" (its images lie directly in it)" if loose else "")
                          + f"; {_layout_hint(folder)}")
    if classes is None:
        if len(names) < 2:
            raise ConfigError(f"data: {folder} has one class folder ({names[0]!r}); a classifier "
                              f"needs at least two: {_layout_hint(folder)}")
        classes = names
    else:
        extra = [n for n in names if n not in classes]
        if extra:
            raise ConfigError(f"data: {folder} has class folders the training split lacks "
                              f"({', '.join(extra)}); give both splits the same class folders")
    index = {c: i for i, c in enumerate(classes)}
    samples = make_dataset(str(folder), {n: index[n] for n in names}, extensions=IMG_EXTENSIONS,
                           allow_empty=True)
    found = {label for _, label in samples}
    for n in names:
        if index[n] not in found:
            raise ConfigError(f"data: class folder {folder / n} has no images "
                              f"({', '.join(IMG_EXTENSIONS)}); add images or remove the folder")
    return samples, classes


def _folder(spec: DataSpec, image_size: int, val_fraction: float, augment: dict[str, Any] | None,
            model: torch.nn.Module | str | None, bad_images: str) -> DataSets:
    root = Path(spec.name).expanduser()
    if not root.exists():
        close = _close(spec.name, _torchvision_names())
        hint = (f" (for torchvision's data set write data: {{name: {close[0]}, root: PATH}})"
                if close else "")
        raise ConfigError(f"data: {spec.name} does not exist; give 'digits', an ImageFolder "
                          f"directory or {{name: CIFAR10, root: PATH}}{hint}")
    if not root.is_dir():
        raise ConfigError(f"data: {root} is a file, not a directory; {_layout_hint(root)}")
    subdirs = {p.name.lower(): p for p in _subdirs(root)}
    train_dir = subdirs.get("train")
    val_dir = next((subdirs[n] for n in VAL_SPLIT_NAMES if n in subdirs), None)
    train_tf, eval_tf, cfg = _transforms(augment, model, image_size)
    log = _BadImageLog(bad_images)
    if train_dir is not None and val_dir is not None:
        train_samples, classes = _scan(train_dir, None)
        val_samples, _ = _scan(val_dir, classes)
        train: Dataset = ImageFiles(train_samples, train_tf or eval_tf, bad_images, log)
        val: Dataset = ImageFiles(val_samples, eval_tf, bad_images, log)
    else:
        pool = train_dir if train_dir is not None and len(subdirs) == 1 else root
        samples, classes = _scan(pool, None)
        ti, vi = _split_indices(len(samples), val_fraction, str(pool))
        train = Subset(ImageFiles(samples, train_tf or eval_tf, bad_images, log), ti)
        val = Subset(ImageFiles(samples, eval_tf, bad_images, log), vi)
    return DataSets(train, val, classes, str(root), False, log.count, cfg)


def _tv_dataset(spec: DataSpec, image_size: int, val_fraction: float,
                augment: dict[str, Any] | None, model: torch.nn.Module | str | None,
                bad_images: str) -> DataSets:
    import torchvision.datasets as tvd

    cls = getattr(tvd, spec.name)
    root = Path(str(spec.root)).expanduser()
    options = dict(spec.options)
    _check_tv_options(spec.name, options)
    train_split = options.pop("train_split", "train")
    val_split = options.pop("val_split", None)
    params = inspect.signature(cls.__init__).parameters
    where = str(root / cls.base_folder) if isinstance(getattr(cls, "base_folder", None), str) \
        else str(root)

    def make(**split: Any) -> Dataset:
        try:
            return cls(str(root), download=False, **split, **options) if "download" in params \
                else cls(str(root), **split, **options)
        except RuntimeError as e:
            raise ConfigError(f"data: {spec.name} not found under {root} (looked in {where}; "
                              f"{str(e).splitlines()[0] if str(e) else 'missing files'}); nothing "
                              f"is downloaded: put the data set there or fix root") from None
        except (OSError, FileNotFoundError) as e:
            raise ConfigError(f"data: {spec.name} cannot be read under {root} (looked in {where}: "
                              f"{e}); put the data set there or fix root") from None

    base_val: Dataset | None = None
    ti: list[int] | None = None
    vi: list[int] | None = None
    if "train" in params:
        base_train, base_val = make(train=True), make(train=False)
    elif "split" in params:
        base_train = make(split=train_split)
        if val_split is None:
            for candidate in ("val", "test"):
                try:
                    base_val = make(split=candidate)
                    break
                except ValueError:
                    continue
            if base_val is None:
                raise ConfigError(f"data: {spec.name} has neither a 'val' nor a 'test' split; "
                                  f"name one with val_split:")
        else:
            try:
                base_val = make(split=val_split)
            except ValueError as e:
                raise ConfigError(f"data: {spec.name} val_split: {e}") from None
    else:
        base_train = base_val = make()
        ti, vi = _split_indices(len(base_train), val_fraction, where)  # type: ignore[arg-type]
    assert base_val is not None
    classes = getattr(base_train, "classes", None)
    if not classes:
        targets = getattr(base_train, "targets", None)
        if targets is None:
            targets = getattr(base_train, "labels", None)
        n = int(torch.as_tensor(targets).max()) + 1 if targets is not None and len(targets) else 0
        classes = [str(i) for i in range(n)]
    train_tf, eval_tf, cfg = _transforms(augment, model, image_size)
    log = _BadImageLog(bad_images)
    train: Dataset = TorchvisionImages(base_train, train_tf or eval_tf, bad_images, log, spec.name)
    val: Dataset = TorchvisionImages(base_val, eval_tf, bad_images, log, spec.name)
    if ti is not None and vi is not None:
        train, val = Subset(train, ti), Subset(val, vi)
    return DataSets(train, val, list(map(str, classes)), spec.name, False, log.count, cfg)


def build_datasets(spec: DataSpec, *, image_size: int, val_fraction: float,
                   augment: Mapping[str, Any] | None, model: torch.nn.Module | str | None,
                   bad_images: str = "error") -> DataSets:
    """The training and validation data sets of ``spec``.

    Args:
        spec: from :func:`parse_data_spec`.
        image_size: side of the square images the model sees, in pixels.
        val_fraction: share of a pooled data set held out for validation (``digits``, a folder
            without ``train/``/``val/``, a torchvision class without splits), with the fixed
            seed :data:`SPLIT_SEED`. In (0, 1).
        augment: timm augmentation settings (keys in :data:`AUGMENT_KEYS`), or ``None`` for no
            augmentation (both splits get the evaluation transform).
        model: the model whose ``pretrained_cfg`` gives normalization and interpolation, or its
            timm name (``"resnet18"``: the same config without building the model), or ``None``
            (ImageNet's mean/std). Not used for ``digits``.
        bad_images: ``"error"`` (default): an unreadable image stops the loader with
            :class:`ConfigError` naming the file; ``"skip"``: it is dropped from its batch and
            counted (:attr:`DataSets.bad_images`).

    Returns:
        the :class:`DataSets`. Folder and torchvision data are only scanned here; images are read
        when indexed.

    Raises:
        ConfigError: a bad setting, a missing path or data set, a folder without two classes or
            with an empty class folder, an unknown ``augment`` key or a value timm rejects.
    """
    if not isinstance(image_size, int) or isinstance(image_size, bool) or image_size < 1:
        raise ConfigError(f"image_size: expected a positive integer, got {image_size!r}")
    if not isinstance(val_fraction, (int, float)) or not 0 < val_fraction < 1:
        raise ConfigError(f"val_fraction: expected a number between 0 and 1, got {val_fraction!r}")
    if bad_images not in BAD_IMAGES:
        raise ConfigError(f"bad_images: expected 'error' or 'skip', got {bad_images!r}")
    aug = _check_augment(augment)
    if spec.kind == "digits":
        return _digits(image_size, float(val_fraction), aug)
    if spec.kind == "folder":
        return _folder(spec, image_size, float(val_fraction), aug, model, bad_images)
    if spec.kind == "torchvision":
        return _tv_dataset(spec, image_size, float(val_fraction), aug, model, bad_images)
    raise ConfigError(f"data: unknown kind {spec.kind!r} (digits, folder or torchvision)")


# ----------------------------------------------------------------------------- loaders

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


def _collate(batch: list[Any]) -> tuple[Any, list[BadImage]]:
    """Collates the readable samples and passes the unreadable ones' markers on (in a worker)."""
    good = [b for b in batch if not isinstance(b, BadImage)]
    bad = [b for b in batch if isinstance(b, BadImage)]
    return (default_collate(good) if good else None), bad


class CheckedLoader(DataLoader):
    """A :class:`~torch.utils.data.DataLoader` that hands unreadable images to the main process's
    log: it raises :class:`ConfigError` naming the file (``bad_images="error"``), or drops and
    counts them (``"skip"``). Yields ``(images, labels)`` like a plain loader."""

    def __init__(self, *args: Any, bad_log: _BadImageLog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bad_log = bad_log

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        it = super().__iter__()
        try:
            for batch, bad in it:
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
                rank: int = 0, world: int = 1, device: torch.device) -> DataLoader:
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
        sampler = dist
    else:
        sampler = ShardSampler(n, rank, world)
    gen = torch.Generator().manual_seed(_loader_seed(seed, epoch, rank))
    common: dict[str, Any] = dict(batch_size=batch_size, sampler=sampler, num_workers=workers,
                                  pin_memory=device.type == "cuda", drop_last=train,
                                  persistent_workers=False, generator=gen)
    log = _find_log(ds)
    if log is None:  # data that cannot hold unreadable files (in memory, user data sets)
        return DataLoader(ds, **common)
    return CheckedLoader(ds, collate_fn=_collate, bad_log=log, **common)


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
