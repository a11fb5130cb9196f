"""``--launcher submitit``: every run is a Slurm job (one array job), through ``submitit``.

Each job runs :class:`RunJob`, a ``submitit.helpers.Checkpointable``: when Slurm preempts the
job or its time limit nears, submitit calls :meth:`RunJob.checkpoint`, which resubmits the same
run; the requeued job resumes from the run's last epoch checkpoint (the model state lives in
the run folder, not in the pickled job). A job that dies without requeuing (killed, node lost)
is submitted again by the driver up to ``--max-retries`` times. ``--slurm-cluster auto`` (the
default) submits to Slurm where Slurm answers here (``sinfo``), not wherever its commands are
installed; without it, or with ``--slurm-cluster local``, the jobs are processes on this
machine (submitit's ``LocalExecutor``), at most ``--max-parallel`` at once.
``--slurm-cluster slurm`` on a machine without ``sbatch`` and ``srun`` is one line naming them.

Job logs: ``OUT/.submitit/<job id>/``.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import submitit

from ..errors import ConfigError
from ..outcome import RunResult
from ..runs import RunDir, ensure_dir, no_link, storage_error
from . import warm
from .monitor import Monitor
from .options import LaunchOptions
from .protocol import Ending, Job, JobEnd, LaunchContext, View

__all__ = ["RunJob", "SubmititLauncher", "slurm_answers", "slurm_cluster"]

#: what a local job imports beyond a worker's (:data:`.warm.PRELOAD`): its controller and
#: submitit's task
WARM_PRELOAD = ("plugdrop.ablate.launch.submitit_local", "submitit.core.submission")

#: the Slurm commands submitit's Slurm executor runs
SLURM_COMMANDS = ("sbatch", "srun")


def slurm_answers(timeout: float = 10.0) -> bool:
    """Whether a Slurm controller answers on this machine: ``sinfo`` is installed and lists
    the partitions within ``timeout`` seconds."""
    sinfo = shutil.which("sinfo")
    if sinfo is None:
        return False
    try:
        done = subprocess.run([sinfo, "-h", "-o", "%P"], capture_output=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def slurm_cluster(choice: str) -> str:
    """The cluster submitit submits to for ``--slurm-cluster choice``: ``slurm`` (its commands
    must be here), ``local``, or for ``auto`` Slurm where it answers (:func:`slurm_answers`),
    else ``local``.

    Raises:
        ConfigError: ``slurm`` chosen where ``sbatch`` or ``srun`` is missing.
    """
    missing = [c for c in SLURM_COMMANDS if shutil.which(c) is None]
    if choice == "slurm" and missing:
        raise ConfigError(f"--launcher submitit --slurm-cluster slurm: Slurm's "
                          f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not "
                          f"on this machine (PATH); submit from a Slurm login node, or train "
                          f"on this machine with --slurm-cluster local or --launcher processes")
    if choice == "auto":
        return "slurm" if not missing and slurm_answers() else "local"
    return choice


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
                 config_hash: str | None = None, cfg: Any = None) -> str:
        """Train the run (on ``cfg``, the config submitit handed over with the job); its
        :class:`~plugdrop.ablate.outcome.RunResult` as JSON, or no result (exit) when a signal
        stopped it."""
        from ..worker import execute_job

        result = execute_job(Path(out), run_id, nproc=nproc, launcher="submitit", threads=threads,
                         handle_signals=True, config_hash=config_hash, cfg=cfg)
        if result.status is not Ending.STOPPED:
            return result.to_json()
        sig = result.signum or signal.SIGTERM
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
        # its result file (written whole, as the job's last act) ends it at once; Slurm's
        # accounting, which submitit reads every minute for an old job, only after that
        if not self.job.paths.result_pickle.exists() and not self.job.done():
            return None
        if not self._has_result():  # killed, preempted, stopped: the run folder tells
            return JobEnd(Ending.ENDED)
        try:  # the run folder decides; the job's own word counts only for a fault
            fault = RunResult.from_json(self.job.result())
        except Exception:  # noqa: BLE001 - killed, preempted, lost: the folder tells
            fault = None
        if fault is None or fault.status is not Ending.FAULT:
            return JobEnd(Ending.ENDED)
        return JobEnd.of(fault)

    def _has_result(self) -> bool:
        """Whether the ended job returned (a run's result, a fault among them). Asked for a
        result, submitit waits up to 15 s for its file to appear (late on a network file
        system), a wait that would stall the driver for every job killed or preempted, which
        leaves none: only a job Slurm saw complete, or one whose file is there, has one."""
        if self.job.paths.result_pickle.exists():
            return True
        if isinstance(self.job, submitit.LocalJob):  # this machine: the file is there or never
            return False
        return str(self.job.state).upper().startswith("COMPLETED")

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
        self.cluster = slurm_cluster(options.slurm_cluster)
        self.ex: Any = None

    def executor(self, out: Path) -> Any:
        o = self.options
        cluster = self.cluster
        private = out / ".submitit"  # submitit's job pickles: only this user may write them
        ensure_dir(private, "submitit's job folder")
        no_link(private, "submitit's job folder")
        try:
            os.chmod(private, 0o700)
        except OSError as e:
            raise storage_error(e, private / ".", "submitit's job folder") from None
        ex: Any
        if cluster == "local" and warm.usable():  # the jobs start warm (submitit_local)
            from .submitit_local import WarmLocalExecutor

            warm.preload(*WARM_PRELOAD)
            ex = WarmLocalExecutor(folder=private / "%j")
        else:
            ex = submitit.AutoExecutor(folder=private / "%j", cluster=cluster)
        params: dict[str, Any] = {
            "timeout_min": o.timeout_min, "nodes": 1, "tasks_per_node": 1,
            "cpus_per_task": o.cpus_per_run, "gpus_per_node": o.gpus_per_run or 0,
            "name": f"plugdrop-{out.name}"}
        if cluster == "slurm":
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
        self.cfg = ctx.cfg
        self.config_hash = ctx.cfg.hash()
        self.ex = self.executor(ctx.out)
        self.todo = len(todo)
        return Monitor(ctx.out, todo)

    def capacity(self) -> int:
        if self.cluster == "slurm":  # one array job; Slurm limits the parallelism
            return max(self.todo, 1)
        o = self.options
        return o.max_parallel or max(1, (os.cpu_count() or 1) // max(1, o.cpus_per_run))

    def submit(self, runs: list[RunDir]) -> list[Job]:
        o = self.options
        args = [(str(self.out.resolve()), rd.id, o.nproc_per_run, o.cpus_per_run,
                 self.config_hash, self.cfg) for rd in runs]
        try:  # submitit prints a failed sbatch's stderr itself: our one line says it
            array = len(runs) > 1 and self.cluster == "slurm"  # one array job
            with contextlib.redirect_stderr(io.StringIO()), (
                    self.ex.batch() if array else contextlib.nullcontext()):
                jobs = [self.ex.submit(RunJob(), *a) for a in args]
        except (submitit.core.utils.FailedJobError, OSError,
                subprocess.SubprocessError) as e:
            raise ConfigError(_submit_error(self.cluster, e)) from None
        return [_SlurmJob(rd, job, self.out) for rd, job in zip(runs, jobs)]

    def wait(self, jobs: list[Job], timeout: float) -> None:
        time.sleep(timeout)

    def close(self) -> None:
        pass
