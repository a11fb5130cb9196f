"""What a program logs, shown while it runs: the lines it appends to the run contract's
metrics file (:class:`LinesFollower`), or the records of the place it writes its metrics
(``metrics_from:``, :class:`SourceFollower`). The progress display shows the latest record,
not every one: a program that logs a line per step costs the driver a line per
:data:`SHOW_S` seconds."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..progress import Progress
from .sources import Source, SourceError, open_regular

__all__ = ["LinesFollower", "SHOW_S", "SourceFollower"]

#: at most one record shown per so many seconds (and the last one when the program ends)
SHOW_S = 2.0
#: a source file is read again at most this often while the program runs
READ_S = 2.0


class _Shown:
    """Shows the latest record at most every :data:`SHOW_S` seconds, and at the end."""

    def __init__(self, progress: Progress, clock: Callable[[], float] = time.monotonic) -> None:
        self.progress, self.clock = progress, clock
        self.latest: dict[str, Any] | None = None
        self.last_shown = -float("inf")

    def offer(self, rec: dict[str, Any]) -> None:
        self.latest = rec

    def show(self, final: bool = False) -> None:
        now = self.clock()
        if self.latest is not None and (final or now - self.last_shown >= SHOW_S):
            self.progress.logged(self.latest)
            self.latest, self.last_shown = None, now


class LinesFollower:
    """Follows the JSON lines a program appends to ``path`` (created before the program
    starts, so what it logs at once is seen)."""

    def __init__(self, path: Path, progress: Progress) -> None:
        self.path = path
        self.shown = _Shown(progress)
        try:
            self.offset = path.stat().st_size
        except OSError:
            self.offset = 0

    def __call__(self, final: bool = False) -> None:
        try:  # never blocks: a named pipe in its place is not read (the judge says so)
            with open_regular(self.path) as f:
                f.seek(self.offset)
                data = f.read()
        except (OSError, SourceError):
            data = b""
        complete = data[:data.rfind(b"\n") + 1]
        self.offset += len(complete)
        for line in reversed(complete.decode("utf-8", errors="replace").splitlines()):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                self.shown.offer(rec)
                break
        self.shown.show(final)


class SourceFollower:
    """Follows a ``metrics_from`` source: read again when it changed (at most every
    :data:`READ_S` seconds), its newest record shown."""

    def __init__(self, source: Source, progress: Progress) -> None:
        self.source = source
        self.shown = _Shown(progress)
        self.seen: Sequence[float] = source.mtime()
        self.count = len(source.read()[0]) if self.seen else 0
        self.read_at = -float("inf")

    def __call__(self, final: bool = False) -> None:
        now = time.monotonic()
        if final or now - self.read_at >= READ_S:
            self.read_at = now
            stamp = self.source.mtime()
            if stamp != self.seen:
                self.seen = stamp
                records, _ = self.source.read()
                if len(records) > self.count or (records and final):
                    self.shown.offer(records[-1])
                self.count = len(records)
        self.shown.show(final)
