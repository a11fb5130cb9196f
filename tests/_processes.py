"""The processes the tests start, forked from the warm server of ``--launcher processes``
(:mod:`plugdrop.ablate.launch.warm`: a process that imported torch, timm and plugdrop once) where
the platform has one, instead of fresh interpreters that spend seconds of CPU importing them
(the suite runs on 2 cores). ``PLUGDROP_WARM_START=0`` (or a platform without ``forkserver``)
starts fresh interpreters again.

The server is one per test process: whichever test starts it first (an ablation's driver, a
DDP test's ranks) has it import :data:`DRIVER` too, so that every later fork finds them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: what a driver (``python -m plugdrop ...``) imports beyond a job's
DRIVER = ["plugdrop.cli", "plugdrop.cli.ablate", "plugdrop.ablate.report",
          "plugdrop.ablate.study", "plugdrop.ablate.search"]


def warm() -> Any:
    """:mod:`plugdrop.ablate.launch.warm` with :data:`DRIVER` preloaded, or ``None`` where
    jobs start fresh interpreters."""
    from plugdrop.ablate.launch import warm

    warm.preload(*DRIVER)
    return warm if warm.enabled() else None


def spawn(fn: Callable[..., None], args: tuple, nprocs: int = 2) -> None:
    """``torch.multiprocessing.spawn(fn, args, nprocs)`` (each process is called
    ``fn(rank, *args)``; raises when one fails), the processes forked from the warm
    server."""
    import multiprocessing

    import torch.multiprocessing as mp

    server = warm()
    if server is None:
        mp.spawn(fn, args=args, nprocs=nprocs, join=True)
        return
    # the preloads set before the server starts, whoever starts it (one server per process)
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(server.PRELOAD))
    mp.start_processes(fn, args=args, nprocs=nprocs, join=True, start_method="forkserver")
