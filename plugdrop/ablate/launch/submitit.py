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

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import submitit

from . import LaunchOptions, default_parallel
from ..runs import RunLock
from .monitor import Monitor, Waiting, record

if TYPE_CHECKING:
    from ..config import AblationConfig
    from ..runner import Outcome
    from ..runs import RunDir


class RunJob(submitit.helpers.Checkpointable):
    """One run as a submitit job; requeued on preemption or time-out, resuming from the run's
    checkpoint."""

    def __call__(self, out: str, run_id: str, nproc: int = 1, threads: int | None = None
                 ) -> str:
        from ..worker import run_job

        return run_job(Path(out), run_id, nproc=nproc, launcher="submitit", threads=threads,
                       handle_signals=False)

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """Resubmit the same run: its state is in the run folder (checkpoint.pt), so the
        requeued job resumes from the last finished epoch."""
        return submitit.helpers.DelayedSubmission(RunJob(), *args, **kwargs)


class SubmititLauncher:
    """Submits the runs through ``submitit.AutoExecutor`` and watches their folders."""

    name = "submitit"

    def __init__(self, options: LaunchOptions):
        self.options = options

    def executor(self, out: Path) -> Any:
        o = self.options
        ex = submitit.AutoExecutor(folder=out / ".submitit" / "%j", cluster=o.cluster)
        params: dict[str, Any] = {
            "timeout_min": o.timeout_min, "nodes": 1, "tasks_per_node": 1,
            "cpus_per_task": o.cpus_per_run, "gpus_per_node": o.gpus_per_run,
            "name": f"plugdrop-{out.name}"}
        if ex.cluster == "slurm":
            if o.partition:
                params["slurm_partition"] = o.partition
            if o.max_parallel:
                params["slurm_array_parallelism"] = o.max_parallel
        ex.update_parameters(**params)
        return ex

    def execute(self, cfg: AblationConfig, out: Path, todo: list[RunDir],
                outcome: Outcome) -> None:
        o = self.options
        ex = self.executor(out)
        args = lambda rd: (str(out.resolve()), rd.id, o.nproc_per_run,  # noqa: E731
                           o.cpus_per_run)
        monitor = Monitor(out, todo)
        tries = {rd.id: 0 for rd in todo}
        active: dict[str, tuple[RunDir, Any]] = {}
        queue = list(todo)
        waiting = Waiting()
        if ex.cluster == "slurm":  # one array job; Slurm limits the parallelism
            with ex.batch():
                jobs = [ex.submit(RunJob(), *args(rd)) for rd in queue]
            active = {rd.id: (rd, job) for rd, job in zip(queue, jobs)}
            queue = []
        limit = o.max_parallel or default_parallel(o)
        try:
            while queue or active or waiting:
                queue += waiting.released()
                while queue and len(active) < limit:
                    rd = queue.pop(0)
                    active[rd.id] = (rd, ex.submit(RunJob(), *args(rd)))
                for rid, (rd, job) in list(active.items()):
                    if not job.done():
                        continue
                    del active[rid]
                    if rd.status == "incomplete" and RunLock(rd).held_elsewhere():
                        waiting.add(rd)  # another process trains it: wait for that one
                    elif rd.status == "incomplete":  # died without requeuing itself
                        tries[rid] += 1
                        if tries[rid] <= o.max_retries:
                            monitor.message(f"plugdrop ablate: job {job.job_id} of {rid} ended "
                                            f"before the run did; submitting it again "
                                            f"({tries[rid]}/{o.max_retries})")
                            active[rid] = (rd, ex.submit(RunJob(), *args(rd)))
                        else:
                            _give_up(rd, f"its job ended {tries[rid]} times before the run "
                                         f"did; see {out / '.submitit' / str(job.job_id)}")
                monitor.update()
                time.sleep(0.5)
        except KeyboardInterrupt:
            for _, job in active.values():
                job.cancel(check=False)
            outcome.stopped = 2
        finally:
            monitor.close()
        record(outcome, todo)


def _give_up(rd: RunDir, why: str) -> None:
    from ..runner import _current_epoch

    rd.failed(RuntimeError(why), _current_epoch(rd), "")
