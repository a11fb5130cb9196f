"""Where the runs of an ablation train: ``--launcher local | submitit | ray`` and ``--shard``.

``local`` (the default) trains the runs in this process, one after another. ``submitit``
submits each run as a Slurm job (an array job; submitit's ``local`` cluster runs the jobs as
processes on this machine), ``ray`` as a Ray task. Either way the driver first checks the
config (a dry step per variant), prepares ``--out`` and then only watches the run folders (see
:mod:`.monitor`); each job runs :func:`plugdrop.ablate.worker.run_job`, which trains one run into
its folder and resumes from its checkpoint when the job was requeued or retried. A run that is
itself data-parallel (``--nproc-per-run N``) is started through torchrun inside its job.

``--out`` must be on storage that every job can read and write (a shared file system on a
cluster): the run folders are the only channel between the driver and the jobs.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..config import AblationConfig
    from ..runner import Outcome
    from ..runs import RunDir

LAUNCHERS = ("local", "submitit", "ray")

_EXTRA = {"submitit": ("submitit", "slurm"), "ray": ("ray", "ray")}


@dataclass(frozen=True)
class LaunchOptions:
    """The resources and limits of each run's job (the ``--*-per-run`` flags).

    Attributes:
        cpus_per_run: CPUs of each job (also its torch threads); default 1.
        gpus_per_run: GPUs of each job; default 0.
        nproc_per_run: processes per run (torchrun inside the job); default 1.
        max_parallel: at most this many runs at once; default: as many as the cluster takes.
        timeout_min: the time limit of a job (submitit), minutes.
        partition: the Slurm partition (submitit).
        cluster: submitit's cluster: ``None`` picks Slurm when ``sbatch`` is there, else runs
            the jobs as local processes; ``"slurm"`` or ``"local"`` to choose.
        address: the Ray cluster to join (``ray``); default: start one on this machine.
        max_retries: how often a job that died (killed, node lost) is started again; it
            resumes from the run's last checkpoint.
    """

    cpus_per_run: int = 1
    gpus_per_run: int = 0
    nproc_per_run: int = 1
    max_parallel: int | None = None
    timeout_min: int = 24 * 60
    partition: str | None = None
    cluster: str | None = None
    address: str | None = None
    max_retries: int = 3


class Launcher(Protocol):
    """Trains a list of runs elsewhere and records the result in ``outcome``."""

    name: str

    def execute(self, cfg: AblationConfig, out: Path, todo: list[RunDir],
                outcome: Outcome) -> None: ...


def require(name: str) -> None:
    """Fail with the install command when the optional package of launcher ``name`` is
    missing."""
    module, extra = _EXTRA[name]
    if importlib.util.find_spec(module) is None:
        raise ConfigError(f"--launcher {name} needs the {module} package: "
                          f"pip install 'plugdrop[{extra}]'")


def make_launcher(name: str, options: LaunchOptions) -> Launcher | None:
    """The launcher called ``name`` (``None`` for ``local``); fails early (before any data is
    loaded) for a missing extra, a bad option or an unreachable Ray cluster."""
    if name not in LAUNCHERS:
        raise ConfigError(f"--launcher {name!r}: choose one of {', '.join(LAUNCHERS)}")
    for flag, value, low in (("--cpus-per-run", options.cpus_per_run, 1),
                             ("--gpus-per-run", options.gpus_per_run, 0),
                             ("--nproc-per-run", options.nproc_per_run, 1),
                             ("--max-parallel", options.max_parallel or 1, 1),
                             ("--timeout-min", options.timeout_min, 1),
                             ("--max-retries", options.max_retries, 0)):
        if value < low:
            raise ConfigError(f"{flag} {value}: must be at least {low}")
    if name == "local":
        return None
    require(name)
    if name == "submitit":
        from .submitit import SubmititLauncher

        return SubmititLauncher(options)
    from .ray import RayLauncher

    return RayLauncher(options)


def default_parallel(options: LaunchOptions) -> int:
    """Runs at once on this machine when nothing else limits them: CPUs / CPUs per run."""
    return max(1, (os.cpu_count() or 1) // max(1, options.cpus_per_run))


__all__ = ["LAUNCHERS", "LaunchOptions", "Launcher", "make_launcher", "require"]
