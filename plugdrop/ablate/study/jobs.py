"""One round's runs handed to a launcher, for every launcher the same way: the jobs kept at
the launcher's capacity, how each ended read, a run whose job ended before it did submitted
again (``--max-retries``), a run another process trains (a shard, an earlier driver's job)
waited for and trained if that process let go unfinished, and the :class:`~.outcome.Outcome`
filled.

The run folders decide: whatever a job says, a run is finished or failed when its folder says
so. Every run that ends is told to ``on_end`` (the study driver: the strategy learns its value,
the listeners hear of it) as it ends, once. Under torchrun (the local launcher only) every rank
runs this loop; what it reads from the folder is read on rank 0 and shared.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from .. import runs
from ..errors import Fault
from ..launch import Ending, Job, JobEnd, LaunchContext, Launcher, View
from ..runs import RunDir, RunLock
from ..train import Stopped, on_rank0
from .outcome import Outcome

__all__ = ["GRACE", "Waiting", "dispatch"]

#: seconds a job may go on after its run finished before the driver cancels it
GRACE = 10.0

T = TypeVar("T")

#: what the driver does when a run ended: ``(run, state, detail)``
OnEnd = Callable[[RunDir, str, "str | None"], None]


class Waiting:
    """Runs whose job ended while another process (a job of an earlier driver, a shard) still
    trains them: watched until that process lets go."""

    def __init__(self) -> None:
        self.runs: list[RunDir] = []

    def add(self, rd: RunDir) -> None:
        self.runs.append(rd)

    def released(self) -> tuple[list[tuple[RunDir, str]], list[RunDir]]:
        """The runs no process holds any more: those that ended meanwhile (with their state)
        and those still unfinished (forgotten: to be submitted again)."""
        ended: list[tuple[RunDir, str]] = []
        again: list[RunDir] = []
        keep: list[RunDir] = []
        for rd in self.runs:
            status = rd.status
            if status != runs.INCOMPLETE:
                ended.append((rd, status))
            elif RunLock(rd).held_elsewhere():
                keep.append(rd)
            else:
                again.append(rd)
        self.runs = keep
        return ended, again

    def __bool__(self) -> bool:
        return bool(self.runs)


class _Dispatch:
    def __init__(self, launcher: Launcher, ctx: LaunchContext, view: View, on_end: OnEnd,
                 command: str) -> None:
        self.launcher, self.ctx, self.view = launcher, ctx, view
        self.on_end, self.command = on_end, command
        self.queue: list[RunDir] = []
        self.active: list[Job] = []
        self.waiting = Waiting()
        self.tries: dict[str, int] = {}
        self.over: dict[str, float] = {}
        self.seen: set[str] = set()

    def probe(self, fn: Callable[[], T]) -> T:
        """``fn`` (reading the folder) on rank 0, its result on every rank."""
        return on_rank0(self.ctx.d, fn)

    def say(self, text: str) -> None:
        self.view.message(f"plugdrop {self.command}: {text}")

    def run(self, todo: list[RunDir]) -> None:
        self.queue = list(todo)
        while self.queue or self.active or self.waiting:
            if self.waiting:
                ended, again = self.probe(self.waiting.released)
                for rd, status in ended:
                    self.end(rd, status, None)
                self.queue += again
            room = self.launcher.capacity() - len(self.active)
            if self.queue and room > 0:
                batch, self.queue = self.queue[:room], self.queue[room:]
                self.active += self.launcher.submit(batch)
            for job in list(self.active):
                end = job.poll()
                if end is None and self.left_behind(job):
                    job.cancel()  # its run is over (a requeued job, say): free its slot
                    end = JobEnd(Ending.ENDED)
                if end is not None:
                    self.active.remove(job)
                    self.ended(job, end)
            self.view.update([job.run for job in self.active])
            if self.active or self.waiting:
                self.launcher.wait(self.active, 0.5)

    def end(self, rd: RunDir, status: str, detail: str | None) -> None:
        """``rd`` ended (its folder says ``status``): shown, and told once."""
        self.view.ended(rd, status, detail)
        self.tell(rd, status, detail)

    def tell(self, rd: RunDir, status: str, detail: str | None) -> None:
        """``on_end`` of ``rd``, once, whoever trained it."""
        if rd.id not in self.seen:
            self.seen.add(rd.id)
            self.on_end(rd, status, detail)

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
            self.end(rd, status, end.error)
        elif end.status is Ending.FAULT:
            view.ended(rd, Ending.FAULT, None)
            raise end.fault or self.probe(lambda: self.fault(job, end))
        elif end.status is Ending.BUSY or self.probe(RunLock(rd).held_elsewhere):
            self.waiting.add(rd)  # another process trains it: wait for that one
            view.ended(rd, Ending.BUSY, None)
        elif end.status is Ending.LOST:
            self.say(f"run {rd.id}: {end.error}")
            self.give_up(rd, str(end.error), end.detail)
        else:  # the job ended before its run did (killed, preempted, stopped)
            self.probe(lambda: self.check_room(rd))  # a full disk, say: stop, do not retry
            n = self.tries[rd.id] = self.tries.get(rd.id, 0) + 1
            most = self.ctx.options.max_retries
            if n <= most:
                self.say(f"{job.label} of {rd.id} ended before the run did; submitting it "
                         f"again ({n}/{most})")
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
        self.end(rd, runs.FAILED, why)

    def cancel(self) -> None:
        active, self.active = self.active, []
        for job in active:
            job.cancel()


def dispatch(launcher: Launcher, ctx: LaunchContext, todo: list[RunDir], outcome: Outcome,
             on_end: OnEnd | None = None, command: str = "ablate") -> None:
    """Train ``todo`` through ``launcher`` and record in ``outcome`` what the folders say
    afterwards; each run that ends is told to ``on_end`` as it ends. Ctrl-C (or, for the local
    launcher, a SIGTERM) stops it with the finished epochs kept; a :class:`Fault` (a job's, or
    the folder's: no room for a run submitted again) cancels the other jobs and is raised. A
    study dispatches one round at a time through the same launcher; whoever made the launcher
    closes it after the last round."""
    view = launcher.start(ctx, todo)
    job_loop = _Dispatch(launcher, ctx, view, on_end or (lambda rd, status, detail: None),
                         command)
    try:
        job_loop.run(todo)
    except KeyboardInterrupt:
        job_loop.cancel()
        outcome.stopped, outcome.at_once = 2, True
    except Stopped as e:
        job_loop.cancel()
        outcome.stopped = e.signum
    except Fault:  # the other jobs would meet it too: stop them, start no other run
        job_loop.cancel()
        raise
    finally:
        job_loop.cancel()  # none is left on a normal end; after an error, no job outlives us
        view.close()
    # a run that ended without its job saying so (finished by another process): told now
    statuses = job_loop.probe(lambda: [rd.status for rd in todo])
    for rd, status in zip(todo, statuses):
        if status != runs.INCOMPLETE:
            job_loop.tell(rd, status, None)
        if status == runs.FINISHED:
            outcome.finished.append(rd.id)
        elif status == runs.FAILED:
            outcome.failed.append(rd.id)
