"""The one writer of the runner's files: a temporary file beside the target, flushed to disk,
then renamed over it, so that a reader (the report, a resumed run, another job) sees the old
file or the new one, never half of one. Every file of an ablation folder is written here."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import torch

__all__ = ["append_line", "atomic_torch_save", "atomic_write_bytes", "atomic_write_json", "now"]


def _atomic(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """``write`` into a temporary file beside ``path`` (flushed to disk), then rename it over
    ``path``: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    _atomic(path, lambda f: f.write(data))


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, default=str) + "\n").encode())


def atomic_torch_save(path: Path, obj: Any) -> None:
    """``torch.save`` to ``path`` atomically."""
    _atomic(path, lambda f: torch.save(obj, f))


def append_line(path: Path, record: Mapping[str, Any]) -> None:
    """Append ``record`` as one JSON line to ``path``, flushed to disk (a killed writer leaves
    at most a partial last line, which readers skip)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def now() -> str:
    """The time in UTC, ISO 8601 to the second."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
