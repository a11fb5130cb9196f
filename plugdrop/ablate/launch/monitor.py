"""The driver's view of runs that train elsewhere (every launcher but ``local``): it reads the
run folders only.

A run is *done* (``done.json``), *failed* (``failed.json``), *running* (some process holds its
lock, ``runs/<id>/.lock``) or *queued*. On a terminal the view is one tqdm bar (runs done, with
the counts and an ETA); otherwise a line whenever a count changes.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runs import FAILED, FINISHED, RunDir, RunLock

__all__ = ["Counts", "Monitor"]


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
        if self.tty:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=len(todo), desc="runs", unit="run", dynamic_ncols=True)

    def counts(self) -> Counts:
        done = failed = running = 0
        for rd in self.todo:
            status = rd.status
            if status == FINISHED:
                done += 1
            elif status == FAILED:
                failed += 1
            elif RunLock(rd).held_elsewhere():
                running += 1
        return Counts(len(self.todo) - done - failed - running, running, done, failed)

    def eta(self, c: Counts) -> float | None:
        ended = c.done + c.failed
        if not ended:
            return None
        return (time.monotonic() - self.t0) / ended * (c.queued + c.running)

    def ended(self, rd: RunDir, status: str, detail: str | None) -> None:
        """Nothing to do: :meth:`update` reads every run's state from its folder."""

    def update(self, final: bool = False) -> None:
        """Poll the folders and show what changed."""
        c = self.counts()
        if c != self.last or final:
            line = c.line(None if final else self.eta(c))
            if self.bar is not None:
                self.bar.n = c.done + c.failed
                self.bar.set_postfix_str(line, refresh=True)
            elif c != self.last:
                print(f"runs: {line}", file=sys.stderr, flush=True)
        self.last = c

    def message(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        self.update(final=True)
        if self.bar is not None:
            self.bar.close()
            self.bar = None
