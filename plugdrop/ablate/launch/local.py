"""``--launcher local`` (the default): the runs train in this process, one after another (under
torchrun, in all of its processes together), with tqdm bars on a terminal and a line per epoch
otherwise. Ctrl-C, SIGTERM, SIGUSR1 or SIGUSR2 stops at the next step boundary, with a checkpoint
there; a second Ctrl-C stops at once."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import Fault
from ..execute import execute
from ..progress import Progress
from ..runs import RunDir
from ..train import StopFlag, Stopped
from .options import LaunchOptions
from .protocol import Ending, Job, JobEnd, LaunchContext, View

__all__ = ["LocalLauncher"]


@dataclass
class _Done:
    """A run trained in this process: it has ended by the time :meth:`LocalLauncher.submit`
    returns."""

    run: RunDir
    end: JobEnd
    label: str = "this process"
    logs: str = "the output above"

    def poll(self) -> JobEnd | None:
        return self.end

    def cancel(self) -> None:
        pass


class _Bars:
    """The local launcher's :class:`~.protocol.View`: the progress bars of the runs."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def ended(self, rd: RunDir, status: str, detail: str | None) -> None:
        self.progress.name = f"{rd.variant} seed={rd.seed}"
        if status == Ending.BUSY:
            self.progress.message(f"[{self.progress.name}] another process trains it: "
                                  f"waiting for it")
        else:
            self.progress.run_end(status if detail is None else f"{status}: {detail}")

    def update(self, active: Sequence[RunDir]) -> None:
        pass

    def message(self, text: str) -> None:
        self.progress.message(text)

    def close(self) -> None:
        self.progress.close()


class LocalLauncher:
    """Trains the runs here, one at a time."""

    name = "local"

    def __init__(self, options: LaunchOptions) -> None:
        self.options = options
        self.stop = StopFlag()
        self.installed = False

    def start(self, ctx: LaunchContext, todo: list[RunDir]) -> View:
        self.ctx = ctx
        if not self.installed:  # once for all rounds: a signal between rounds is kept
            self.stop.install()
            self.installed = True
        return _Bars(ctx.progress)

    def capacity(self) -> int:
        return 1

    def submit(self, runs: list[RunDir]) -> list[Job]:
        ctx, progress = self.ctx, self.ctx.progress
        jobs: list[Job] = []
        for rd in runs:
            self.stop.check(ctx.d)  # a signal between two runs: start no other
            try:
                result = execute(ctx.cfg, rd, ctx.d, ctx.program, stop=self.stop,
                                 progress=progress, launcher=self.name, out=ctx.out)
            except Stopped as e:
                progress.run_end(f"stopped by {e}; checkpointed at that step"
                                 if ctx.cfg.program is None else
                                 f"stopped: the program was passed {e} and exited")
                raise
            except KeyboardInterrupt:
                progress.run_end("interrupted")
                raise
            except Fault:
                progress.run_end("stopped by a fault of the environment; its finished epochs "
                                 "are kept")
                raise
            jobs.append(_Done(rd, JobEnd.of(result)))
        return jobs

    def wait(self, jobs: list[Job], timeout: float) -> None:
        if not jobs:  # only runs another process trains: look again in a moment
            time.sleep(timeout)
            self.stop.check(self.ctx.d)

    def close(self) -> None:
        self.stop.restore()
        self.installed = False
