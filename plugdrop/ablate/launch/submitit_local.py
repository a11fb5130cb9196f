"""``--launcher submitit --slurm-cluster local``: submitit's local jobs started warm.

submitit's :class:`~submitit.LocalExecutor` starts each job as two fresh interpreters: a
controller (``python -m submitit.local._local``), which starts the task (``python -u -m
submitit.core._submit``), sends it the time-limit signal, requeues it and stops it. The task
unpickles a plugdrop job, so it imports torch, timm and torchvision before its first step
(about 7 s of CPU on a 2-core machine), once per run and again for every requeue or retry.

:class:`WarmLocalExecutor` forks the controller from the warm server of :mod:`.warm` instead,
and the controller (:class:`WarmController`, submitit's own with one change) forks the task
from itself: both start in a fraction of a second, with the environment, files, exit status
and signals that submitit's fresh processes have. The controller shares the driver's process
group, as submitit's does (Ctrl-C reaches the jobs too). Where the warm server is off
(``PLUGDROP_WARM_START=0``, no ``forkserver``) or fails, the jobs are submitit's own.

Run as a module, this is the controller: ``python -m plugdrop.ablate.launch.submitit_local
FOLDER`` (the warm server runs it so).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, cast

from submitit.core.utils import JobPaths
from submitit.local.local import Controller, LocalExecutor, LocalJob

from . import warm

__all__ = ["WarmController", "WarmLocalExecutor", "controller_env"]

#: seconds a task's start waits for its job's pickle, which the driver moves into the job's
#: folder just after the controller started (submitit's task would wait in steps of 1 s)
PICKLE_WAIT = 10.0


def controller_env(parameters: dict[str, Any], command: str) -> dict[str, str]:
    """What submitit's local controller reads from its environment (submitit's
    ``start_controller``): the number of tasks, the task's command, the time limit and the
    signal's lead, the GPUs it may see."""
    n_gpus = int(parameters.get("gpus_per_node", 0))
    visible = parameters.get("visible_gpus", ())
    gpus = range(n_gpus) if not visible else list(visible)[:n_gpus]
    return {
        "SUBMITIT_LOCAL_NTASKS": str(parameters.get("tasks_per_node", 1)),
        "SUBMITIT_LOCAL_COMMAND": command,
        "SUBMITIT_LOCAL_TIMEOUT_S": str(int(60 * parameters.get("timeout_min", 2.0))),
        "SUBMITIT_LOCAL_SIGNAL_DELAY_S": str(int(parameters.get("signal_delay_s", 30))),
        "SUBMITIT_LOCAL_NODEID": "0",
        "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
        "SUBMITIT_STDERR_TO_STDOUT": "1" if parameters.get("stderr_to_stdout") else "",
        "SUBMITIT_EXECUTOR": "local",
        "CUDA_VISIBLE_DEVICES": ",".join(str(k) for k in gpus),
        "SUBMITIT_LOCAL_WITH_SHELL": "",
    }


class WarmLocalExecutor(LocalExecutor):
    """submitit's :class:`~submitit.LocalExecutor`, its job controllers forked from the warm
    server (:mod:`.warm`). Parameters, job folders, logs, pickles and :class:`LocalJob`
    handles are submitit's; ``setup`` commands (a shell) start submitit's own controller."""

    def _submit_command(self, command: str) -> LocalJob[Any]:
        if not warm.usable() or self.parameters.get("setup"):
            return super()._submit_command(command)
        env = dict(os.environ, **controller_env(self.parameters, command))
        try:
            process = warm.spawn(__name__, [str(self.folder)], env=env, stdout=None,
                                 new_session=False)
        except (OSError, EOFError) as e:  # no room for its socket, a process limit ...
            warm.failed(e)
            return super()._submit_command(command)
        ntasks = int(self.parameters.get("tasks_per_node", 1))
        return LocalJob(folder=self.folder, job_id=str(process.pid), process=cast(Any, process),
                        tasks=list(range(ntasks)))


class WarmController(Controller):
    """submitit's local job controller, its tasks forked from this (warm) process: the
    time-limit signal, requeues, signal forwarding and the end of the tasks are submitit's."""

    def start_tasks(self) -> None:
        job = warm.module_command(self.command)
        if job is None:
            return super().start_tasks()
        module, args, unbuffered = job
        self.folder.mkdir(exist_ok=True)
        paths = [JobPaths(self.folder, self.pid, k) for k in range(self.ntasks)]
        deadline = time.monotonic() + PICKLE_WAIT
        while not paths[0].submitted_pickle.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        for k, p in enumerate(paths):
            env = dict(os.environ, SUBMITIT_LOCAL_LOCALID=str(k),
                       SUBMITIT_LOCAL_GLOBALID=str(k), SUBMITIT_LOCAL_JOB_ID=self.pid)
            self.tasks.append(cast(Any, warm.spawn(
                module, args, env=env, stdout=p.stdout,
                stderr=p.stdout if self.stderr_to_stdout else p.stderr, new_session=False,
                unbuffered=unbuffered, here=True)))


def _main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m plugdrop.ablate.launch.submitit_local FOLDER", file=sys.stderr)
        return 2
    # submitit cancels a local job by SIGINT to its controller: heard even where the driver
    # ignores SIGINT, as a script's `plugdrop ablate ... &` does (its jobs would outlive it)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    WarmController(Path(argv[0])).run()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

