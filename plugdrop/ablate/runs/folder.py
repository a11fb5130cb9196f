"""One run's folder, ``OUT/runs/<variant>__s<seed>/``: its files, status and markers.

A run is finished iff ``done.json`` exists, failed iff ``failed.json`` exists, else incomplete.
Two checkpoints are kept: ``checkpoint.pt`` (the last epoch) and ``checkpoint.prev.pt`` (the one
before); a resumed run takes the last one that loads and whose epochs ``metrics.jsonl`` holds
(:meth:`RunDir.recover`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import one_line
from .checkpoints import CheckpointRefused, load_checkpoint
from .files import (append_line, atomic_write_bytes, atomic_write_json, now, storage_error,
                    write_checkpoint)
from .state import FAILED, FINISHED, INCOMPLETE, RunState

__all__ = ["Recovery", "RunDir", "run_id"]



def run_id(variant: str, seed: int) -> str:
    """The folder name of a run."""
    return f"{variant}__s{seed}"


@dataclass(frozen=True)
class Recovery:
    """Where a run resumes: ``path`` (``None``: from its beginning), the last ``epoch`` it
    finished (0 from the beginning), the global optimizer ``step`` it holds, whether that step
    is ``mid_epoch`` (a checkpoint taken inside epoch ``epoch + 1``), and ``notes``: one
    sentence per checkpoint passed over (torn, unreadable, refused, ahead of
    ``metrics.jsonl``), for a warning."""

    path: Path | None
    epoch: int = 0
    notes: list[str] = field(default_factory=list)
    step: int = 0
    mid_epoch: bool = False

    @property
    def where(self) -> str:
        """``the checkpoint of epoch 2`` or ``the checkpoint of step 740 (in epoch 3)``."""
        if self.mid_epoch:
            return f"the checkpoint of step {self.step} (in epoch {self.epoch + 1})"
        return f"the checkpoint of epoch {self.epoch}"

    def message(self, run: str) -> str | None:
        """The warning to show, or ``None`` when the last checkpoint was taken as it was."""
        if not self.notes:
            return None
        passed = "; ".join(self.notes)
        if self.path is None:
            return f"run {run}: {passed}; training it again from epoch 1"
        return f"run {run}: {passed}; resuming from {self.where}"


class RunDir:
    """One run's folder."""

    def __init__(self, root: Path, variant: str, seed: int):
        self.variant, self.seed = variant, seed
        self.id = run_id(variant, seed)
        self.path = root / "runs" / self.id

    @property
    def checkpoint(self) -> Path:
        """The last epoch's checkpoint."""
        return self.path / "checkpoint.pt"

    @property
    def previous_checkpoint(self) -> Path:
        """The checkpoint of the epoch before (kept in case the last one is torn)."""
        return self.path / "checkpoint.prev.pt"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def attempts(self) -> Path:
        return self.path / "attempts.jsonl"

    @property
    def status(self) -> RunState:
        if (self.path / "done.json").exists():
            return FINISHED
        if (self.path / "failed.json").exists():
            return FAILED
        return INCOMPLETE

    def start(self, info: Mapping[str, Any], fresh: bool) -> None:
        """Create the folder (emptied of a previous attempt's markers when ``fresh``)."""
        self.path.mkdir(parents=True, exist_ok=True)
        if fresh:
            for name in ("metrics.jsonl", "checkpoint.pt", "checkpoint.prev.pt", "done.json",
                         "failed.json", "gradcam.png"):
                (self.path / name).unlink(missing_ok=True)
        (self.path / "failed.json").unlink(missing_ok=True)
        for tmp in self.path.glob(".*.tmp"):  # what killed writers left (the lock is ours)
            with contextlib.suppress(OSError):
                tmp.unlink()
        atomic_write_json(self.path / "run.json", dict(info), "the run's record")

    def save_checkpoint(self, state: Mapping[str, Any]) -> int:
        """Write the epoch's checkpoint (verified), the last one becoming the previous one;
        returns its size in bytes. Raises :class:`~plugdrop.ablate.errors.StorageError`."""
        return write_checkpoint(self.checkpoint, state, self.previous_checkpoint,
                                f"the checkpoint of run {self.id}")

    def recover(self) -> Recovery:
        """Choose the checkpoint to resume from: the last one that loads and whose epochs are
        all in ``metrics.jsonl`` (``checkpoint.pt``; a complete one a killed rename left
        behind; ``checkpoint.prev.pt``), put it in place as ``checkpoint.pt`` and say which
        were passed over and why. Call it holding the run's lock."""
        complete = 0
        for r in self.read_metrics():
            if r.get("epoch") != complete + 1:
                break
            complete += 1
        leftovers = sorted(self.path.glob(".checkpoint.pt.*.tmp"), key=_mtime, reverse=True)
        notes: list[str] = []
        for path in [self.checkpoint, *leftovers, self.previous_checkpoint]:
            if not path.exists():
                continue
            try:
                state = load_checkpoint(path)
                epoch = int(state["epoch"])
            except CheckpointRefused as e:  # never loaded: say so, whatever its name
                notes.append(str(e))
                continue
            except Exception as e:  # noqa: BLE001 - torn, truncated, garbled: pass it over
                if path.suffix != ".tmp":  # a partial write a kill left is expected
                    notes.append(f"{path} is unreadable, torn or corrupt "
                                 f"({one_line(e, typed=True, limit=160)})")
                continue
            if epoch > complete:
                notes.append(f"{path} holds epoch {epoch} but {self.metrics.name} only "
                             f"{complete} complete epoch{'s' if complete != 1 else ''}")
                continue
            if path != self.checkpoint:
                self._put_in_place(path)
            return Recovery(self.checkpoint, epoch, notes, int(state.get("step", 0)),
                            bool(state.get("position")))
        return Recovery(None, 0, notes)

    def _put_in_place(self, path: Path) -> None:
        """``path`` becomes ``checkpoint.pt``; a ``checkpoint.pt`` passed over is kept as
        ``checkpoint.pt.unused`` for a look, never as the previous checkpoint."""
        try:
            if self.checkpoint.exists():
                os.replace(self.checkpoint, self.path / "checkpoint.pt.unused")
            os.replace(path, self.checkpoint)
        except OSError as e:
            raise storage_error(e, self.checkpoint, f"the checkpoint of run {self.id}") \
                from None

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

    def current_epoch(self) -> int:
        """The epoch a crash now would be in: one after the last recorded one."""
        return len(self.read_metrics()) + 1

    def truncate_metrics(self, epochs: int) -> None:
        """Keep only the records of epochs 1..``epochs`` (those the checkpoint has); a torn
        last line goes too."""
        keep = [r for r in self.read_metrics() if r.get("epoch", 0) <= epochs]
        atomic_write_bytes(self.metrics, "".join(json.dumps(r) + "\n" for r in keep).encode(),
                           f"the metrics of run {self.id}")

    def append_metrics(self, record: Mapping[str, Any]) -> None:
        append_line(self.metrics, record, f"the metrics of run {self.id}")

    def record_attempt(self, start_epoch: int, launcher: str, start_step: int = 0) -> None:
        """Note in ``attempts.jsonl`` that a process starts training this run at epoch
        ``start_epoch`` from global optimizer step ``start_step`` (requeued and retried runs
        show where each attempt resumed)."""
        path = self.attempts
        n = len(path.read_text().splitlines()) if path.exists() else 0
        append_line(path, {"attempt": n + 1, "start_epoch": start_epoch,
                           "start_step": start_step, "launcher": launcher,
                           "host": socket.gethostname(), "pid": os.getpid(), "started": now()},
                    f"the attempts of run {self.id}")

    def done(self, epochs: int, wall_time: float) -> None:
        atomic_write_json(self.path / "done.json", {"epochs": epochs, "wall_time": wall_time,
                                                    "finished": now()},
                          f"the end of run {self.id}")

    def failed(self, error: BaseException, epoch: int, tb: str) -> None:
        line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        atomic_write_json(self.path / "failed.json", {"error": line,
                                                      "type": type(error).__name__,
                                                      "epoch": epoch, "traceback": tb},
                          f"the failure of run {self.id}")


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0
