"""Ablation configs: YAML in, a validated, frozen :class:`~.schema.AblationConfig` out.

Every error a user can cause is a :class:`~plugdrop.ablate.errors.ConfigError` whose one-line
message starts with the place: ``file:line:column`` for a value of the YAML file, ``--set KEY``
or ``--FLAG`` for a value given on the command line. The settings and their checks come from
the table in :mod:`.schema`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

import plugdrop as pd

from ..errors import ConfigError
from .checks import Value
from .locations import Loc, LocDict, config_errors, fail, plain, suggest, yaml_text
from .overrides import Override, apply, stored_override
from .schema import AblationConfig, settings
from .together import check_together
from .variants import parse_variants

__all__ = ["load", "loads", "parse", "read_config"]


def parse(raw: Any, source: str = "<config>", overrides: Sequence[Override] = (),
          text: str | None = None) -> AblationConfig:
    """Validate a loaded config (see :func:`load`) after applying ``overrides``; ``text``: the
    YAML it was read from (else it is written from ``raw``), kept with the overrides as the
    config's :attr:`~.schema.AblationConfig.origin`."""
    root_loc = getattr(raw, "loc", None) or Loc(source)
    if not isinstance(raw, dict):
        raise fail(root_loc, "the config must be a mapping of settings (model, data, "
                             "variants...)")
    origin = {"text": text if text is not None else _yaml_of(raw),
              "overrides": [stored_override(ov) for ov in overrides], "cwd": _cwd()}
    if not isinstance(raw, LocDict):
        raw = LocDict(raw, root_loc, {})
    for ov in overrides:
        apply(raw, ov)
    table = settings()
    known = sorted(table)
    if raw.get("program") is not None:
        for key in raw:
            if key in table and table[key].loop:
                raise fail(raw.at(key), f"{key} is a setting of plugdrop's own training loop, "
                                        f"which does not run with program: (the program "
                                        f"trains); remove it")
    options: dict[str, Any] = {}
    locs: dict[str, str] = {}
    for key, value in raw.items():
        kloc = raw.at(key)
        if key == "search":
            raise fail(kloc, "search: is the block of plugdrop search: run plugdrop search "
                             "CONFIG --out OUT (plugdrop ablate trains the variants of a config "
                             "without one)")
        if key not in table:
            raise fail(kloc, f"unknown setting {key!r}{suggest(key, known)}; known: "
                             f"{', '.join(known)}")
        locs[str(key)] = str(kloc)
        check = table[key].check
        if check is not None:
            options[key] = plain(check(Value(key, value, kloc)))
    if options.get("program") is None and "model" not in options:
        raise fail(root_loc, "the config needs 'model:' (a timm model name such as resnet18), "
                             "or 'program:' (a training script of your own)")
    options["variants"] = parse_variants(raw.get("variants"),
                                         raw.at("variants") if "variants" in raw else root_loc)
    cfg = AblationConfig(**options, source=source, locs=locs, origin=origin)
    check_together(cfg)
    return cfg


def _cwd() -> str | None:
    """The working directory (``None`` when it no longer exists)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _yaml_of(raw: Any) -> str:
    try:
        return yaml.safe_dump(plain(raw), sort_keys=False)
    except yaml.YAMLError as e:
        raise ConfigError(f"the config holds a value YAML cannot write ({e}); give plain "
                          f"numbers, strings, lists and mappings") from None


def loads(text: str, source: str = "<config>", overrides: Sequence[Override] = ()
          ) -> AblationConfig:
    """Read and validate a YAML config given as text (``source`` names it in errors)."""
    raw = yaml_text(text, source)
    if raw is None:
        raise ConfigError(f"{source}: the config is empty; it needs model: and variants:")
    return parse(raw, source, overrides, text)


def load(path: str | Path, overrides: Sequence[Override] = ()) -> AblationConfig:
    """Read and validate a YAML ablation config, applying command-line ``overrides``."""
    return loads(read_config(path), str(path), overrides)


def read_config(path: str | Path) -> str:
    """The text of the YAML config at ``path``: UTF-8, with or without a byte-order mark
    (:func:`plugdrop.spec.read_text`); one line otherwise.

    Raises:
        ConfigError: a folder, a file that cannot be read, too large, or not UTF-8 (the
            offset of its first other byte named).
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder; give the YAML config file "
                          f"(e.g. examples/digits.yaml)")
    with config_errors():
        return pd.spec.read_text(path, "the config")
