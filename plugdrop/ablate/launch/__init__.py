"""Where the runs of a study train: ``--launcher NAME`` and ``--shard``.

Every launcher is driven by the study driver's one loop (:mod:`plugdrop.ablate.study.jobs`:
the queue, the jobs at once, retries, the runs another process trains) and implements the small
:class:`~.protocol.Launcher` protocol: start jobs, say how each ended. The launchers are the
entries of :mod:`.registry`, one module each (``local``, the default, trains the runs in this
process, one after another); their options are declared once in :mod:`.options`. Every job but
the local launcher's executes one attempt of a run through :mod:`plugdrop.ablate.worker`
(handed the config, or ``python -m plugdrop.ablate.worker`` reading it), which trains the run
into its folder and resumes from its checkpoint when the job was requeued or retried; a run
that is itself data-parallel (``--nproc-per-run N``) is started through torchrun inside its
job.
``--shard`` (:mod:`.shard`) splits the runs between invocations.

``--out`` must be on storage that every job can read and write (a shared file system on a
cluster): the run folders are the only channel between the driver and the jobs.
"""

from .options import LaunchOptions
from .protocol import Ending, Job, JobEnd, LaunchContext, Launcher, View
from .registry import LAUNCHERS, gpus_for_jobs, make_launcher, require, takers

__all__ = ["LAUNCHERS", "Ending", "Job", "JobEnd", "LaunchContext", "LaunchOptions", "Launcher",
           "View", "gpus_for_jobs", "make_launcher", "require", "takers"]
