"""The driver's view of runs that train elsewhere (every launcher but ``local``).

A run is *done* or *failed* (the driver says so as each ends: its folder decided), *running*
(its job is out and holds the run's lock, ``runs/<id>/.lock``: it started training) or
*queued*. On a terminal the view is one tqdm bar (runs done, with the counts and an ETA);
otherwise a line when a count changed, at most every :data:`LINE_S` seconds (a log of a
study of 10,000 runs stays readable), and the counts at the end. Its cost per turn of the
driver's loop does not grow with the runs of the study: only the runs with a job out are
looked at, at most :data:`LOOK_S` apart.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runs import FAILED, FINISHED, RunDir, RunLock

__all__ = ["Counts", "LINE_S", "LOOK_S", "Monitor"]

#: seconds between two looks at which runs with a job out have started training
LOOK_S = 1.0
#: seconds between two lines of counts (without a terminal)
LINE_S = 5.0


@dataclass(frozen=True)
class Counts:
    queued: int
    running: int
    done: int
    failed: int

    def line(self, eta: float | None) -> str:
        text = (f"queued {self.queued}, running {self.running}, done {self.done}, "
                f"failed {self.failed}")
        return text + (f", ETA {_fmt(eta)}" if eta is not None else "")


def _fmt(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Monitor:
    """Watches the run folders of ``todo`` under ``out`` (a :class:`~.protocol.View`).

    Args:
        out: the ablation folder.
        todo: the runs this driver launched.
        tty: draw a bar; default: whether stderr is a terminal.
    """

    def __init__(self, out: Path, todo: list[RunDir], tty: bool | None = None):
        self.out, self.todo = out, todo
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.t0 = time.monotonic()
        self.last: Counts | None = None
        self.bar: Any = None
        self.done = self.failed = 0
        self.ended_ids: set[str] = set()
        #: the runs seen holding their lock at the last look (a run that ended since is not
        #: counted as running: the look is up to LOOK_S old)
        self.running_ids: set[str] = set()
        self.looked = 0.0
        self.said: Counts | None = None
        self.said_at = -LINE_S
        if self.tty:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=len(todo), desc="runs", unit="run", dynamic_ncols=True)

    @property
    def running(self) -> int:
        return len(self.running_ids - self.ended_ids)

    def counts(self) -> Counts:
        return Counts(len(self.todo) - self.done - self.failed - self.running, self.running,
                      self.done, self.failed)

    def eta(self, c: Counts) -> float | None:
        ended = c.done + c.failed
        if not ended:
            return None
        return (time.monotonic() - self.t0) / ended * (c.queued + c.running)

    def ended(self, rd: RunDir, status: str, detail: str | None) -> None:
        """``rd`` ended (``finished``, ``failed``) or its job did (another status)."""
        if status in (FINISHED, FAILED) and rd.id not in self.ended_ids:
            self.ended_ids.add(rd.id)
            if status == FINISHED:
                self.done += 1
            else:
                self.failed += 1

    def update(self, active: Sequence[RunDir] = (), final: bool = False) -> None:
        """Show what changed; ``active``: the runs whose job is out (those that hold their
        lock are running)."""
        now = time.monotonic()
        if now - self.looked >= LOOK_S or final:
            self.looked = now
            self.running_ids = {rd.id for rd in active if rd.id not in self.ended_ids
                                and RunLock(rd).held_elsewhere()}
        c = self.counts()
        if c != self.last or final:
            line = c.line(None if final else self.eta(c))
            if self.bar is not None:
                self.bar.n = c.done + c.failed
                self.bar.set_postfix_str(line, refresh=True)
            elif c != self.said and (final or now - self.said_at >= LINE_S):
                print(f"runs: {line}", file=sys.stderr, flush=True)
                self.said, self.said_at = c, now
        self.last = c

    def message(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        self.running_ids = set()
        self.update(final=True)
        if self.bar is not None:
            self.bar.close()
            self.bar = None
