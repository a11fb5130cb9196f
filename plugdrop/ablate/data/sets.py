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

``train_size`` trains on part of the training split (:func:`~.subset.draw_train`): a fixed
draw, the same images for every variant, seed and process, each class keeping its share; the
validation split stays whole.

Preprocessing of folder and torchvision data comes from timm's data package
(:func:`timm.data.resolve_data_config` with the model's pretrained config, so normalization follows
the model, and :func:`timm.data.create_transform`). Without ``augment`` both splits get timm's
evaluation transform (resize, center crop, normalize) so runs are deterministic; with ``augment``
(timm's names, :data:`AUGMENT_KEYS`) the training split gets timm's training transform.

Every split is the same for every seed and variant, so runs compare on equal terms.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, Subset, TensorDataset

from ..errors import ConfigError
from .images import AugmentedTensors, BadImageLog, ImageFiles, TorchvisionImages
from .spec import DataSpec, check_tv_options, close_names, torchvision_names
from .subset import draw_train, targets_of
from .transforms import check_augment, make_transforms

__all__ = ["BAD_IMAGES", "DataSets", "SPLIT_SEED", "VAL_SPLIT_NAMES", "build_datasets",
           "load_digits"]

#: Seed of the fixed train/validation split of data sets that come as one pool of images.
SPLIT_SEED = 1234
#: Folder names taken as the validation split next to ``train/`` (first match wins).
VAL_SPLIT_NAMES = ("val", "valid", "validation", "eval", "test")

#: The values of the ``bad_images`` setting.
BAD_IMAGES = ("error", "skip")


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
        files: for an ImageFolder tree, every image's path relative to the root, in the order
            scanned (what decides the split): an ablation records them and a resumed one
            compares (empty for other data).
    """

    train: Dataset
    val: Dataset
    classes: list[str]
    name: str
    in_memory: bool
    bad_images: Callable[[], int]
    data_config: Mapping[str, Any] = field(default_factory=dict)
    files: Sequence[str] = ()

    @property
    def num_classes(self) -> int:
        """The number of classes."""
        return len(self.classes)


def held_out(n: int, val_fraction: float, where: str) -> int:
    """How many of ``n`` images ``val_fraction`` holds out for validation.

    Raises:
        ConfigError: it rounds to none (a validation set of one image, made up without a
            word, would decide nothing), naming the least val_fraction that holds one.
    """
    n_val = int(round(n * val_fraction))
    if n_val < 1:
        least = math.ceil(100 / max(n, 1)) / 100  # two decimals, holding at least one image
        raise ConfigError(f"data: {where} has {n:,} images, of which val_fraction "
                          f"{val_fraction:g} holds out {n * val_fraction:.2g}: none would "
                          f"validate; give val_fraction >= {least:g} (a validation set of a "
                          f"few hundred images tells variants apart, one image does not)")
    return n_val


def _split_indices(n: int, val_fraction: float, where: str) -> tuple[list[int], list[int]]:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(SPLIT_SEED)).tolist()
    n_val = held_out(n, val_fraction, where)
    if n_val >= n:
        raise ConfigError(f"data: {where} has {n} images, too few to hold out val_fraction "
                          f"{val_fraction} and keep a training set; add images or lower "
                          f"val_fraction")
    return perm[n_val:], perm[:n_val]


def load_digits() -> tuple[Any, Any]:
    """scikit-learn's bundled digits: ``(images, target)``, ``(1797, 8, 8)`` float64 and
    ``(1797,)`` int. Read from the file scikit-learn ships (what its ``load_digits`` reads),
    without importing ``sklearn.datasets`` (about 2 s, in every run's process); through
    ``load_digits`` where that file is not found."""
    import importlib.util

    import numpy as np

    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        raise ConfigError("data: digits needs scikit-learn: pip install 'plugdrop[cli]'")
    path = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():  # pragma: no cover - another layout of scikit-learn
        from sklearn.datasets import load_digits as sklearn_digits

        d = sklearn_digits()
        return d.images, d.target
    data = np.loadtxt(path, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def _digits(image_size: int, val_fraction: float, augment: dict[str, Any] | None,
            train_size: int | float | None) -> DataSets:
    images, target = load_digits()
    x = torch.tensor(images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8)
    x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    x = x.expand(-1, 3, -1, -1).contiguous()
    y = torch.tensor(target, dtype=torch.int64)
    g = torch.Generator().manual_seed(SPLIT_SEED)
    perm = torch.randperm(len(x), generator=g)
    n_val = held_out(len(x), val_fraction, "digits")
    xt, yt, xv, yv = x[perm[n_val:]], y[perm[n_val:]], x[perm[:n_val]], y[perm[:n_val]]
    chosen = draw_train(yt.tolist(), len(yt), train_size, "digits")
    if chosen is not None:
        xt, yt = xt[chosen], yt[chosen]
    mean = xt.mean(dim=(0, 2, 3), keepdim=True)
    std = xt.std(dim=(0, 2, 3), keepdim=True).clamp(min=1e-6)
    config: dict[str, Any] = {"input_size": (3, image_size, image_size),
                              "mean": tuple(mean.flatten().tolist()),
                              "std": tuple(std.flatten().tolist())}
    train: Dataset
    if augment is None:
        train = TensorDataset((xt - mean) / std, yt)
    else:
        train_tf, _, config = make_transforms(augment, None, image_size,
                                          (config["mean"], config["std"]))
        assert train_tf is not None
        train = AugmentedTensors(xt, yt, train_tf)
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
            model: torch.nn.Module | str | None, bad_images: str,
            train_size: int | float | None) -> DataSets:
    root = Path(spec.name).expanduser()
    if not root.exists():
        close = close_names(spec.name, torchvision_names())
        hint = (f" (for torchvision's data set write data: {{name: {close[0]}, root: PATH}})"
                if close else "")
        raise ConfigError(f"data: {spec.name} does not exist; give 'digits', an ImageFolder "
                          f"directory or {{name: CIFAR10, root: PATH}}{hint}")
    if not root.is_dir():
        raise ConfigError(f"data: {root} is a file, not a directory; {_layout_hint(root)}")
    subdirs = {p.name.lower(): p for p in _subdirs(root)}
    train_dir = subdirs.get("train")
    val_dir = next((subdirs[n] for n in VAL_SPLIT_NAMES if n in subdirs), None)
    train_tf, eval_tf, cfg = make_transforms(augment, model, image_size)
    log = BadImageLog(bad_images)
    if train_dir is not None and val_dir is not None:
        train_samples, classes = _scan(train_dir, None)
        val_samples, _ = _scan(val_dir, classes)
        train: Dataset = ImageFiles(train_samples, train_tf or eval_tf, bad_images, log)
        chosen = draw_train([label for _, label in train_samples], len(train_samples),
                            train_size, str(root))
        train = train if chosen is None else Subset(train, chosen)
        val: Dataset = ImageFiles(val_samples, eval_tf, bad_images, log)
        scanned = train_samples + val_samples
    else:
        pool = train_dir if train_dir is not None and len(subdirs) == 1 else root
        samples, classes = _scan(pool, None)
        ti, vi = _split_indices(len(samples), val_fraction, str(pool))
        chosen = draw_train([samples[i][1] for i in ti], len(ti), train_size, str(root))
        ti = ti if chosen is None else [ti[i] for i in chosen]
        train = Subset(ImageFiles(samples, train_tf or eval_tf, bad_images, log), ti)
        val = Subset(ImageFiles(samples, eval_tf, bad_images, log), vi)
        scanned = samples
    files = [Path(p).relative_to(root).as_posix() for p, _ in scanned]
    return DataSets(train, val, classes, str(root), False, log.count, cfg, files)


def _tv_dataset(spec: DataSpec, image_size: int, val_fraction: float,
                augment: dict[str, Any] | None, model: torch.nn.Module | str | None,
                bad_images: str, train_size: int | float | None) -> DataSets:
    import torchvision.datasets as tvd

    cls = getattr(tvd, spec.name)
    root = Path(str(spec.root)).expanduser()
    options = dict(spec.options)
    check_tv_options(spec.name, options)
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
        targets = targets_of(base_train)
        n = max(targets) + 1 if targets else 0
        classes = [str(i) for i in range(n)]
    train_tf, eval_tf, cfg = make_transforms(augment, model, image_size)
    log = BadImageLog(bad_images)
    train: Dataset = TorchvisionImages(base_train, train_tf or eval_tf, bad_images, log, spec.name)
    val: Dataset = TorchvisionImages(base_val, eval_tf, bad_images, log, spec.name)
    if ti is not None and vi is not None:
        train, val = Subset(train, ti), Subset(val, vi)
    if train_size is not None:
        labels = targets_of(base_train)
        chosen = draw_train(None if labels is None else labels if ti is None else
                            [labels[i] for i in ti], len(train),  # type: ignore[arg-type]
                            train_size, spec.name)
        train = train if chosen is None else Subset(train, chosen)
    return DataSets(train, val, list(map(str, classes)), spec.name, False, log.count, cfg)


def build_datasets(spec: DataSpec, *, image_size: int, val_fraction: float,
                   augment: Mapping[str, Any] | None, model: torch.nn.Module | str | None,
                   bad_images: str = "error", train_size: int | float | None = None
                   ) -> DataSets:
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
        train_size: train on this many images of the training split (an integer), or this
            fraction of it (in (0, 1)), drawn once by :func:`~.subset.draw_train` (the same images for
            every run); ``None`` (default): all of it. The validation split stays whole.

    Returns:
        the :class:`DataSets`. Folder and torchvision data are only scanned here; images are read
        when indexed.

    Raises:
        ConfigError: a bad setting, a missing path or data set, a folder without two classes or
            with an empty class folder, an unknown ``augment`` key or a value timm rejects, a
            ``train_size`` larger than the training split.
    """
    if not isinstance(image_size, int) or isinstance(image_size, bool) or image_size < 1:
        raise ConfigError(f"image_size: expected a positive integer, got {image_size!r}")
    if not isinstance(val_fraction, (int, float)) or not 0 < val_fraction < 1:
        raise ConfigError(f"val_fraction: expected a number between 0 and 1, got {val_fraction!r}")
    if bad_images not in BAD_IMAGES:
        raise ConfigError(f"bad_images: expected 'error' or 'skip', got {bad_images!r}")
    aug = check_augment(augment)
    if spec.kind == "digits":
        return _digits(image_size, float(val_fraction), aug, train_size)
    if spec.kind == "folder":
        return _folder(spec, image_size, float(val_fraction), aug, model, bad_images, train_size)
    if spec.kind == "torchvision":
        return _tv_dataset(spec, image_size, float(val_fraction), aug, model, bad_images,
                           train_size)
    raise ConfigError(f"data: unknown kind {spec.kind!r} (digits, folder or torchvision)")
