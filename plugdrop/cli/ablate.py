"""``plugdrop ablate CONFIG``: train every variant x seed of a YAML config into run folders.

Exit status: 0 when every run finished, 1 when a run failed (the others still trained),
2 for a mistake in the config, data or output folder (one line, before any training, printed
once by rank 0 under torchrun, whose launcher then adds its own failure report),
130 / 143 when SIGINT / SIGTERM stopped it (the command that resumes is printed).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("ablate", help="train every variant x seed of a YAML config and "
                                      "compare them")
    p.add_argument("config", help="the YAML config (see examples/digits.yaml)")
    p.add_argument("--out", help="output folder (config key: out)")
    p.add_argument("--resume", action="store_true",
                   help="continue the ablation in --out: skip finished runs, continue "
                        "unfinished ones from their last checkpoint")
    p.add_argument("--list", action="store_true",
                   help="print the runs (variant x seed, grids expanded) and exit")
    p.add_argument("--epochs", type=int, help="epochs per run (config key: epochs)")
    p.add_argument("--seeds", type=int, nargs="+", help="seeds (config key: seeds)")
    p.add_argument("--device", help="auto, cpu, cuda or cuda:N (config key: device)")
    p.add_argument("--batch-size", type=int,
                   help="the global batch per optimizer step (config key: batch_size)")
    p.add_argument("--lr", type=float, help="(config key: lr)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                   help="override any setting, nested ones too: --set image_size=24, "
                        "--set variants.dropblock.0.p=0.2 (repeatable)")
    p.set_defaults(func=run)


def _overrides(args: argparse.Namespace) -> list[Any]:
    from ..ablate.config import flag, parse_overrides

    out = parse_overrides(args.set)
    for name, key in (("--out", "out"), ("--epochs", "epochs"), ("--device", "device"),
                      ("--batch-size", "batch_size"), ("--lr", "lr"), ("--seeds", "seeds")):
        value = getattr(args, key)
        if value is not None:
            out.append(flag(name, key, value))
    return out


def run(args: argparse.Namespace) -> int:
    from ..ablate import config, runs
    from ..ablate.errors import ConfigError
    from ..ablate.runner import resume_command, run_ablation, write_report
    from ..ablate.train import per_process_batch, resolve_device, setup_distributed, \
        world_from_env

    rank, world = world_from_env()
    d = None
    try:
        cfg = config.load(args.config, _overrides(args))
        if args.list:
            if rank == 0:
                for v, s in cfg.runs():
                    print(f"{v}  seed={s}")
            return 0
        out = Path(cfg.out)
        runs.check_out(out)
        per_process_batch(cfg, world)
        d = setup_distributed(resolve_device(cfg.device, cfg.loc("device")))
        outcome = run_ablation(cfg, out=out, resume=args.resume, d=d, argv=args.argv)
    except KeyboardInterrupt:  # before the first run (during the checks): nothing to keep
        if rank == 0:
            print("plugdrop ablate: interrupted before any run trained", file=sys.stderr,
                  flush=True)
        return 130
    except ConfigError as e:
        if rank == 0:
            print(f"plugdrop ablate: {e}", file=sys.stderr, flush=True)
        _teardown(d)
        # Under torchrun the launcher adds its failure report after this line: a mistake must
        # not look like success to a script or a scheduler, so the status stays non-zero.
        return 2
    code = 0
    if d.main:
        from ..ablate.progress import Progress

        rep = write_report(out, Progress(0, False))
        if rep is not None:
            print()
            print(rep.table)
            print(f"\n{rep.finished} runs finished, {rep.failed} failed, {rep.incomplete} "
                  f"incomplete. Written: {', '.join(str(p) for p in rep.files)}")
        for rid in outcome.failed:
            failed = out / "runs" / rid / "failed.json"
            print(f"plugdrop ablate: run {rid} failed; see {failed}", file=sys.stderr)
        if outcome.stopped:
            print(f"\nplugdrop ablate: stopped; finished epochs are kept. Resume with:\n  "
                  f"{resume_command(args.argv, out)}", file=sys.stderr, flush=True)
    if outcome.stopped:
        code = 128 + outcome.stopped
    elif outcome.failed:
        code = 1
    _teardown(d)
    return code


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
