"""A config as plain data, for the jobs of an ablation to read back: the YAML text the loader
read, the command-line overrides applied to it, where it came from and its hash. Reading it
back goes through the loader, with every check a user's config meets, so that a job runs
exactly the config the driver checked, and a file in the ablation folder can hold nothing but
data (no pickle: see ``SECURITY.md``).

    >>> cfg = load("examples/digits.yaml", parse_overrides(["epochs=2"]))
    >>> restore(stored(cfg), "OUT/.config.json") == cfg
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from .loader import loads
from .overrides import restored_override
from .schema import AblationConfig

__all__ = ["FORMAT", "restore", "stored"]

#: the version of the stored form
FORMAT = 1


def stored(cfg: AblationConfig) -> dict[str, Any]:
    """``cfg`` as JSON-able data that :func:`restore` reads back into an equal config."""
    return {"format": FORMAT, "source": cfg.source, "text": cfg.origin.get("text", ""),
            "overrides": list(cfg.origin.get("overrides", [])), "config_hash": cfg.hash()}


def restore(data: Any, where: str, want_hash: str | None = None) -> AblationConfig:
    """The config that :func:`stored` wrote (read from ``where``), checked as a user's config
    is; ``want_hash``: the hash it must have (:meth:`AblationConfig.hash`).

    Raises:
        ConfigError: ``data`` is not a stored config, fails a check, or has another hash than
            ``want_hash`` or than the one stored with it (someone changed the file).
    """
    if not (isinstance(data, Mapping) and data.get("format") == FORMAT
            and isinstance(data.get("text"), str) and isinstance(data.get("source"), str)
            and isinstance(data.get("overrides"), list)):
        raise ConfigError(f"{where}: not a config stored by this version of plugdrop; run "
                          f"plugdrop ablate CONFIG --out FOLDER --resume to write it again")
    overrides = [restored_override(o, where) for o in data["overrides"]]
    try:
        cfg = loads(data["text"], data["source"], overrides)
    except ConfigError as e:
        raise ConfigError(f"{where}: the stored config fails its checks ({e})") from None
    for expected in (data.get("config_hash"), want_hash):
        if expected is not None and cfg.hash() != expected:
            raise ConfigError(f"{where}: the stored config is not the one this ablation "
                              f"started with (hash {cfg.hash()}, expected {expected}); run "
                              f"plugdrop ablate CONFIG --out FOLDER --resume to write it again")
    return cfg
