"""The job loop every launcher shares (``plugdrop.ablate.study.jobs``), on a scripted launcher (no training): a job that
ends before its run is submitted again up to ``--max-retries`` and then given up with a line in
``failed.json``; a job the launcher lost fails its run; a run another process holds waits for
it; the capacity is never exceeded; Ctrl-C cancels what runs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from plugdrop.ablate import runs
from plugdrop.ablate.launch import Ending, JobEnd, LaunchContext, LaunchOptions
from plugdrop.ablate.study import Outcome
from plugdrop.ablate.study import dispatch as drive

BUSY, ENDED, FINISHED, LOST = Ending.BUSY, Ending.ENDED, Ending.FINISHED, Ending.LOST
from plugdrop.ablate.train import Dist


class Job:
    def __init__(self, run: runs.RunDir, end: JobEnd, launcher: "Scripted") -> None:
        self.run, self.end, self.launcher = run, end, launcher
        self.label, self.logs = f"job {run.id}", f"logs of {run.id}"

    def poll(self) -> JobEnd | None:
        if self.end.status == FINISHED:
            self.run.path.mkdir(parents=True, exist_ok=True)
            self.run.done(1, 0.0)
        return self.end

    def cancel(self) -> None:
        self.launcher.cancelled.append(self.run.id)


def _end(entry: str) -> JobEnd:
    """``status`` or ``status:error`` of a script entry."""
    status, *error = entry.split(":", 1)
    return JobEnd(Ending(status), *error)


class View:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.seen: list[tuple[str, str]] = []

    def ended(self, rd: runs.RunDir, status: str, detail: str | None) -> None:
        self.seen.append((rd.id, status))

    def update(self, active) -> None:
        pass

    def message(self, text: str) -> None:
        self.lines.append(text)

    def close(self) -> None:
        pass


class Scripted:
    """A launcher whose jobs end as a script says, one script entry per submission."""

    name = "scripted"

    def __init__(self, script: dict[str, list[str]], capacity: int = 2,
                 interrupt_after: int | None = None) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.cap, self.interrupt_after = capacity, interrupt_after
        self.submitted: list[str] = []
        self.cancelled: list[str] = []
        self.most_at_once = 0
        self.active = 0
        self.held: runs.RunLock | None = None
        self.closed = False

    def start(self, ctx, todo):
        self.view = View()
        return self.view

    def capacity(self) -> int:
        return self.cap

    def submit(self, batch):
        if self.interrupt_after is not None and len(self.submitted) >= self.interrupt_after:
            raise KeyboardInterrupt
        self.submitted += [rd.id for rd in batch]
        return [Job(rd, _end(self.script[rd.id].pop(0)), self)
                for rd in batch]

    def wait(self, jobs, timeout: float) -> None:
        if self.held is not None:  # the other process lets go of its run
            self.held.release()
            self.held = None

    def close(self) -> None:
        self.closed = True


def _ctx(out: Path, retries: int = 1) -> LaunchContext:
    return LaunchContext(cfg=SimpleNamespace(plots=False), out=out,  # type: ignore
                         d=Dist(), program=None, progress=None,  # type: ignore
                         options=LaunchOptions(max_retries=retries))


def _runs(out: Path, *names: str) -> list[runs.RunDir]:
    return [runs.RunDir(out, n, 0) for n in names]


def test_retries_lost_jobs_and_giving_up(tmp_path):
    out = tmp_path / "out"
    todo = _runs(out, "a", "b", "c", "d")
    launcher = Scripted({"a__s0": [ENDED, FINISHED], "b__s0": [f"{LOST}:the task vanished"],
                         "c__s0": [ENDED, ENDED], "d__s0": [FINISHED]})
    outcome = Outcome()
    drive(launcher, _ctx(out), todo, outcome)
    assert outcome.finished == ["a__s0", "d__s0"] and outcome.failed == ["b__s0", "c__s0"]
    assert launcher.submitted.count("a__s0") == 2 and launcher.submitted.count("c__s0") == 2
    lines = launcher.view.lines
    assert "plugdrop ablate: job a__s0 of a__s0 ended before the run did; submitting it again " \
           "(1/1)" in lines
    assert "plugdrop ablate: run b__s0: the task vanished" in lines
    import json

    failed = json.loads((out / "runs" / "c__s0" / "failed.json").read_text())
    assert failed["error"] == "its job ended 2 times before the run did; see logs of c__s0"
    assert not launcher.closed  # the runner closes a launcher after its last round


def test_a_run_another_process_holds_waits_for_it(tmp_path):
    out = tmp_path / "out"
    (rd,) = _runs(out, "a")
    launcher = Scripted({"a__s0": [BUSY, FINISHED]})
    launcher.held = runs.RunLock(rd)
    assert launcher.held.try_acquire(patience=0.0)
    outcome = Outcome()
    drive(launcher, _ctx(out), [rd], outcome)
    assert launcher.submitted == ["a__s0", "a__s0"] and outcome.finished == ["a__s0"]
    assert ("a__s0", BUSY) in launcher.view.seen


@pytest.mark.parametrize("capacity", [1, 3])
def test_capacity_and_interrupt(tmp_path, capacity):
    out = tmp_path / "out"
    todo = _runs(out, *"abcde")
    launcher = Scripted({f"{n}__s0": [FINISHED] for n in "abcde"}, capacity=capacity,
                        interrupt_after=capacity)
    outcome = Outcome()
    drive(launcher, _ctx(out), todo, outcome)
    assert outcome.stopped == 2 and len(launcher.submitted) == capacity
    assert outcome.finished == [f"{n}__s0" for n in "abcde"[:capacity]]


def test_the_local_launcher_starts_no_run_after_a_signal(tmp_path):
    """A SIGTERM or Ctrl-C that arrives between two runs (or while waiting for a run another
    process holds) stops the local launcher before it starts another run."""
    import signal

    from plugdrop.ablate.launch.local import LocalLauncher
    from plugdrop.ablate.train import Stopped

    launcher = LocalLauncher(LaunchOptions())
    launcher.ctx = _ctx(tmp_path)
    launcher.stop.signum = signal.SIGTERM
    with pytest.raises(Stopped):
        launcher.submit(_runs(tmp_path, "a"))
    with pytest.raises(Stopped):
        launcher.wait([], 0.0)
    assert not (tmp_path / "runs").exists()


class Requeued(Job):
    """A job whose run finished (in an earlier life of it) but which the scheduler requeued:
    it would sit in the queue, or run for nothing, until someone cancels it."""

    def poll(self) -> JobEnd | None:
        self.run.path.mkdir(parents=True, exist_ok=True)
        if not self.run.status == runs.FINISHED:
            self.run.done(1, 0.0)
        return None if self.run.id not in self.launcher.cancelled else JobEnd(ENDED)


def test_a_job_left_behind_after_its_run_finished_is_cancelled(tmp_path, monkeypatch):
    from plugdrop.ablate.study import jobs

    monkeypatch.setattr(jobs, "GRACE", 0.3)
    out = tmp_path / "out"
    todo = _runs(out, "a", "b")
    launcher = Scripted({"a__s0": [FINISHED], "b__s0": [FINISHED]})
    submit = launcher.submit
    launcher.submit = lambda batch: [Requeued(j.run, j.end, launcher) if j.run.id == "b__s0"
                                     else j for j in submit(batch)]
    launcher.wait = lambda jobs, timeout: None
    outcome = Outcome()
    drive(launcher, _ctx(out), todo, outcome)
    assert launcher.cancelled == ["b__s0"]  # the job that ended by itself is never touched
    assert outcome.finished == ["a__s0", "b__s0"] and outcome.failed == []
