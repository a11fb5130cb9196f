"""One run's folder, ``OUT/runs/<variant>__s<seed>/``: its files, status and markers.

A run is finished iff ``done.json`` exists, failed iff ``failed.json`` exists, else incomplete.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .files import append_line, atomic_write_bytes, atomic_write_json, now

__all__ = ["FAILED", "FINISHED", "INCOMPLETE", "RunDir", "run_id"]

#: a run's statuses
FINISHED, FAILED, INCOMPLETE = "finished", "failed", "incomplete"


def run_id(variant: str, seed: int) -> str:
    """The folder name of a run."""
    return f"{variant}__s{seed}"


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
    def attempts(self) -> Path:
        return self.path / "attempts.jsonl"

    @property
    def status(self) -> str:
        if (self.path / "done.json").exists():
            return FINISHED
        if (self.path / "failed.json").exists():
            return FAILED
        return INCOMPLETE

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

    def current_epoch(self) -> int:
        """The epoch a crash now would be in: one after the last recorded one."""
        return len(self.read_metrics()) + 1

    def truncate_metrics(self, epochs: int) -> None:
        """Keep only the records of epochs 1..``epochs`` (those the checkpoint has)."""
        keep = [r for r in self.read_metrics() if r.get("epoch", 0) <= epochs]
        atomic_write_bytes(self.metrics, "".join(json.dumps(r) + "\n" for r in keep).encode())

    def append_metrics(self, record: Mapping[str, Any]) -> None:
        append_line(self.metrics, record)

    def record_attempt(self, start_epoch: int, launcher: str) -> None:
        """Note in ``attempts.jsonl`` that a process starts training this run (requeued and
        retried runs show where each attempt resumed)."""
        path = self.attempts
        n = len(path.read_text().splitlines()) if path.exists() else 0
        append_line(path, {"attempt": n + 1, "start_epoch": start_epoch, "launcher": launcher,
                           "host": socket.gethostname(), "pid": os.getpid(), "started": now()})

    def done(self, epochs: int, wall_time: float) -> None:
        atomic_write_json(self.path / "done.json", {"epochs": epochs, "wall_time": wall_time,
                                                    "finished": now()})

    def failed(self, error: BaseException, epoch: int, tb: str) -> None:
        line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        atomic_write_json(self.path / "failed.json", {"error": line,
                                                      "type": type(error).__name__,
                                                      "epoch": epoch, "traceback": tb})
