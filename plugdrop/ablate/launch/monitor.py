"""The driver's view of an ablation whose runs train elsewhere: it reads the run folders only.

A run is *done* (``done.json``), *failed* (``failed.json``), *running* (some process holds its
lock, ``runs/<id>/.lock``) or *queued*. On a terminal the view is one tqdm bar (runs done, with
the counts and an ETA); otherwise a line whenever a count changes. Every time a run ends the
summary (table, CSV, JSON; the plots at most once a minute) is rebuilt from the folders.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..progress import Progress
from ..runs import RunDir, RunLock


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
    """Watches the run folders of ``todo`` under ``out``.

    Args:
        out: the ablation folder.
        todo: the runs this driver launched.
        tty: draw a bar; default: whether stderr is a terminal.
    """

    def __init__(self, out: Path, todo: list[RunDir], tty: bool | None = None):
        self.out, self.todo = out, todo
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.t0 = time.monotonic()
        self.ended: set[str] = set()
        self.last: Counts | None = None
        self.progress = Progress(0, True, tty=False)  # for write_report's messages
        self.bar: Any = None
        if self.tty:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=len(todo), desc="runs", unit="run", dynamic_ncols=True)

    def counts(self) -> Counts:
        done = failed = running = 0
        for rd in self.todo:
            status = rd.status
            if status == "finished":
                done += 1
            elif status == "failed":
                failed += 1
            elif RunLock(rd).held_elsewhere():
                running += 1
        return Counts(len(self.todo) - done - failed - running, running, done, failed)

    def eta(self, c: Counts) -> float | None:
        ended = c.done + c.failed
        if not ended:
            return None
        return (time.monotonic() - self.t0) / ended * (c.queued + c.running)

    def update(self, final: bool = False) -> Counts:
        """Poll the folders, show what changed, rebuild the summary when runs ended."""
        from ..runner import write_report

        c = self.counts()
        newly = {rd.id for rd in self.todo if rd.status in ("finished", "failed")} - self.ended
        if newly:
            self.ended |= newly
            if not final:
                write_report(self.out, self.progress, final=False)
        if c != self.last or final:
            line = c.line(None if final else self.eta(c))
            if self.bar is not None:
                self.bar.n = c.done + c.failed
                self.bar.set_postfix_str(line, refresh=True)
            elif c != self.last:
                print(f"runs: {line}", file=sys.stderr, flush=True)
        self.last = c
        return c

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


def record(outcome: Any, todo: list[RunDir]) -> None:
    """Fill ``outcome`` (a :class:`plugdrop.ablate.runner.Outcome`) from the run folders."""
    for rd in todo:
        status = rd.status
        if status == "finished":
            outcome.finished.append(rd.id)
        elif status == "failed":
            outcome.failed.append(rd.id)


class Waiting:
    """Runs whose job ended while another process (a job of an earlier driver, a shard) still
    trains them: watched until that process lets go, then submitted again if unfinished."""

    def __init__(self) -> None:
        self.runs: list[RunDir] = []

    def add(self, rd: RunDir) -> None:
        self.runs.append(rd)

    def released(self) -> list[RunDir]:
        """The runs no process holds any more and that are still unfinished (forgotten)."""
        out: list[RunDir] = []
        keep: list[RunDir] = []
        for rd in self.runs:
            if rd.status != "incomplete":
                continue
            (keep if RunLock(rd).held_elsewhere() else out).append(rd)
        self.runs = keep
        return out

    def __bool__(self) -> bool:
        return bool(self.runs)
