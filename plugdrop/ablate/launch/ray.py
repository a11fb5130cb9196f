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
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from . import LaunchOptions
from .monitor import Monitor, Waiting, record

if TYPE_CHECKING:
    from ..config import AblationConfig
    from ..runner import Outcome
    from ..runs import RunDir


def _task(out: str, run_id: str, nproc: int, threads: int) -> str:
    from ..worker import run_job

    return run_job(Path(out), run_id, nproc=nproc, launcher="ray", threads=threads)


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


class RayLauncher:
    """Runs every run as a Ray task and watches their folders."""

    name = "ray"

    def __init__(self, options: LaunchOptions):
        import ray

        self.options = options
        self.started = False
        if not ray.is_initialized():
            if options.address:
                check_address(options.address)
            try:
                ray.init(address=options.address, include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                where = options.address or "this machine"
                raise ConfigError(f"--launcher ray: could not start or join a Ray cluster on "
                                  f"{where}: {' '.join(str(e).split())[:200]}") from None
            self.started = True

    def execute(self, cfg: AblationConfig, out: Path, todo: list[RunDir],
                outcome: Outcome) -> None:
        import ray

        o = self.options
        remote = ray.remote(num_cpus=o.cpus_per_run, num_gpus=o.gpus_per_run,
                            max_retries=o.max_retries)(_task)
        limit = o.max_parallel or len(todo) or 1
        queue = list(todo)
        active: dict[Any, RunDir] = {}
        waiting = Waiting()
        monitor = Monitor(out, todo)
        try:
            while queue or active or waiting:
                queue += waiting.released()
                while queue and len(active) < limit:
                    rd = queue.pop(0)
                    ref = remote.remote(str(out.resolve()), rd.id, o.nproc_per_run,
                                        o.cpus_per_run)
                    active[ref] = rd
                if not active:
                    monitor.update()
                    time.sleep(0.5)
                    continue
                ready, _ = ray.wait(list(active), num_returns=1, timeout=0.5)
                for ref in ready:
                    rd = active.pop(ref)
                    try:
                        if ray.get(ref) == "busy" and rd.status == "incomplete":
                            waiting.add(rd)  # another process trains it: wait for that one
                    except ray.exceptions.RayError as e:
                        monitor.message(f"plugdrop ablate: run {rd.id}: the Ray task failed "
                                        f"after {o.max_retries} retries: "
                                        f"{' '.join(str(e).split())[:200]}")
                        if rd.status == "incomplete":
                            from ..runner import _current_epoch

                            rd.failed(RuntimeError(f"its Ray task failed: {type(e).__name__}"),
                                      _current_epoch(rd), str(e))
                monitor.update()
        except KeyboardInterrupt:
            for ref in active:
                ray.cancel(ref, force=True)
            outcome.stopped = 2
        finally:
            monitor.close()
            if self.started:
                ray.shutdown()
        record(outcome, todo)
