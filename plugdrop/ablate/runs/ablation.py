"""The ablation folder itself: ``OUT/ablation.json`` (the resolved config, its hash, the runs)
and whether a folder may receive an ablation."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from . import datafiles
from .files import atomic_write_json

__all__ = ["FORMAT", "check_out", "prepare"]

#: the version of the folder's layout that ``ablation.json`` records
FORMAT = 1


def check_out(out: Path) -> None:
    """``--out`` must be a folder (or not exist yet)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file; give a folder for the runs (it is created "
                          f"if missing)")
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            raise ConfigError(f"--out {out}: {parent} is a file; give a folder for the runs")
        if parent.exists():
            break


def prepare(out: Path, manifest: Mapping[str, Any], resume: bool,
            unhashed: Collection[str] = (), files: Sequence[str] = (),
            accept_data_change: bool = False) -> str | None:
    """Check that ``out`` may receive this ablation, then write ``ablation.json`` (and the list
    of data ``files``, see :mod:`.datafiles`).

    A folder holding another config's runs, or any runs without ``resume``, is refused; the
    settings in ``unhashed`` (those that do not change results) are not named as differences.
    A resumed ablation whose data files changed is refused unless ``accept_data_change``.

    Returns:
        a warning to show (the data changed and ``accept_data_change`` lets it go on), or
        ``None``.
    """
    path = out / "ablation.json"
    warning = None
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            old = {}
        same = old.get("config_hash") == manifest["config_hash"]
        has_runs = (out / "runs").is_dir() and any((out / "runs").iterdir())
        if not same and has_runs:
            diff = _diff(old.get("config", {}), manifest["config"], unhashed)
            raise ConfigError(
                f"--out {out}: holds the runs of another config (differs in: {diff}); choose "
                f"another --out, or restore that config to continue it with --resume")
        if same and has_runs and not resume:
            raise ConfigError(f"--out {out}: holds runs of this ablation already; add --resume "
                              f"to continue it, or choose another --out")
        if same and has_runs:
            warning = datafiles.compare(out, old.get("data", {}), manifest.get("data", {}),
                                        files, accept_data_change)
    elif out.is_dir() and any(p.name != ".lock" for p in out.iterdir()):
        if (out / "runs").exists() or (out / "results.csv").exists():
            raise ConfigError(f"--out {out}: holds results of an older plugdrop ablate; choose "
                              f"another --out (or delete the folder)")
    datafiles.record(out, files)
    atomic_write_json(path, dict(manifest), "the ablation's record")
    return warning


def _diff(a: Mapping[str, Any], b: Mapping[str, Any], unhashed: Collection[str]) -> str:
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and k not in unhashed)
    return ", ".join(keys) or "its settings"
