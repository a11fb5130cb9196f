"""``--launcher processes``: every run in a process of its own on this machine, several at once.

For a workstation with several GPUs (or CPUs to spare) and no Slurm or Ray: no extra package.
Each run gets ``--gpus-per-run`` GPUs, by default one where this machine has GPUs (the visible
ones: ``CUDA_VISIBLE_DEVICES``, else all) and none where it has none. At most
``--max-parallel`` runs train at once (default: GPUs / GPUs per run when runs take GPUs, else
CPUs / ``--cpus-per-run``); each process sees only its own GPUs (``CUDA_VISIBLE_DEVICES``) and
uses ``--cpus-per-run`` torch threads. A process that dies
(killed, out of memory) is started again by the driver (``--max-retries``) and resumes from its
run's last checkpoint; Ctrl-C stops every process at its next step boundary, keeping the
finished epochs. A run that is itself data-parallel (``--nproc-per-run N``) is started through
torchrun. Each run's process is forked from a server that imported torch, timm and plugdrop once
(:mod:`.warm`): it starts in a fraction of a second, not the seconds a fresh interpreter spends
importing them (``PLUGDROP_WARM_START=0``: a fresh interpreter per run).

Logs: ``OUT/.processes/<run id>.log`` (every attempt appended).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

from ..errors import ConfigError, Exit
from ..outcome import RunResult
from ..runs import RunDir, open_no_follow, storage_error
from . import warm
from .monitor import Monitor
from .options import LaunchOptions
from .protocol import Ending, Job, JobEnd, LaunchContext, View

__all__ = ["ProcessesLauncher", "gpus_each", "gpus_notice"]

#: seconds a process gets to stop at a step boundary after SIGTERM before it is killed
GRACE_S = 30.0


def _visible_gpus() -> list[str]:
    """The GPUs this process may hand out: ``CUDA_VISIBLE_DEVICES`` if set, else all."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def gpus_each(options: LaunchOptions) -> tuple[int, list[str]]:
    """The GPUs each run's process gets (``--gpus-per-run``; not given: 1 where this machine
    has GPUs, else 0) and the GPUs this machine has for them."""
    visible = _visible_gpus()
    each = options.gpus_per_run
    if each is None:
        each = 1 if visible else 0
    return each, visible


def gpus_notice(options: LaunchOptions) -> str | None:
    """The line saying that the runs got one GPU each by default (``None``: ``--gpus-per-run``
    was given, or this machine has no GPU)."""
    each, visible = gpus_each(options)
    if options.gpus_per_run is not None or not each:
        return None
    n = len(visible)
    at_once = min(n, options.max_parallel) if options.max_parallel else n
    return (f"--launcher processes: each run gets one of this machine's {n} GPU"
            f"{'s' if n > 1 else ''} ({at_once} run{'s' if at_once > 1 else ''} at once, "
            f"each its own CUDA_VISIBLE_DEVICES); --gpus-per-run N sets another number "
            f"(0: train on the CPU)")


class _Process:
    """One run's process."""

    def __init__(self, run: RunDir, popen: warm.WarmProcess | subprocess.Popen,
                 gpus: list[str], log: Path, log_file: IO[bytes],
                 launcher: ProcessesLauncher) -> None:
        self.run, self.popen, self.gpus = run, popen, gpus
        self.label = f"process {popen.pid}"
        self.logs = str(log)
        self.log_file = log_file
        self.launcher = launcher

    def poll(self) -> JobEnd | None:
        code = self.popen.poll()
        if code is None:
            return None
        self._ended()
        result = RunResult.from_exit(code, self.run.status)  # the folder decides first
        if result.status is Ending.FAULT:  # its one line is the log's last, if it took it
            return JobEnd(Ending.FAULT, self._last_line())
        if result.status is not Ending.STOPPED:
            return JobEnd.of(result)
        if code == Exit.MISTAKE:  # a mistake met by the process (its last line says which)
            return JobEnd(Ending.LOST, f"its process stopped on a mistake: {self._last_line()}")
        return JobEnd(Ending.ENDED)

    def _last_line(self) -> str:
        try:
            lines = Path(self.logs).read_text(errors="replace").strip().splitlines()
        except OSError:
            return f"see {self.logs}"
        return lines[-1] if lines else f"see {self.logs}"

    def _ended(self) -> None:
        if not self.log_file.closed:
            self.log_file.close()
            self.launcher.free_gpus(self.gpus)

    def cancel(self) -> None:
        """SIGTERM: the run stops at its next step boundary, checkpointed there; killed
        after :data:`GRACE_S` seconds."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._ended()


class ProcessesLauncher:
    """Starts one process per run on this machine and watches their folders."""

    name = "processes"

    def __init__(self, options: LaunchOptions) -> None:
        self.options = options
        self.each, visible = gpus_each(options)
        self.gpus = visible if self.each else []
        if self.each > len(self.gpus):
            have = f"{len(self.gpus)} GPU{'s' if len(self.gpus) != 1 else ''}"
            raise ConfigError(f"--gpus-per-run {self.each}: this machine has {have} "
                              f"for the runs; lower --gpus-per-run (0 trains on the CPU)")
        self.free = list(self.gpus)

    def start(self, ctx: LaunchContext, todo: list[RunDir]) -> View:
        ctx.progress.close()  # the driver's view of the run folders takes over
        self.out = ctx.out.resolve()
        self.cfg = ctx.cfg
        self.config_hash = ctx.cfg.hash()
        (self.out / ".processes").mkdir(parents=True, exist_ok=True)
        return Monitor(ctx.out, todo)

    def capacity(self) -> int:
        o = self.options
        if self.each:
            most = len(self.gpus) // self.each
        else:
            most = max(1, (os.cpu_count() or 1) // max(1, o.cpus_per_run))
        return min(most, o.max_parallel) if o.max_parallel else most

    def free_gpus(self, gpus: list[str]) -> None:
        self.free += gpus

    def submit(self, runs: list[RunDir]) -> list[Job]:
        o = self.options
        jobs: list[Job] = []
        for rd in runs:
            gpus, self.free = self.free[:self.each], self.free[self.each:]
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(gpus),
                       OMP_NUM_THREADS=str(o.cpus_per_run))
            log = self.out / ".processes" / f"{rd.id}.log"
            try:
                log_file = os.fdopen(open_no_follow(log, os.O_WRONLY | os.O_CREAT
                                                    | os.O_APPEND), "ab")
            except OSError as e:
                raise storage_error(e, log, f"the log of run {rd.id}") from None
            popen = self._start(rd, env, log, log_file)
            jobs.append(_Process(rd, popen, gpus, log, log_file, self))
        return jobs

    def _start(self, rd: RunDir, env: dict[str, str], log: Path, log_file: IO[bytes]
               ) -> warm.WarmProcess | subprocess.Popen:
        """A run's process: forked warm with the round's config handed over (not read back
        from the folder), or, for a run under torchrun or where the server cannot start one,
        ``python -m plugdrop.ablate.worker`` reading the stored config."""
        from ..worker import job_command, job_main

        o = self.options
        if o.nproc_per_run <= 1 and warm.usable():
            try:
                return warm.call(job_main, self.out, rd.id, env=env, stdout=log,
                                 launcher=self.name, threads=o.cpus_per_run,
                                 config_hash=self.config_hash, cfg=self.cfg)
            except (OSError, EOFError) as e:  # no room for its socket, a process limit ...
                warm.failed(e)
        return warm.start(job_command(self.out, rd.id, nproc=o.nproc_per_run,
                                      launcher=self.name, threads=o.cpus_per_run,
                                      config_hash=self.config_hash),
                          env=env, log=log, log_file=log_file)

    def wait(self, jobs: list[Job], timeout: float) -> None:
        time.sleep(min(timeout, 0.2))

    def close(self) -> None:
        pass
