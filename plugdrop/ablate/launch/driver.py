"""The one driver loop of every launcher: it keeps the launcher's jobs at its capacity, reads
how each ended, rebuilds the report when a run ended, submits again a run whose job ended
before it did (``--max-retries``), waits for a run another process trains (a shard, an earlier
driver's job) and trains it if that process let go unfinished, and fills the :class:`Outcome`.

The run folders decide: whatever a job says, a run is finished or failed when its folder says
so. Under torchrun (the local launcher only) every rank runs this loop; what it reads from the
folder is read on rank 0 and shared.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from .. import runs
from ..errors import Fault
from ..runs import RunDir, RunLock
from ..train import Stopped, on_rank0
from .protocol import End, Job, JobEnd, LaunchContext, Launcher, View

__all__ = ["GRACE", "Outcome", "Waiting", "drive"]

#: seconds a job may go on after its run finished before the driver cancels it
GRACE = 10.0

T = TypeVar("T")


@dataclass
class Outcome:
    """What an ablation's invocation did: the runs finished, failed and skipped (finished
    before it started), and the signal that stopped it (0: none)."""

    finished: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    stopped: int = 0
    #: stopped at once (a second Ctrl-C), not at a step boundary with a checkpoint there
    at_once: bool = False


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
            if rd.status != runs.INCOMPLETE:
                continue
            (keep if RunLock(rd).held_elsewhere() else out).append(rd)
        self.runs = keep
        return out

    def __bool__(self) -> bool:
        return bool(self.runs)


class _Driver:
    def __init__(self, launcher: Launcher, ctx: LaunchContext, view: View) -> None:
        self.launcher, self.ctx, self.view = launcher, ctx, view
        self.queue: list[RunDir] = []
        self.active: list[Job] = []
        self.waiting = Waiting()
        self.tries: dict[str, int] = {}
        self.over: dict[str, float] = {}
        # here, not at the top: every job imports this package (submitit and Ray unpickle
        # their callables from it), and only the driver needs the report (scipy, matplotlib)
        from ..report import Rebuilder

        self.rebuild = Rebuilder(ctx.out, view.message, plots=ctx.cfg.plots)

    def probe(self, fn: Callable[[], T]) -> T:
        """``fn`` (reading the folder) on rank 0, its result on every rank."""
        return on_rank0(self.ctx.d, fn)

    def run(self, todo: list[RunDir]) -> None:
        self.queue = list(todo)
        while self.queue or self.active or self.waiting:
            self.queue += self.probe(self.waiting.released)
            room = self.launcher.capacity() - len(self.active)
            if self.queue and room > 0:
                batch, self.queue = self.queue[:room], self.queue[room:]
                self.active += self.launcher.submit(batch)
            for job in list(self.active):
                end = job.poll()
                if end is None and self.left_behind(job):
                    job.cancel()  # its run is over (a requeued job, say): free its slot
                    end = JobEnd(End.ENDED)
                if end is not None:
                    self.active.remove(job)
                    self.ended(job, end)
            self.view.update()
            if self.active or self.waiting:
                self.launcher.wait(self.active, 0.5)

    def left_behind(self, job: Job) -> bool:
        """Whether ``job`` is still queued or running although its run finished or failed
        :data:`GRACE` seconds ago (a job requeued after its run ended, a process that hangs
        on its way out): it would only take an allocation."""
        if self.probe(lambda: job.run.status) == runs.INCOMPLETE:
            self.over.pop(job.run.id, None)
            return False
        since = self.over.setdefault(job.run.id, time.monotonic())
        return time.monotonic() - since > GRACE

    def ended(self, job: Job, end: JobEnd) -> None:
        rd, view = job.run, self.view
        status = self.probe(lambda: rd.status)
        if status != runs.INCOMPLETE:
            view.ended(rd, status, end.error)
            self.report()
        elif end.status is End.FAULT:
            view.ended(rd, End.FAULT, None)
            raise end.fault or self.probe(lambda: self.fault(job, end))
        elif end.status is End.BUSY or self.probe(RunLock(rd).held_elsewhere):
            self.waiting.add(rd)  # another process trains it: wait for that one
            view.ended(rd, End.BUSY, None)
        elif end.status is End.LOST:
            view.message(f"plugdrop ablate: run {rd.id}: {end.error}")
            self.give_up(rd, str(end.error), end.detail)
        else:  # the job ended before its run did (killed, preempted, stopped)
            self.probe(lambda: self.check_room(rd))  # a full disk, say: stop, do not retry
            n = self.tries[rd.id] = self.tries.get(rd.id, 0) + 1
            most = self.ctx.options.max_retries
            if n <= most:
                view.message(f"plugdrop ablate: {job.label} of {rd.id} ended before the run "
                             f"did; submitting it again ({n}/{most})")
                self.queue.insert(0, rd)
            else:
                self.give_up(rd, f"its job ended {n} times before the run did; see {job.logs}",
                             "")

    def check_room(self, rd: RunDir) -> None:
        """Raise :class:`StorageError` when the folder has no room for the run's checkpoint
        (twice its last size: the new one and the one kept) or takes no file."""
        try:
            size = rd.checkpoint.stat().st_size
        except OSError:
            size = 0
        runs.check_room(self.ctx.out, 2 * size, f"the checkpoint of run {rd.id}")

    def fault(self, job: Job, end: JobEnd) -> Fault:
        """The fault a job reported by its exit alone: the folder's own (no room), else its
        last line, else where its logs are."""
        self.check_room(job.run)
        line = (end.error or "").removeprefix("plugdrop worker: ").strip()
        if line.startswith(f"run {job.run.id}: "):  # the worker's line, its fix included
            return Fault(line, "")
        return Fault(f"run {job.run.id}: {job.label} stopped on a fault of the environment "
                     f"(see {job.logs})")

    def give_up(self, rd: RunDir, why: str, detail: str) -> None:
        if self.ctx.d.main:
            rd.failed(RuntimeError(why), rd.current_epoch(), detail)
        self.view.ended(rd, runs.FAILED, why)
        self.report()

    def report(self) -> None:
        if self.ctx.d.main:
            self.rebuild(final=False)

    def cancel(self) -> None:
        active, self.active = self.active, []
        for job in active:
            job.cancel()


def drive(launcher: Launcher, ctx: LaunchContext, todo: list[RunDir], outcome: Outcome) -> None:
    """Train ``todo`` through ``launcher`` and record in ``outcome`` what the folders say
    afterwards; Ctrl-C (or, for the local launcher, a SIGTERM) stops it with the finished
    epochs kept; a :class:`Fault` (a job's, or the folder's: no room for a run submitted
    again) cancels the other jobs and is raised. An adaptive ablation drives one round at a time through the same launcher;
    whoever made the launcher closes it after the last round."""
    view = launcher.start(ctx, todo)
    driver = _Driver(launcher, ctx, view)
    try:
        driver.run(todo)
    except KeyboardInterrupt:
        driver.cancel()
        outcome.stopped, outcome.at_once = 2, True
    except Stopped as e:
        driver.cancel()
        outcome.stopped = e.signum
    except Fault:  # the other jobs would meet it too: stop them, start no other run
        driver.cancel()
        raise
    finally:
        driver.cancel()  # none is left on a normal end; after an error, no job outlives us
        view.close()
    statuses = driver.probe(lambda: [rd.status for rd in todo])
    for rd, status in zip(todo, statuses):
        if status == runs.FINISHED:
            outcome.finished.append(rd.id)
        elif status == runs.FAILED:
            outcome.failed.append(rd.id)
