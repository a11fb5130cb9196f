"""What a config's ``data:`` names (:func:`parse_data_spec`): ``digits``, an ImageFolder path, or a
torchvision data set class with a local root. Nothing is read from disk here."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from ..errors import ConfigError

__all__ = ["DataSpec", "check_tv_options", "close_names", "parse_data_spec", "suggest",
           "torchvision_names"]

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
        written: the ``data:`` value as the config wrote it (what :meth:`plain` gives back for
            the resolved config and its hash); ``None``: :meth:`plain` writes the spec out.
    """

    kind: str
    name: str
    root: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    written: Any = field(default=None, compare=False)

    def plain(self) -> Any:
        """The ``data:`` value this spec was read from."""
        if self.written is not None:
            return self.written
        if self.kind == "torchvision":
            return {"name": self.name, "root": self.root, **dict(self.options)}
        return self.name


def torchvision_names() -> list[str]:
    import torchvision.datasets as tvd

    skip = {"VisionDataset", "DatasetFolder", "ImageFolder", "FakeData"}
    classes = {n: getattr(tvd, n, None) for n in tvd.__all__ if n not in skip}
    return sorted(n for n, c in classes.items() if isinstance(c, type) and issubclass(c, Dataset))


def close_names(word: str, choices: Sequence[str]) -> list[str]:
    lower = {c.lower(): c for c in choices}
    return [lower[c] for c in difflib.get_close_matches(word.lower(), list(lower), n=3, cutoff=0.6)]


def suggest(word: str, choices: Sequence[str]) -> str:
    close = close_names(word, choices)
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
    names = torchvision_names()
    if name in names:
        if root is None or not str(root).strip():
            raise ConfigError(f"data: {name} needs root: the folder that holds it (nothing is "
                              f"downloaded), e.g. {{name: {name}, root: /data/{name.lower()}}}")
        check_tv_options(name, options)
        return DataSpec("torchvision", name, str(root), options)
    if root is not None or options:
        raise ConfigError(f"data: {name!r} is not a torchvision data set class"
                          + (suggest(name, names) or f" (known: {', '.join(names[:8])}, ...)"))
    return DataSpec("folder", name)


def check_tv_options(name: str, options: Mapping[str, Any]) -> None:
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
                              + (suggest(key, accepted) or
                                 f" (it takes {', '.join(accepted) or 'none'})"))
