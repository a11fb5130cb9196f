"""The image files an ablation trained on: recorded when it starts (``OUT/.data-files.gz``, a
fingerprint in ``ablation.json``) and compared when it resumes, since a folder whose file list
changed gives another train/validation split and other images than its finished runs had."""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .files import atomic_write_bytes

__all__ = ["FILES", "compare", "fingerprint", "record"]

#: the list of files, one relative path per line, gzip-compressed
FILES = ".data-files.gz"


def fingerprint(files: Sequence[str]) -> str:
    """A digest of the file list, its order included (the order decides the split)."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.encode("utf-8", "surrogateescape") + b"\n")
    return h.hexdigest()[:16]


def record(out: Path, files: Sequence[str]) -> None:
    """Write the file list into ``out`` (nothing for data without files)."""
    if files:
        data = gzip.compress("\n".join(files).encode("utf-8", "surrogateescape"), mtime=0)
        atomic_write_bytes(out / FILES, data, "the list of data files")


def _recorded(out: Path) -> list[str] | None:
    try:
        text = gzip.decompress((out / FILES).read_bytes()).decode("utf-8", "surrogateescape")
    except (OSError, EOFError, ValueError):
        return None
    return text.split("\n") if text else []


def compare(out: Path, old: Mapping[str, Any], new: Mapping[str, Any], files: Sequence[str],
            accept: bool) -> str | None:
    """Compare the data of a resumed ablation with what it started on.

    Args:
        out: the ablation folder.
        old, new: the ``data`` entries of the stored and the new ``ablation.json``.
        files: the new file list.
        accept: go on with changed files (``--accept-data-change``).

    Returns:
        a warning when the files changed and ``accept`` is set, else ``None``.

    Raises:
        ConfigError: the files changed (naming how), without ``accept``.
    """
    was, now = old.get("fingerprint"), new.get("fingerprint")
    if was is None or now is None or was == now:
        return None
    before = _recorded(out)
    if before is None:
        how = f"{old.get('files', '?')} files then, {len(files)} now"
    else:
        then, current = set(before), set(files)
        added, removed = sorted(current - then), sorted(then - current)
        parts = [f"{len(before)} files then, {len(files)} now"]
        if added:
            parts.append(f"{len(added)} added (e.g. {added[0]})")
        if removed:
            parts.append(f"{len(removed)} removed (e.g. {removed[0]})")
        if not added and not removed:
            parts.append("the same files in another order")
        how = ", ".join(parts)
    what = f"data: {new.get('name', '?')}: its files changed since this ablation started ({how})"
    if accept:
        return (f"{what}; going on as --accept-data-change says: the runs trained from now on "
                f"see another split than the finished ones")
    raise ConfigError(f"{what}: the train/validation split and the images differ from those "
                      f"of its finished runs; restore the files, or add --accept-data-change "
                      f"to go on with them")
