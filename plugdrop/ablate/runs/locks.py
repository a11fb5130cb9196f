"""Locks of an ablation folder (``fcntl.flock``, dropped by the kernel when a process dies): the
folder's own (one ablation, or its shards), one per run (one process trains a run at a time),
and short serializing locks around reading-and-writing shared files."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ..errors import ConfigError
from .files import ensure_dir, no_link, open_no_follow, storage_error
from .folder import RunDir

__all__ = ["Lock", "RunLock", "claiming", "serialized"]


@contextmanager
def serialized(path: Path) -> Iterator[None]:
    """Hold a blocking exclusive ``flock`` on ``path`` for the block: the processes that rebuild
    one folder's report (shards, launcher jobs, ``plugdrop report``) then read and write it one
    after the other, so a late writer never puts an older table over a newer one. A folder
    that cannot hold the lock file (read-only) is read without it."""
    try:
        f = _fopen(path)
    except OSError:  # read-only, or a link someone put there (never followed): no lock
        f = None
    try:
        if f is not None:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        yield
    finally:
        if f is not None:
            f.close()  # releases the lock


class Lock:
    """An ``fcntl.flock`` on ``OUT/.lock`` for the life of an ablation: exclusive for a whole
    ablation, shared for one ``--shard`` of it (shards run side by side; a whole ablation and a
    shard, or two whole ablations, refuse each other). Each run is further guarded by its
    :class:`RunLock`."""

    def __init__(self, out: Path, shared: bool = False, command: str = "ablate"):
        self.path = out / ".lock"
        self.shared = shared
        self.command = command
        self.file: IO[str] | None = None

    def acquire(self) -> None:
        f = _open(self.path, "the ablation's lock")
        try:
            fcntl.flock(f.fileno(), (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX)
                        | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            pid, _, command = f.read().strip().partition(" ")
            f.close()
            other = f"plugdrop {command or 'ablate'}"
            what = (f"a whole {other} (not a --shard) is writing into this folder"
                    if self.shared else f"another {other} is writing into this folder")
            raise ConfigError(f"--out {self.path.parent}: {what}"
                              f"{f' (pid {pid})' if pid else ''}; wait "
                              f"for it to end or choose another --out") from None
        if not self.shared:
            try:
                f.seek(0)
                f.truncate()
                f.write(f"{os.getpid()} {self.command}")
                f.flush()
            except OSError as e:
                f.close()
                raise storage_error(e, self.path, "the ablation's lock") from None
        self.file = f

    def release(self) -> None:
        if self.file is not None:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_UN)
            self.file.close()
            self.file = None


class RunLock:
    """An exclusive, non-blocking ``fcntl.flock`` on ``OUT/runs/<id>/.lock`` held while a process
    trains that run, so that shards, launcher jobs and retried tasks writing into one ``--out``
    never train the same run twice at once. The kernel drops it when the process dies."""

    def __init__(self, rd: RunDir):
        self.path = rd.path / ".lock"
        self.file: IO[str] | None = None

    def try_acquire(self, patience: float = 1.0) -> bool:
        """Take the lock; False when another process still holds it after ``patience``
        seconds (a driver's :meth:`held_elsewhere` probe holds it for an instant)."""
        ensure_dir(self.path.parent, "the run's folder")
        for folder in (self.path.parent.parent, self.path.parent):  # runs/, runs/<id>/
            no_link(folder, "the run's folder")
        f = _open(self.path, "the run's lock")
        deadline = time.monotonic() + patience
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    f.close()
                    return False
                time.sleep(0.05)
        self.file = f
        return True

    def held_elsewhere(self) -> bool:
        """Whether some process trains this run now (probes the lock for an instant)."""
        if not self.path.exists():
            return False
        if self.try_acquire(patience=0.0):
            self.release()
            return False
        return True

    def release(self) -> None:
        if self.file is not None:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_UN)
            self.file.close()
            self.file = None


@contextmanager
def claiming(out: Path) -> Iterator[None]:
    """A short, blocking exclusive lock on ``OUT/.claim`` around checking and writing
    ``ablation.json``, so that shards starting together see each other's folder."""
    ensure_dir(out, "the ablation folder")
    with serialized(out / ".claim"):
        yield


def _fopen(path: Path) -> IO[str]:
    """``open(path, "a+")``, never through a symbolic link."""
    return os.fdopen(open_no_follow(path, os.O_RDWR | os.O_CREAT | os.O_APPEND), "a+")


def _open(path: Path, what: str) -> IO[str]:
    """:func:`_fopen`, a failure (read-only, full, no permission, a symbolic link) as a
    StorageError."""
    try:
        return _fopen(path)
    except OSError as e:
        raise storage_error(e, path, what) from None
