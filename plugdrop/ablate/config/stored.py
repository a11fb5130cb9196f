"""A config as plain data, for the jobs and the report of an ablation to read back: the YAML
text the loader read, the command-line overrides applied to it, where it came from and its
hash (``OUT/.config.json``, :data:`CONFIG_FILE`). Reading it back goes through the loader, with
every check a user's config meets, so that a job runs exactly the config the driver checked,
the report reads the very settings the runs trained with, and a file in the ablation folder
can hold nothing but data (no pickle: see ``SECURITY.md``).

    >>> cfg = load("examples/digits.yaml", parse_overrides(["epochs=2"]))
    >>> restore(stored(cfg), "OUT/.config.json") == cfg
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import runs
from ..errors import ConfigError
from .seeds import STORED
from .loader import loads, parse
from .overrides import Override, restored_override
from .schema import AblationConfig, judging, resolved_default

__all__ = ["CONFIG_FILE", "DESIGN_SETTINGS", "FORMAT", "as_recorded", "legacy_design", "rejudged",
           "load_settings", "load_stored", "restore", "save_config", "stored"]

#: the stored config's file in an ablation folder
CONFIG_FILE = ".config.json"
#: what older versions stored instead (a pickle): never read, removed when the config is written
_OLD_CONFIG_FILE = ".config.pkl"

#: the version of the stored form
FORMAT = 1

#: the settings of the exact group-sequential design of an adaptive ablation: a config that
#: ``ablation.json`` records without them is one of an older plugdrop, which keeps the design
#: it started with (:func:`legacy_design`)
DESIGN_SETTINGS = ("spending", "passing")


def stored(cfg: AblationConfig) -> dict[str, Any]:
    """``cfg`` as JSON-able data that :func:`restore` reads back into an equal config."""
    return {"format": FORMAT, "source": cfg.source, "text": cfg.origin.get("text", ""),
            "overrides": list(cfg.origin.get("overrides", [])), "cwd": cfg.cwd,
            "config_hash": cfg.hash()}


def restore(data: Any, where: str, want_hash: str | None = None) -> AblationConfig:
    """The config that :func:`stored` wrote (read from ``where``), checked as a user's config
    is, with the working directory it was loaded in (where a ``program:`` runs; part of its
    hash); ``want_hash``: the hash it must have (:meth:`AblationConfig.hash`).

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
    token = STORED.set(True)
    try:
        cfg = loads(data["text"], data["source"], overrides)
    except ConfigError as e:
        raise ConfigError(f"{where}: the stored config fails its checks ({e})") from None
    finally:
        STORED.reset(token)
    cwd = data.get("cwd")
    cfg = replace(cfg, origin={**cfg.origin, "cwd": cwd if isinstance(cwd, str) else None})
    for expected in (data.get("config_hash"), want_hash):
        # a folder of a version before 0.2 records the hash with the judging settings in
        if expected is not None and expected not in (cfg.hash(), cfg.judged_hash()):
            raise ConfigError(f"{where}: the stored config is not the one this ablation "
                              f"started with (hash {cfg.hash()}, expected {expected}); run "
                              f"plugdrop ablate CONFIG --out FOLDER --resume to write it again")
    return cfg


def rejudged(cfg: AblationConfig, overrides: Sequence[Override], where: str
             ) -> AblationConfig:
    """``cfg`` with ``overrides`` of the settings that only judge (``decide_on``, ``margin``,
    ...): what ``plugdrop report --decide-on`` reports the runs under.

    Raises:
        ConfigError: an override fails its check, or sets what changes the runs themselves.
    """
    others = [o for o in overrides if str(o.path).split(".")[0] not in judging()]
    if others:
        raise ConfigError(f"{where}: {others[0].path} changes the runs themselves; a report "
                          f"judges the runs again under {', '.join(judging())} only")
    try:
        new = loads(cfg.origin.get("text", ""), cfg.source,
                    [*(restored_override(o, where) for o in cfg.origin.get("overrides", [])),
                     *overrides])
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    return replace(new, origin={**new.origin, "cwd": cfg.cwd})


def save_config(out: Path, cfg: AblationConfig) -> None:
    """Store the validated config for the jobs and the report as plain data (atomically, next
    to ``ablation.json``), and remove the pickle an older version stored there."""
    runs.atomic_write_json(out / CONFIG_FILE, stored(cfg), "the config the jobs read")
    try:
        (out / _OLD_CONFIG_FILE).unlink(missing_ok=True)
    except OSError:
        pass  # never read; what is left of it does no harm


def load_stored(out: Path, config_hash: str | None = None) -> AblationConfig:
    """The config that ``plugdrop ablate`` stored in ``out``, read as JSON and checked as a
    user's config is (what a job trains).

    Args:
        out: the ablation folder.
        config_hash: the hash it must have (what a launcher gave its job); default: the one
            ``ablation.json`` records.

    Raises:
        ConfigError: ``out`` is no prepared ablation folder, its config file is not plain
            data written by plugdrop, or its config is not the one expected.
    """
    manifest = _manifest(out)
    recorded = manifest.get("config_hash")
    want = config_hash or (recorded if isinstance(recorded, str) else None)
    path = out / CONFIG_FILE
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"{out}: no ablation prepared by plugdrop ablate here (no "
                          f"{CONFIG_FILE}); start it with plugdrop ablate CONFIG --out "
                          f"{out}") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: refused: not a config written by plugdrop ({e}); run "
                          f"plugdrop ablate CONFIG --out {out} --resume to write it "
                          f"again") from None
    return restore(data, str(path), want)


def load_settings(out: Path) -> tuple[AblationConfig, str | None]:
    """The config whose settings a report of ``out`` reads, and a warning when it is not the
    stored one: the stored config (:func:`load_stored`); where that is missing (a folder of an
    older version, a start cut short) or refused (damaged, or not the ablation's), the
    resolved config ``ablation.json`` records, through the same checks. A report builds no
    model and runs nothing of the config, so either is safe to read.

    Raises:
        ConfigError: ``out`` is no ablation folder, or neither config passes the checks.
    """
    try:
        return load_stored(out), None
    except ConfigError as e:
        refused = str(e)
    manifest = _manifest(out)
    resolved = manifest.get("config")
    if not isinstance(resolved, Mapping):
        raise ConfigError(refused)
    where = str(out / "ablation.json")
    try:
        cfg = parse(dict(resolved), f"{where} (config)")
    except ConfigError as e:
        raise ConfigError(f"{where}: its config fails the checks of this plugdrop ({e}); "
                          f"report it with the plugdrop version that wrote it") from None
    if (out / CONFIG_FILE).exists():
        return cfg, f"{refused}; the report reads the config ablation.json records"
    return cfg, None


def legacy_design(out: Path) -> bool:
    """Whether the adaptive ablation in ``out`` decides with the design of plugdrop before the
    exact group-sequential one (Bonferroni, Pocock-type spending, union-bound intervals): its
    ``ablation.json`` records a config without ``spending`` (an older version started it). Its
    decisions replay as they were made, also after ``--resume`` (:func:`as_recorded`).
    ``False`` without a readable ``ablation.json``."""
    try:
        resolved = _manifest(out).get("config")
    except ConfigError:
        return False
    return isinstance(resolved, Mapping) and "spending" not in resolved


def as_recorded(out: Path, resolved: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config as ``ablation.json`` in ``out`` records it: for a folder of the
    legacy design (:func:`legacy_design`) the design's settings at their defaults are left
    out, so that a resumed ablation keeps its design (away from their defaults the config's
    hash is another, and the folder refuses it)."""
    if not legacy_design(out):
        return dict(resolved)
    return {k: v for k, v in resolved.items()
            if not (k in DESIGN_SETTINGS and v == resolved_default(k))}


def _manifest(out: Path) -> dict[str, Any]:
    path = out / "ablation.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{out}: no ablation prepared by plugdrop ablate here (no "
                          f"ablation.json); start it with plugdrop ablate CONFIG --out "
                          f"{out}") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: unreadable or not JSON ({e}); give the --out folder of "
                          f"plugdrop ablate") from None
    if not isinstance(manifest, dict):
        raise ConfigError(f"{path}: not a JSON object; give the --out folder of plugdrop "
                          f"ablate")
    return manifest
