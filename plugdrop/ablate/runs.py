"""Run folders on disk: the layout, the lock, the markers, atomic writes.

::

    OUT/ablation.json             the resolved config, its hash, the runs
    OUT/.lock                     held by the running ``plugdrop ablate`` (fcntl.flock)
    OUT/runs/<variant>__s<seed>/  run.json, metrics.jsonl, checkpoint.pt, done.json | failed.json

A run is finished iff ``done.json`` exists, failed iff ``failed.json`` exists, else incomplete.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, BinaryIO

import torch

from .errors import ConfigError

FORMAT = 1


def run_id(variant: str, seed: int) -> str:
    """The folder name of a run."""
    return f"{variant}__s{seed}"


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
    atomic_write_bytes(path, (json.dumps(obj, indent=2, default=str) + "\n").encode())


def atomic_torch_save(path: Path, obj: Any) -> None:
    """``torch.save`` to ``path`` atomically."""
    _atomic(path, lambda f: torch.save(obj, f))


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class RunDir:
    """One run's folder."""

    def __init__(self, root: Path, variant: str, seed: int):
        self.variant, self.seed = variant, seed
        self.id = run_id(variant, seed)
        self.path = root / "runs" / self.id

    @property
    def checkpoint(self) -> Path:
        return self.path / "checkpoint.pt"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def status(self) -> str:
        if (self.path / "done.json").exists():
            return "finished"
        if (self.path / "failed.json").exists():
            return "failed"
        return "incomplete"

    def start(self, info: Mapping[str, Any], fresh: bool) -> None:
        """Create the folder (emptied of a previous attempt's markers when ``fresh``)."""
        self.path.mkdir(parents=True, exist_ok=True)
        if fresh:
            for name in ("metrics.jsonl", "checkpoint.pt", "done.json", "failed.json",
                         "gradcam.png"):
                (self.path / name).unlink(missing_ok=True)
        (self.path / "failed.json").unlink(missing_ok=True)
        atomic_write_json(self.path / "run.json", dict(info))

    def read_metrics(self) -> list[dict[str, Any]]:
        """The complete lines of metrics.jsonl (a killed writer may leave half a line)."""
        out = []
        if self.metrics.exists():
            for line in self.metrics.read_text().splitlines():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    def truncate_metrics(self, epochs: int) -> None:
        """Keep only the records of epochs 1..``epochs`` (those the checkpoint has)."""
        keep = [r for r in self.read_metrics() if r.get("epoch", 0) <= epochs]
        atomic_write_bytes(self.metrics, "".join(json.dumps(r) + "\n" for r in keep).encode())

    def append_metrics(self, record: Mapping[str, Any]) -> None:
        with open(self.metrics, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def done(self, epochs: int, wall_time: float) -> None:
        atomic_write_json(self.path / "done.json", {"epochs": epochs, "wall_time": wall_time,
                                                    "finished": now()})

    def failed(self, error: BaseException, epoch: int, tb: str) -> None:
        line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        atomic_write_json(self.path / "failed.json", {"error": line,
                                                      "type": type(error).__name__,
                                                      "epoch": epoch, "traceback": tb})


@contextmanager
def serialized(path: Path) -> Iterator[None]:
    """Hold a blocking exclusive ``flock`` on ``path`` for the block: the processes that rebuild
    one folder's report (shards, launcher jobs, ``plugdrop report``) then read and write it one
    after the other, so a late writer never puts an older table over a newer one. A folder
    that cannot hold the lock file (read-only) is read without it."""
    try:
        f = open(path, "a+")
    except OSError:
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

    def __init__(self, out: Path, shared: bool = False):
        self.path = out / ".lock"
        self.shared = shared
        self.file: IO[str] | None = None

    def acquire(self) -> None:
        f = open(self.path, "a+")
        try:
            fcntl.flock(f.fileno(), (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX)
                        | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip()
            f.close()
            what = ("a whole plugdrop ablate (not a --shard) is writing into this folder"
                    if self.shared else "another plugdrop ablate is writing into this folder")
            raise ConfigError(f"--out {self.path.parent}: {what}"
                              f"{f' (pid {holder})' if holder else ''}; wait "
                              f"for it to end or choose another --out") from None
        if not self.shared:
            f.seek(0)
            f.truncate()
            f.write(str(os.getpid()))
            f.flush()
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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+")
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
    out.mkdir(parents=True, exist_ok=True)
    with serialized(out / ".claim"):
        yield


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


def prepare(out: Path, manifest: Mapping[str, Any], resume: bool) -> None:
    """Check that ``out`` may receive this ablation, then write ``ablation.json``.

    A folder holding another config's runs, or any runs without ``resume``, is refused.
    """
    path = out / "ablation.json"
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            old = {}
        same = old.get("config_hash") == manifest["config_hash"]
        has_runs = (out / "runs").is_dir() and any((out / "runs").iterdir())
        if not same and has_runs:
            diff = _diff(old.get("config", {}), manifest["config"])
            raise ConfigError(
                f"--out {out}: holds the runs of another config (differs in: {diff}); choose "
                f"another --out, or restore that config to continue it with --resume")
        if same and has_runs and not resume:
            raise ConfigError(f"--out {out}: holds runs of this ablation already; add --resume "
                              f"to continue it, or choose another --out")
    elif out.is_dir() and any(p.name != ".lock" for p in out.iterdir()):
        if (out / "runs").exists() or (out / "results.csv").exists():
            raise ConfigError(f"--out {out}: holds results of an older plugdrop ablate; choose "
                              f"another --out (or delete the folder)")
    atomic_write_json(path, dict(manifest))


def _diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)
                  and k not in ("out", "device", "workers", "log"))
    return ", ".join(keys) or "its settings"
