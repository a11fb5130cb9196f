"""What ``plugdrop ablate`` and ``plugdrop search`` share: the launcher's flags, the checks
before a study starts, the study run by the driver (:func:`plugdrop.ablate.study.run_study`),
and how it ended said in one line with its exit status.

Exit status: 2 for a mistake in the config, data or folder (one line, before any run trains;
printed by rank 0 under torchrun, whose launcher then adds its own failure report), 74 when a
fault of the environment stopped it (one line with the command that continues; no run is
marked failed), 130 / 143 when SIGINT / SIGTERM stopped it (the command that resumes is
printed); each command says what 0 and 1 mean.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def add_launcher_arguments(p: Any, with_shard: bool) -> None:
    """The flags of ``--launcher`` and its options (declared once, in the launchers' tables)."""
    from ..ablate.launch import LAUNCHERS, options, takers

    g = p.add_argument_group("scaling out (docs: guide/scaling)")
    g.add_argument("--launcher", default="local", metavar="{" + ",".join(LAUNCHERS) + "}",
                   help="where the runs train: " + "; ".join(
                       f"{e.name}: {e.help}" + (f" (pip install 'plugdrop[{e.extra}]')"
                                                if e.extra else "")
                       for e in LAUNCHERS.values()))
    if with_shard:
        g.add_argument("--shard", metavar="I/N",
                       help="train only the I-th of N shares of the runs; shards share --out")
    options.add_arguments(g, takers())


def say(command: str, line: str) -> None:
    print(f"plugdrop {command}: {line}", file=sys.stderr, flush=True)


def run(command: str, args: argparse.Namespace, strategy_for: Callable[[], Any],
        finish: Callable[[argparse.Namespace, Any, Any, Any], int],
        shard: Callable[[], Any] = lambda: None, accept_data_change: bool = False) -> int:
    """Run a study from the command line and return the exit status.

    Args:
        command: ``ablate`` or ``search``.
        args: the parsed arguments (``--resume``, the launcher's flags, ``argv``).
        strategy_for: the study's strategy (its config read and checked); ``None`` when the
            command did what it was asked without a study (``--list``).
        finish: what to print of the outcome, and the exit status: ``finish(args,
            strategy, outcome, d)``.
        shard: ``--shard`` parsed, or ``None``.
    """
    from ..ablate.errors import ConfigError, Exit, Fault, one_line
    from ..ablate.launch import make_launcher, options
    from ..ablate.study import check_command, resume_command, run_study
    from ..ablate.train import resolve_device, setup_distributed, world_from_env

    rank, world = world_from_env()
    d = None
    out: Path | None = None
    try:
        strategy = strategy_for()
        if strategy is None:
            return Exit.OK
        out = strategy.out
        opts = options.from_args(args)
        launcher = make_launcher(args.launcher, opts)
        idle = check_command(strategy.cfg, launcher, opts, world, command)
        if idle is not None and rank == 0:
            say(command, idle)
        cfg = strategy.cfg
        d = setup_distributed(resolve_device(cfg.device, cfg.loc("device")))
        outcome = run_study(strategy, resume=args.resume, d=d, launcher=launcher,
                            options=opts, shard=shard(), accept_data_change=accept_data_change)
    except KeyboardInterrupt:  # before the first run (during the checks): nothing to keep
        if rank == 0:
            say(command, "interrupted before any run trained")
        return Exit.SIGNAL + signal.SIGINT
    except ConfigError as e:
        if rank == 0:
            for line in e.before:
                say(command, one_line(line))
            say(command, one_line(e))
        teardown(d)
        rank0_first(rank, world, d)
        # Under torchrun the launcher adds its failure report after this line: a mistake must
        # not look like success to a script or a scheduler, so the status stays non-zero.
        return Exit.MISTAKE
    except Fault as e:  # nothing more is written: the report would meet the same fault
        if rank == 0:
            again = resume_command(args.argv, out) if out is not None else "--resume"
            fix = f"; {e.fix}" if e.fix else ""
            say(command, f"{one_line(e)}{fix} with: {again}")
        teardown(d)
        rank0_first(rank, world, d)
        return Exit.FAULT
    code = finish(args, strategy, outcome, d)
    if outcome.stopped:
        code = Exit.SIGNAL + outcome.stopped
    teardown(d)
    return code


def stopped_lines(command: str, args: argparse.Namespace, out: Path, outcome: Any,
                  program: bool) -> None:
    """The failed runs (one line each) and, when a signal stopped the study, what was kept
    and the command that resumes it."""
    from ..ablate.study import resume_command

    if outcome.stopped:
        kept = ("interrupted at once; every run kept its last checkpoint"
                if outcome.at_once else
                "stopped; every run kept the step it reached (a checkpoint)")
        if program:
            kept = ("interrupted at once; each program was killed" if outcome.at_once else
                    "stopped; each program was passed the signal (and kept what it "
                    "checkpointed): the resumed runs start it with PLUGDROP_RESUME=1")
        print(f"\nplugdrop {command}: {kept}. Resume with:\n  "
              f"{resume_command(args.argv, out)}", file=sys.stderr, flush=True)


#: how long a rank other than 0 waits before it ends on a mistake or a fault that every rank
#: meets before training (torchrun stops the other ranks when the first one ends)
RANK0_FIRST_S = 10.0


def rank0_first(rank: int, world: int, d: Any) -> None:
    """(Under torchrun, before the ranks joined one process group.) A rank other than 0 waits
    :data:`RANK0_FIRST_S` before it ends, so that rank 0 has said the mistake (the one line)
    when torchrun stops the ranks: the first rank to end decides what torchrun reports, and
    without it a faster rank 1 got rank 0 killed before its line."""
    import time

    if rank != 0 and world > 1 and (d is None or not d.active):
        time.sleep(RANK0_FIRST_S)


def teardown(d: Any) -> None:
    import torch.distributed as dist

    if d is not None and d.active and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()
    sys.stdout.flush()
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        sys.stderr.flush()
