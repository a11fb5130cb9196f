"""The ablation folder itself: ``OUT/ablation.json`` (the resolved config, its hash, the runs)
and whether a folder may receive an ablation."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from . import datafiles
from .files import atomic_write_json, now

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
            accept_data_change: bool = False, judging: Collection[str] = (),
            judged_hash: str | None = None) -> str | None:
    """Check that ``out`` may receive this ablation, then write ``ablation.json`` (and the list
    of data ``files``, see :mod:`.datafiles`).

    A folder holding another config's runs, or any runs without ``resume``, is refused; the
    settings in ``unhashed`` (those that do not change results) are not named as differences.
    A resumed ablation whose data files changed is refused unless ``accept_data_change``.
    The settings in ``judging`` only judge the runs: changed on a resume, the runs are kept and
    the change is recorded (``judging_changes``). A folder whose hash is ``judged_hash`` (the
    hash as versions before 0.2 computed it, with those settings in) is this config's: its
    runs' hash is kept in ``earlier_hashes``, which the results' reader accepts.

    Returns:
        a warning to show (the data changed and ``accept_data_change`` lets it go on; the
        judging changed after runs ended), or ``None``.
    """
    path = out / "ablation.json"
    warning = None
    manifest = dict(manifest)
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            old = {}
        old = old if isinstance(old, dict) else {}
        old_hash = old.get("config_hash")
        migrated = old_hash is not None and old_hash != manifest["config_hash"] \
            and old_hash == judged_hash
        same = old_hash == manifest["config_hash"] or migrated
        has_runs = (out / "runs").is_dir() and any((out / "runs").iterdir())
        if same:
            earlier = [h for h in old.get("earlier_hashes", []) if isinstance(h, str)]
            if migrated and isinstance(old_hash, str) and old_hash not in earlier:
                earlier.append(old_hash)
            if earlier:
                manifest["earlier_hashes"] = earlier
            changes = [c for c in old.get("judging_changes", []) if isinstance(c, dict)]
            changed = _changed(old.get("config", {}), manifest["config"], judging)
            if changed and has_runs:
                changes.append({"changed": changed, "runs_ended": _ended(out), "at": now()})
                warning = (f"the judging changed after runs ended ({_say(changed)}): every run "
                           f"is kept and judged again; recorded in ablation.json and "
                           f"decisions.jsonl (choosing what to decide on after seeing results "
                           f"is not what the error rate promises)")
            if changes:
                manifest["judging_changes"] = changes
        if not same and has_runs:
            diff = _diff(old.get("config", {}), manifest["config"], [*unhashed, *judging])
            raise ConfigError(
                f"--out {out}: holds the runs of another config (differs in: {diff}); choose "
                f"another --out, or restore that config to continue it with --resume")
        if same and has_runs and not resume:
            raise ConfigError(f"--out {out}: holds runs of this ablation already; add --resume "
                              f"to continue it, or choose another --out")
        if same and has_runs:
            warning = datafiles.compare(out, old.get("data", {}), manifest.get("data", {}),
                                        files, accept_data_change) or warning
    elif out.is_dir() and any(p.name != ".lock" for p in out.iterdir()):
        if (out / "runs").exists() or (out / "results.csv").exists():
            raise ConfigError(f"--out {out}: holds results of an older plugdrop ablate; choose "
                              f"another --out (or delete the folder)")
    datafiles.record(out, files)
    atomic_write_json(path, dict(manifest), "the ablation's record")
    return warning


def _changed(a: Any, b: Any, names: Collection[str]) -> dict[str, Any]:
    """The settings of ``names`` whose values differ between the resolved configs ``a`` and
    ``b``: name -> ``{"from": ..., "to": ...}``."""
    a = a if isinstance(a, Mapping) else {}
    return {k: {"from": a.get(k), "to": b.get(k)} for k in names if a.get(k) != b.get(k)}


def _say(changed: Mapping[str, Any]) -> str:
    return "; ".join(f"{k}: {json.dumps(c['from'])} -> {json.dumps(c['to'])}"
                     for k, c in changed.items())


def _ended(out: Path) -> int:
    """How many runs of ``out`` ended (finished or failed)."""
    n = 0
    for d in (out / "runs").iterdir():
        n += (d / "done.json").exists() or (d / "failed.json").exists()
    return n


def _diff(a: Mapping[str, Any], b: Mapping[str, Any], unhashed: Collection[str]) -> str:
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and k not in unhashed)
    return ", ".join(keys) or "its settings"
