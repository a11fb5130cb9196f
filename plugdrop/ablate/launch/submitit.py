"""``--launcher submitit``: every run is a Slurm job (one array job), through ``submitit``.

Each job runs :class:`RunJob`, a ``submitit.helpers.Checkpointable``: when Slurm preempts the
job or its time limit nears, submitit calls :meth:`RunJob.checkpoint`, which resubmits the same
run; the requeued job resumes from the run's last epoch checkpoint (the model state lives in
the run folder, not in the pickled job). A job that dies without requeuing (killed, node lost)
is submitted again by the driver up to ``--max-retries`` times. Without Slurm (no ``sbatch``)
or with ``--slurm-cluster local`` the jobs are processes on this machine (submitit's
``LocalExecutor``), at most ``--max-parallel`` at once.

Job logs: ``OUT/.submitit/<job id>/``.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import submitit

from ..errors import ConfigError
from ..runs import RunDir, ensure_dir, no_link, storage_error
from .monitor import Monitor
from .options import LaunchOptions
from .protocol import ENDED, FAULT, Job, JobEnd, LaunchContext, View

__all__ = ["RunJob", "SubmititLauncher"]


class RunJob(submitit.helpers.Checkpointable):
    """One run as a submitit job; on a scheduler's signal it checkpoints at the next step and
    is requeued, resuming at that step.

    submitit installs its own handlers in the job: SIGUSR2 (Slurm's ``--signal``, sent
    ``--signal-lead`` seconds before the time limit, and on preemption where the cluster is so
    configured) checkpoints the job's arguments and requeues it with ``scontrol requeue``;
    SIGTERM it ignores ("Bypassing signal SIGTERM"). The run replaces both while it trains
    (and SIGUSR1, SIGINT): any of them stops it at the next optimizer step with a checkpoint
    there. Then SIGUSR2 is handed to submitit's handler, which requeues the job; after any other
    signal the job exits without a result, so that Slurm requeues it (preemption,
    ``scontrol requeue``) or, when it was cancelled, the driver submits the run again.
    """

    def __call__(self, out: str, run_id: str, nproc: int = 1, threads: int | None = None,
                 config_hash: str | None = None) -> str:
        from ..worker import STOPPED, run_job

        status = run_job(Path(out), run_id, nproc=nproc, launcher="submitit", threads=threads,
                         handle_signals=True, config_hash=config_hash)
        head, _, signum = status.partition(": ")
        if head != STOPPED:
            return status
        sig = int(signum) if signum.isdigit() else signal.SIGTERM
        handler = signal.getsignal(sig)  # submitit's again, now that the run let go
        if sig == signal.SIGUSR2 and callable(handler):
            try:
                handler(sig, None)  # checkpoint() below, scontrol requeue, exit
            except Exception:  # noqa: BLE001 - e.g. Slurm requeues it already (preemption)
                pass  # no error result: the driver must not count the job as ended
        sys.exit(-1)  # no result: requeued by Slurm, or submitted again by the driver

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """Resubmit the same run: its state is in the run folder (``checkpoint.pt``, written
        at the step where the signal stopped it), so the requeued job resumes there."""
        return submitit.helpers.DelayedSubmission(RunJob(), *args, **kwargs)


class _SlurmJob:
    def __init__(self, run: RunDir, job: Any, out: Path) -> None:
        self.run, self.job = run, job
        self.label = f"job {job.job_id}"
        self.logs = str(out / ".submitit" / str(job.job_id))

    def poll(self) -> JobEnd | None:
        if not self.job.done():
            return None
        from ..worker import fault_of

        try:  # the run folder decides; the job's own word counts only for a fault
            fault = fault_of(str(self.job.result()))
        except Exception:  # noqa: BLE001 - killed, preempted, lost: the folder tells
            fault = None
        return JobEnd(ENDED) if fault is None else JobEnd(FAULT, str(fault), fault=fault)

    def cancel(self) -> None:
        self.job.cancel(check=False)


def _submit_error(cluster: str, e: BaseException) -> str:
    """One line for a submission that failed: sbatch's own error (its last line says most),
    and what to check."""
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    said = next((x for x in reversed(lines) if "sbatch:" in x), lines[-1] if lines else
                type(e).__name__)
    if cluster != "slurm":
        return f"--launcher submitit: could not start a job ({said})"
    return (f"--launcher submitit: sbatch could not submit the jobs ({said}); check that "
            f"Slurm answers here (sinfo; SLURM_CONF), choose a partition with "
            f"--slurm-partition, or train on this machine with --slurm-cluster local")


class SubmititLauncher:
    """Submits the runs through ``submitit.AutoExecutor`` and watches their folders."""

    name = "submitit"

    def __init__(self, options: LaunchOptions):
        self.options = options
        self.ex: Any = None

    def executor(self, out: Path) -> Any:
        o = self.options
        cluster = None if o.slurm_cluster == "auto" else o.slurm_cluster
        private = out / ".submitit"  # submitit's job pickles: only this user may write them
        ensure_dir(private, "submitit's job folder")
        no_link(private, "submitit's job folder")
        try:
            os.chmod(private, 0o700)
        except OSError as e:
            raise storage_error(e, private / ".", "submitit's job folder") from None
        ex = submitit.AutoExecutor(folder=private / "%j", cluster=cluster)
        params: dict[str, Any] = {
            "timeout_min": o.timeout_min, "nodes": 1, "tasks_per_node": 1,
            "cpus_per_task": o.cpus_per_run, "gpus_per_node": o.gpus_per_run,
            "name": f"plugdrop-{out.name}"}
        if ex.cluster == "slurm":
            params["slurm_signal_delay_s"] = o.signal_lead  # --signal=USR2@lead
            if o.slurm_partition:
                params["slurm_partition"] = o.slurm_partition
            if o.max_parallel:
                params["slurm_array_parallelism"] = o.max_parallel
        ex.update_parameters(**params)
        return ex

    def start(self, ctx: LaunchContext, todo: list[RunDir]) -> View:
        ctx.progress.close()  # the driver's view of the run folders takes over
        self.out = ctx.out
        self.config_hash = ctx.cfg.hash()
        self.ex = self.executor(ctx.out)
        self.todo = len(todo)
        return Monitor(ctx.out, todo)

    def capacity(self) -> int:
        if self.ex.cluster == "slurm":  # one array job; Slurm limits the parallelism
            return max(self.todo, 1)
        o = self.options
        return o.max_parallel or max(1, (os.cpu_count() or 1) // max(1, o.cpus_per_run))

    def submit(self, runs: list[RunDir]) -> list[Job]:
        o = self.options
        args = [(str(self.out.resolve()), rd.id, o.nproc_per_run, o.cpus_per_run,
                 self.config_hash) for rd in runs]
        try:  # submitit prints a failed sbatch's stderr itself: our one line says it
            array = len(runs) > 1 and self.ex.cluster == "slurm"  # one array job
            with contextlib.redirect_stderr(io.StringIO()), (
                    self.ex.batch() if array else contextlib.nullcontext()):
                jobs = [self.ex.submit(RunJob(), *a) for a in args]
        except (submitit.core.utils.FailedJobError, OSError,
                subprocess.SubprocessError) as e:
            raise ConfigError(_submit_error(self.ex.cluster, e)) from None
        return [_SlurmJob(rd, job, self.out) for rd, job in zip(runs, jobs)]

    def wait(self, jobs: list[Job], timeout: float) -> None:
        time.sleep(timeout)

    def close(self) -> None:
        pass
