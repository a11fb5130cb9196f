"""What ``plugdrop ablate`` and ``plugdrop search`` check alike before a study starts (torchrun
around a launcher, a ``program:`` with processes of its own, the batch per process, GPUs left
idle), the strategy of an ablation's config, and the command line that continues a study."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from .. import config
from ..config import AblationConfig
from ..errors import ConfigError
from ..launch import LaunchOptions, Launcher, gpus_for_jobs
from .adaptive import Adaptive
from .grid import Grid
from .strategy import Strategy

__all__ = ["check_command", "resume_command", "strategy_of"]


def check_command(cfg: AblationConfig, launcher: Launcher, options: LaunchOptions,
                  world: int, command: str = "ablate") -> str | None:
    """Refuse what cannot run (one line each): torchrun around a launcher that starts jobs
    of its own, torchrun or ``--nproc-per-run`` with a ``program:`` (it starts its own
    processes), a batch that the processes cannot share. Returns a line to show about GPUs
    the jobs would leave idle, or ``None``.

    Args:
        world: the processes torchrun started this command in (1 without torchrun).
        command: ``ablate`` or ``search``, for the messages.
    """
    if launcher.name != "local" and world > 1:
        raise ConfigError(f"--launcher {launcher.name}: start plugdrop {command} itself "
                          f"without torchrun; --nproc-per-run N runs torchrun inside each job")
    if cfg.program is not None:
        nproc = options.nproc_per_run
        if world > 1 or nproc > 1:
            how = (f"torchrun around plugdrop {command}" if world > 1
                   else f"--nproc-per-run {nproc}")
            raise ConfigError(f"{how}: with program:, the program starts its own processes: "
                              f"run plugdrop {command} alone and write them into the program "
                              f"(program: torchrun --standalone --nproc_per_node "
                              f"{max(world, nproc)} train.py ...)")
        at_once = 1 if launcher.name == "local" else options.max_parallel
        if cfg.workdir == "start" and at_once != 1:
            raise ConfigError(f"--launcher {launcher.name} runs several runs at once, and every "
                              f"run's program runs in {cfg.cwd} (workdir: start): what one "
                              f"writes there by a relative path, another overwrites; set "
                              f"workdir: run (each run in its own folder, OUT/runs/<run>/work) "
                              f"or workdir: shared (the program writes only under {{run_dir}}), "
                              f"or --max-parallel 1")
    else:
        config.batch_per_process(cfg, max(world, options.nproc_per_run))
    return gpus_for_jobs(cfg, launcher.name, options)


def strategy_of(cfg: AblationConfig, out: Path, shard: tuple[int, int] | None = None
                ) -> Strategy:
    """The strategy of an ablation's config: the adaptive design for ``seeds: {min, max}``,
    else the grid of every variant x seed (of one ``--shard``).

    Raises:
        ConfigError: ``--shard`` with an adaptive design (which decides between rounds).
    """
    if shard is not None:
        config.check_shard(cfg, shard)
    if cfg.adaptive:
        return Adaptive(cfg, out)
    return Grid(cfg, out, shard)


def resume_command(argv: Sequence[str], out: Path) -> str:
    """The command line that continues this study (``argv``: its arguments after
    ``plugdrop``)."""
    args = [a for a in argv if a != "--resume"]
    if "--out" not in args and not any(a.startswith("--out=") for a in args):
        args += ["--out", str(out)]
    return shlex.join(["plugdrop", *args, "--resume"])
