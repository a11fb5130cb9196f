"""YAML that remembers where each value came from: the library's reader
(:mod:`plugdrop.spec`), with the runner's own error type.

A value of the YAML file carries ``file:line:column``; a value given on the command line carries
its option (``--set KEY``, ``--epochs``). Every function here raises :class:`ConfigError`, also
for what the library's reader rejects (:func:`config_errors` converts at the boundary).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import plugdrop as pd

from ..errors import ConfigError

__all__ = ["Loc", "LocDict", "LocList", "config_errors", "fail", "loc_of", "plain", "suggest",
           "yaml_text"]

Loc = pd.spec.Loc
LocDict = pd.spec.LocDict
LocList = pd.spec.LocList
loc_of = pd.spec.loc_of
plain = pd.spec.plain
suggest = pd.spec.suggest


def fail(loc: Any, msg: str) -> ConfigError:
    """The error ``msg`` prefixed with its place (nothing to prefix: ``msg`` alone)."""
    return ConfigError(f"{loc}: {msg}" if loc else msg)


@contextlib.contextmanager
def config_errors() -> Iterator[None]:
    """Turn the library's :class:`plugdrop.SpecError` (same message, same place) into the
    runner's :class:`ConfigError` inside the block."""
    try:
        yield
    except pd.SpecError as e:
        raise ConfigError(str(e)) from None


def yaml_text(text: str, file: str, label: str | None = None) -> Any:
    """:func:`plugdrop.spec.read_yaml`, raising :class:`ConfigError`."""
    with config_errors():
        return pd.spec.read_yaml(text, file, label)
