"""``plugdrop ablate CONFIG``: train every variant x seed of a YAML config into run folders.

Exit status: 0 when every run finished, 1 when a run failed (the others still trained),
2 for a mistake in the config, data or output folder (one line, before any training, printed
once by rank 0 under torchrun, whose launcher then adds its own failure report),
74 when a fault of the environment stopped it (a full disk, a read-only folder, data that
vanished: one line with the command that continues; no run is marked failed),
130 / 143 when SIGINT / SIGTERM stopped it (the command that resumes is printed).

The flags of settings (``--epochs``...) come from the runner's settings table, those of the
launchers (``--cpus-per-run``...) from their options table: both are declared once.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    from ..ablate import config
    from ..ablate.launch import LAUNCHERS, options, takers

    p = sub.add_parser("ablate", help="train every variant x seed of a YAML config and "
                                      "compare them")
    p.add_argument("config", nargs="?", help="the YAML config (see examples/digits.yaml)")
    p.add_argument("--resume", action="store_true",
                   help="continue the ablation in --out: skip finished runs, continue "
                        "unfinished ones from their last checkpoint")
    p.add_argument("--accept-data-change", action="store_true",
                   help="with --resume: go on although the data folder's files changed since "
                        "the ablation started (another split than its finished runs had)")
    p.add_argument("--list", action="store_true",
                   help="print the runs (variant x seed, grids expanded) and the config's hash "
                        "(on stderr), and exit")
    p.add_argument("--settings", action="store_true",
                   help="print the reference of every setting (defaults, flags) and exit")
    for name, s in config.settings().items():
        if s.flag is not None:
            p.add_argument(config.flag_name(name), type=s.flag, nargs="+" if s.many else None,
                           help=f"{_plain(s.help)} (config key: {name})")
        for sub in s.subflags:
            p.add_argument(config.flag_name(f"{name}_{sub}"), type=int, metavar="N",
                           help=f"(config key: {name}.{sub})")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                   help="override any setting, nested ones too: --set image_size=24, "
                        "--set variants.dropblock.0.p=0.2 (repeatable)")
    g = p.add_argument_group("scaling out (docs: guide/scaling)")
    g.add_argument("--launcher", default="local", metavar="{" + ",".join(LAUNCHERS) + "}",
                   help="where the runs train: " + "; ".join(
                       f"{e.name}: {e.help}" + (f" (pip install 'plugdrop[{e.extra}]')"
                                                if e.extra else "")
                       for e in LAUNCHERS.values()))
    g.add_argument("--shard", metavar="I/N",
                   help="train only the I-th of N shares of the runs; shards share --out")
    options.add_arguments(g, takers())
    p.set_defaults(func=run)


def _plain(text: str) -> str:
    """Help text without its Markdown marks (the settings page of the docs keeps them)."""
    return text.replace("`", "").replace("**", "")


def _overrides(args: argparse.Namespace) -> list[Any]:
    from ..ablate import config

    out = config.parse_overrides(args.set)
    for name, s in config.settings().items():
        if s.flag is not None:
            value = getattr(args, name)
            if value is not None:
                out.append(config.flag(config.flag_name(name), name, value))
        for sub in s.subflags:
            value = getattr(args, f"{name}_{sub}")
            if value is not None:
                out.append(config.flag(config.flag_name(f"{name}_{sub}"), f"{name}.{sub}",
                                       value))
    return out


def run(args: argparse.Namespace) -> int:
    from ..ablate import config, runs
    from ..ablate.errors import ConfigError, Exit, Fault
    from ..ablate.launch import gpus_for_jobs, make_launcher, options
    from ..ablate.report import Rebuilder
    from ..ablate.runner import resume_command, run_ablation
    from ..ablate.train import resolve_device, setup_distributed, world_from_env

    if args.settings:
        print(config.reference())
        return 0
    rank, world = world_from_env()
    d = None
    out: Path | None = None
    try:
        if args.config is None:
            raise ConfigError("give the YAML config: plugdrop ablate CONFIG (e.g. "
                              "examples/digits.yaml)")
        cfg = config.load(args.config, _overrides(args))
        if args.list:
            if rank == 0:
                for v, s in cfg.runs():
                    print(f"{v}  seed={s}")
                print(f"config hash: {cfg.hash()} (what a worker started by hand takes as "
                      f"--config-hash)", file=sys.stderr)
            return 0
        out = Path(cfg.out)
        runs.check_out(out)
        shard = None
        if args.shard is not None:
            from ..ablate.launch.shard import parse_shard

            shard = parse_shard(args.shard)
        opts = options.from_args(args)
        launcher = make_launcher(args.launcher, opts)
        if launcher.name != "local" and world > 1:
            raise ConfigError(f"--launcher {args.launcher}: start plugdrop ablate itself "
                              f"without torchrun; --nproc-per-run N runs torchrun inside "
                              f"each job")
        idle = gpus_for_jobs(cfg, launcher.name, opts)
        if idle is not None and rank == 0:
            print(f"plugdrop ablate: {idle}", file=sys.stderr, flush=True)
        if cfg.program is not None:
            _check_program(cfg, world, opts.nproc_per_run)
        else:
            config.batch_per_process(cfg, max(world, opts.nproc_per_run))
        d = setup_distributed(resolve_device(cfg.device, cfg.loc("device")))
        outcome = run_ablation(cfg, out=out, resume=args.resume, d=d, argv=args.argv,
                               shard=shard, launcher=launcher, options=opts,
                               accept_data_change=args.accept_data_change)
    except KeyboardInterrupt:  # before the first run (during the checks): nothing to keep
        if rank == 0:
            print("plugdrop ablate: interrupted before any run trained", file=sys.stderr,
                  flush=True)
        return Exit.SIGNAL + signal.SIGINT
    except ConfigError as e:
        if rank == 0:
            print(f"plugdrop ablate: {e}", file=sys.stderr, flush=True)
        _teardown(d)
        # Under torchrun the launcher adds its failure report after this line: a mistake must
        # not look like success to a script or a scheduler, so the status stays non-zero.
        return Exit.MISTAKE
    except Fault as e:  # nothing more is written: the report would meet the same fault
        if rank == 0:
            again = resume_command(args.argv, out) if out is not None else "--resume"
            fix = f"; {e.fix}" if e.fix else ""
            print(f"plugdrop ablate: {e}{fix} with: {again}", file=sys.stderr, flush=True)
        _teardown(d)
        return Exit.FAULT
    code: int = Exit.OK
    if d.main:
        try:
            rep = Rebuilder(out, lambda m: print(m, file=sys.stderr, flush=True),
                            plots=cfg.plots)(final=True)
        except Fault as e:  # every run ended; only the report could not be written
            print(f"plugdrop ablate: {e}; make room, then write it with: plugdrop report "
                  f"{out}", file=sys.stderr, flush=True)
            rep, code = None, Exit.FAULT
        if rep is not None:
            print()
            print(rep.table)
            print(f"\n{rep.finished} runs finished, {rep.failed} failed, {rep.incomplete} "
                  f"incomplete. Written: {', '.join(str(p) for p in rep.files)}")
        for rid in outcome.failed:
            failed = out / "runs" / rid / "failed.json"
            print(f"plugdrop ablate: run {rid} failed; see {failed}", file=sys.stderr)
        if outcome.stopped:
            kept = ("interrupted at once; every run kept its last checkpoint"
                    if outcome.at_once else
                    "stopped; every run kept the step it reached (a checkpoint)")
            if cfg.program is not None:
                kept = ("interrupted at once; each program was killed" if outcome.at_once else
                        "stopped; each program was passed the signal (and kept what it "
                        "checkpointed): the resumed runs start it with PLUGDROP_RESUME=1")
            print(f"\nplugdrop ablate: {kept}. Resume with:\n  "
                  f"{resume_command(args.argv, out)}", file=sys.stderr, flush=True)
    if outcome.stopped:
        code = Exit.SIGNAL + outcome.stopped
    elif outcome.failed and code == Exit.OK:
        code = Exit.FAILED
    _teardown(d)
    return code


def _check_program(cfg: Any, world: int, nproc: int) -> None:
    """A ``program:`` starts its own processes: refuse torchrun around plugdrop ablate and
    ``--nproc-per-run``, naming what to write instead."""
    from ..ablate.errors import ConfigError

    if world > 1 or nproc > 1:
        how = "torchrun around plugdrop ablate" if world > 1 else f"--nproc-per-run {nproc}"
        raise ConfigError(f"{how}: with program:, the program starts its own processes: run "
                          f"plugdrop ablate alone and write them into the program (program: "
                          f"torchrun --standalone --nproc_per_node {max(world, nproc)} "
                          f"train.py ...)")


def _teardown(d: Any) -> None:
    import torch.distributed as dist

    if d is not None and d.active and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()
    sys.stdout.flush()
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        sys.stderr.flush()
