"""``--launcher ray``: every run is a Ray task with ``--cpus-per-run`` / ``--gpus-per-run``.

``ray.init()`` starts a cluster on this machine, ``--address HOST:PORT`` joins a running one
(every node needs the same Python environment and the ``--out`` folder on shared storage). A
task whose worker process dies is retried by Ray (``--max-retries``) and resumes from the run's
last epoch checkpoint. Runs that are themselves data-parallel (``--nproc-per-run``) start
torchrun inside their task.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

from ..errors import ConfigError, one_line
from ..outcome import RunResult
from ..runs import RunDir
from .monitor import Monitor
from .options import LaunchOptions
from .protocol import Ending, Job, JobEnd, LaunchContext, View

__all__ = ["RayLauncher", "check_address"]


def _task(out: str, run_id: str, nproc: int, threads: int, config_hash: str,
          cfg: Any = None) -> str:
    """A Ray task: the run (on ``cfg``, the config Ray handed over with the task), its
    :class:`~plugdrop.ablate.outcome.RunResult` returned as JSON."""
    from ..worker import execute_job

    return execute_job(Path(out), run_id, nproc=nproc, launcher="ray", threads=threads,
                   config_hash=config_hash, cfg=cfg).to_json()


def check_address(address: str, timeout: float = 5.0) -> None:
    """Fail in seconds with one line when ``HOST:PORT`` does not answer (``ray.init`` would
    retry for a minute)."""
    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--address {address!r}: give HOST:PORT of the Ray head node (e.g. "
                          f"10.0.0.5:6379, or ray://10.0.0.5:10001)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConfigError(f"--address {address}: no Ray cluster answers there "
                          f"({e.strerror or e}); start one with 'ray start --head' or check "
                          f"the address") from None


class _Task:
    def __init__(self, run: RunDir, ref: Any, retries: int) -> None:
        self.run, self.ref, self.retries = run, ref, retries
        self.label = f"Ray task {ref.hex()[:12]}"
        self.logs = "the Ray logs (/tmp/ray/session_latest/logs)"

    def poll(self) -> JobEnd | None:
        import ray

        ready, _ = ray.wait([self.ref], timeout=0)
        if not ready:
            return None
        try:
            result = RunResult.from_json(ray.get(self.ref))
        except ray.exceptions.RayError as e:
            return JobEnd(Ending.LOST, f"the Ray task failed after {self.retries} retries: "
                                    f"{one_line(e, limit=200)}", str(e))
        return JobEnd(Ending.ENDED) if result is None else JobEnd.of(result)

    def cancel(self) -> None:
        import ray

        ray.cancel(self.ref, force=True)


class RayLauncher:
    """Runs every run as a Ray task and watches their folders."""

    name = "ray"

    def __init__(self, options: LaunchOptions):
        import ray

        self.options = options
        self.started = False
        if options.address:  # named: it must answer, joined here or already by this process
            check_address(options.address)
        if not ray.is_initialized():
            try:
                ray.init(address=options.address, include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                where = options.address or "this machine"
                raise ConfigError(f"--launcher ray: could not start or join a Ray cluster on "
                                  f"{where}: {one_line(e, limit=200)}") from None
            self.started = True

    def start(self, ctx: LaunchContext, todo: list[RunDir]) -> View:
        import ray

        ctx.progress.close()  # the driver's view of the run folders takes over
        o = self.options
        self.out = ctx.out
        self.cfg = ctx.cfg
        self.config_hash = ctx.cfg.hash()
        self.todo = len(todo)
        self.remote = ray.remote(num_cpus=o.cpus_per_run, num_gpus=o.gpus_per_run or 0,
                                 max_retries=o.max_retries)(_task)
        return Monitor(ctx.out, todo)

    def capacity(self) -> int:
        return self.options.max_parallel or self.todo or 1

    def submit(self, runs: list[RunDir]) -> list[Job]:
        o = self.options
        return [_Task(rd, self.remote.remote(str(self.out.resolve()), rd.id, o.nproc_per_run,
                                             o.cpus_per_run, self.config_hash, self.cfg),
                      o.max_retries) for rd in runs]

    def wait(self, jobs: list[Job], timeout: float) -> None:
        import ray

        refs = [j.ref for j in jobs if isinstance(j, _Task)]
        if refs:
            ray.wait(refs, num_returns=1, timeout=timeout)
        else:
            time.sleep(timeout)

    def close(self) -> None:
        import ray

        if self.started:
            ray.shutdown()
