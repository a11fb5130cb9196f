"""Where the runs of an ablation train: ``--launcher local | submitit | ray`` and ``--shard``.

Every launcher is driven by one loop (:mod:`.driver`: the queue, the jobs at once, retries, the
runs another process trains, the report) and implements the small :class:`~.protocol.Launcher`
protocol: start jobs, say how each ended. ``local`` (the default, :mod:`.local`) trains the runs
in this process, one after another; ``submitit`` (:mod:`.submitit`) submits each run as a Slurm
job (submitit's ``local`` cluster runs the jobs as processes on this machine), ``ray``
(:mod:`.ray`) as a Ray task. Every job runs :func:`plugdrop.ablate.worker.run_job`, which trains
one run into its folder and resumes from its checkpoint when the job was requeued or retried. A
run that is itself data-parallel (``--nproc-per-run N``) is started through torchrun inside its
job. The launchers are listed in :mod:`.registry`, their options declared once in
:mod:`.options`; ``--shard`` (:mod:`.shard`) splits the runs between invocations.

``--out`` must be on storage that every job can read and write (a shared file system on a
cluster): the run folders are the only channel between the driver and the jobs.
"""

from .driver import Outcome, drive
from .options import LaunchOptions
from .protocol import Job, JobEnd, LaunchContext, Launcher, View
from .registry import LAUNCHERS, make_launcher, require, takers

__all__ = ["LAUNCHERS", "Job", "JobEnd", "LaunchContext", "LaunchOptions", "Launcher",
           "Outcome", "View", "drive", "make_launcher", "require", "takers"]
