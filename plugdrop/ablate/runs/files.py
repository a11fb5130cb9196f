"""The one writer of the runner's files: a temporary file beside the target, flushed to disk,
then renamed over it, so that a reader (the report, a resumed run, another job) sees the old
file or the new one, never half of one. Every file of an ablation folder is written here.

A write that fails (a full disk, a quota, a read-only file system, no permission, the
file-size limit) raises :class:`~plugdrop.ablate.errors.StorageError` naming the folder, what
was being written and how much room it needed and had; the temporary file is removed and the
previous file is intact. A checkpoint is serialized in memory first (so a full disk is an
``OSError`` of ours, not a message from PyTorch's zip writer), read back and compared after
writing, loaded (as data: :mod:`.checkpoints`) the first time its kinds of objects are
written, and the previous one is kept beside it.

Nothing here writes through a symbolic link: a file is replaced by a rename (which replaces a
link, never its target), appended to and locked only through ``O_NOFOLLOW``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import io
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..errors import StorageError
from .checkpoints import CheckpointRefused, loads_checkpoint

__all__ = ["append_line", "atomic_write_bytes", "atomic_write_json", "check_room", "ensure_dir",
           "no_link", "now", "open_no_follow", "serialize", "storage_error", "write_checkpoint"]

_LOCKED = {errno.EROFS, errno.EACCES, errno.EPERM}


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, k in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} bytes"


def _free(folder: Path) -> int | None:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def storage_error(e: OSError, path: Path, what: str, needed: int | None = None
                  ) -> StorageError:
    """The one-line :class:`StorageError` for ``e``, met while writing ``what`` to ``path``
    (``needed``: its size in bytes, when known)."""
    folder = path.parent
    code = e.errno
    if code == errno.ENOSPC:
        reason = (f"no space left on the device: it needs {_size(needed)}, "
                  f"{_size(_free(folder))} free")
    elif code == errno.EDQUOT:
        reason = f"the disk quota is used up: it needs {_size(needed)}"
    elif code == errno.EFBIG:
        reason = f"the file would pass the file-size limit (ulimit -f): it needs {_size(needed)}"
    elif code == errno.EROFS:
        reason = "the file system is read-only"
    elif code in (errno.EACCES, errno.EPERM):
        reason = "permission denied"
    elif code == errno.ELOOP:
        reason = ("it is a symbolic link, which plugdrop never writes through (someone may "
                  "have put it there)")
    else:
        reason = f"{e.strerror or type(e).__name__} (errno {code})" if code else str(e)
    if code == errno.EFBIG:
        fix = "raise the file-size limit (ulimit -f unlimited) or write elsewhere, then continue"
    elif code == errno.EDQUOT:
        fix = "free some of your quota (or ask for more), then continue"
    elif code == errno.ENOSPC:
        fix = "free some space (or move the folder to a larger disk), then continue"
    elif code in _LOCKED:
        fix = f"make {folder} writable, then continue"
    elif code == errno.ELOOP:
        fix = f"remove the link {path} (and see who made it), then continue"
    else:
        fix = "check the disk, then continue"
    return StorageError(f"{folder}: cannot write {what} ({path.name}): {reason}", fix)


def check_room(folder: Path, needed: int, what: str) -> None:
    """Raise :class:`StorageError` when ``folder`` cannot take ``needed`` more bytes (too little
    free space) or a file at all (read-only, no permission): what a driver asks before it
    submits a run again whose job died without a word."""
    free = _free(folder)
    if free is not None and free < needed:
        raise storage_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
                            folder / "checkpoint.pt", what, needed)
    atomic_write_bytes(folder / ".write-test", b"", what)
    with contextlib.suppress(OSError):
        (folder / ".write-test").unlink()


def ensure_dir(folder: Path, what: str = "a folder") -> None:
    """``mkdir -p folder``, a failure as :class:`StorageError`."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise storage_error(e, folder / ".", what) from None


def open_no_follow(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW | O_CLOEXEC)``: a symbolic link at ``path`` is an
    ``OSError`` (``ELOOP``), never followed."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def no_link(folder: Path, what: str) -> None:
    """Raise :class:`StorageError` when ``folder`` is a symbolic link (files written into it
    would land wherever the link points)."""
    if folder.is_symlink():
        raise storage_error(OSError(errno.ELOOP, os.strerror(errno.ELOOP)), folder, what)


def _write_tmp(path: Path, data: bytes | memoryview, what: str) -> str:
    """``data`` in a temporary file beside ``path``, flushed to disk; returns its name."""
    ensure_dir(path.parent, what)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        return tmp
    except OSError as e:
        _remove(tmp)
        raise storage_error(e, path, what, len(data)) from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(tmp: str | None) -> None:
    if tmp is not None:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _replace(tmp: str, path: Path, what: str, size: int) -> None:
    try:
        os.replace(tmp, path)
    except OSError as e:
        _remove(tmp)
        raise storage_error(e, path, what, size) from None
    with contextlib.suppress(OSError):  # the rename itself to disk (not every system can)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, what: str = "a file") -> None:
    """Write ``data`` to ``path`` atomically.

    Raises:
        StorageError: the write failed; ``path`` holds what it held before.
    """
    _replace(_write_tmp(path, data, what), path, what, len(data))


def atomic_write_json(path: Path, obj: Any, what: str = "a record") -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically (:class:`StorageError` on a
    failed write)."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, default=str) + "\n").encode(), what)


def serialize(obj: Any) -> bytes:
    """``torch.save(obj)`` into bytes."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


#: the kinds of objects (:func:`_kinds`) of checkpoints this process has loaded back once
_LOADED_KINDS: set[frozenset[str]] = set()


def _kinds(obj: Any) -> frozenset[str]:
    """Every kind of object inside ``obj`` (containers walked; a tensor's kind includes its
    dtype and layout): what decides which Python names the pickle refers to, and so whether
    it loads as data. Two states of the same kinds load alike."""
    found: set[str] = set()
    stack = [obj]
    while stack:
        o = stack.pop()
        t = type(o)
        if isinstance(o, torch.Tensor):
            found.add(f"{t.__module__}.{t.__qualname__}:{o.dtype}:{o.layout}:{o.is_quantized}")
            continue
        found.add(f"{t.__module__}.{t.__qualname__}")
        if isinstance(o, Mapping):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
    return frozenset(found)


def write_checkpoint(path: Path, state: Mapping[str, Any], previous: Path | None = None,
                     what: str = "the checkpoint") -> int:
    """Write ``state`` to ``path`` (``torch.save``) atomically, verified: the file is read
    back and compared with what was written, and loaded as data the first time this process
    writes a state of its kinds of objects (a later one of the same kinds loads alike: the
    comparison is what catches the storage). The file it replaces becomes
    ``previous`` (when given). Returns the size in bytes.

    Raises:
        StorageError: the write failed, or the file does not read back as written; ``path``
            and ``previous`` hold what they held before.
    """
    data = serialize(dict(state))
    tmp = _write_tmp(path, data, what)
    try:
        with open(tmp, "rb") as f:
            back = f.read()
        if back != data:
            raise OSError(errno.EIO, f"it reads back {len(back)} of {len(data)} bytes "
                                     f"differently (a storage fault)")
        kinds = _kinds(state)
        if kinds not in _LOADED_KINDS:
            loads_checkpoint(back, path)
            _LOADED_KINDS.add(kinds)
    except CheckpointRefused as e:  # a bug of ours: it would never load again
        _remove(tmp)
        raise TypeError(f"{what} holds more than tensors and plain data ({e.what}); report "
                        f"this as a bug of plugdrop") from None
    except OSError as e:
        _remove(tmp)
        raise storage_error(e, path, what, len(data)) from None
    except Exception as e:  # noqa: BLE001 - it does not load: the storage garbled it
        _remove(tmp)
        raise StorageError(f"{path.parent}: {what} ({path.name}) does not load after writing "
                           f"({type(e).__name__}): a storage fault", "check the disk, then "
                           "continue") from None
    if previous is not None and path.exists():
        try:
            os.replace(path, previous)
        except OSError as e:
            _remove(tmp)
            raise storage_error(e, previous, what, len(data)) from None
    _replace(tmp, path, what, len(data))
    return len(data)


def append_line(path: Path, record: Mapping[str, Any], what: str = "a record") -> None:
    """Append ``record`` as one JSON line to ``path``, flushed to disk (a killed writer leaves
    at most a partial last line, which readers skip and a resumed run rewrites).

    Raises:
        StorageError: the write failed (the line may be partial: readers skip it).
    """
    line = (json.dumps(record) + "\n").encode()
    ensure_dir(path.parent, what)
    try:
        with os.fdopen(open_no_follow(path, os.O_RDWR | os.O_CREAT | os.O_APPEND), "a+b") as f:
            if f.seek(0, os.SEEK_END) > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":  # a partial line of a killed writer stays apart
                    line = b"\n" + line
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise storage_error(e, path, what, len(line)) from None


def now() -> str:
    """The time in UTC, ISO 8601 to the second."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
