"""The ``plugdrop`` command: ``plugdrop layers`` and ``plugdrop ablate``.

    plugdrop layers resnet18 --input-size 3 32 32 --match "layer3.*"
    plugdrop ablate examples/digits.yaml --out runs/digits --epochs 5 --seeds 0 1
    torchrun --nproc_per_node 2 -m plugdrop ablate examples/digits.yaml

``python -m plugdrop`` is the same command.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

__all__ = ["main"]


def _layers(args: argparse.Namespace) -> int:
    import plugdrop as pd

    from ._ablate_config import ConfigError
    from ._ablate_train import create_model

    try:
        model = create_model(args.model)
    except ConfigError as e:
        print(f"plugdrop layers: {e}", file=sys.stderr)
        return 2
    c, h, w = args.input_size
    try:
        table = pd.layers(model, torch.zeros(1, c, h, w), selector=args.match,
                          max_depth=args.depth)
    except ValueError as e:
        print(f"plugdrop layers: {e}", file=sys.stderr)
        return 2
    title = f"{args.model}: {len(table)} modules, input (1, {c}, {h}, {w})"
    if args.match:
        title += f"; * = picked by {args.match!r} ({sum(r.picked for r in table)})"
    table.title = title
    print(table)
    return 0


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"plugdrop ablate: --set takes KEY=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    for key in ("out", "epochs", "device", "batch_size", "lr"):
        value = getattr(args, key)
        if value is not None:
            out[key] = value
    if args.seeds is not None:
        out["seeds"] = args.seeds
    return out


class _Progress:
    """tqdm bars for runs, epochs and batches on a terminal; one line per epoch otherwise."""

    def __init__(self, total_runs: int, enabled: bool):
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty()
        self.runs = self.epochs = self.batches = None
        if self.tty:
            from tqdm import tqdm

            self.tqdm = tqdm
            self.runs = tqdm(total=total_runs, desc="runs", position=0)

    def start(self, variant: str, seed: int, epochs: int) -> None:
        self.variant, self.seed = variant, seed
        if self.tty:
            self.epochs = self.tqdm(total=epochs, desc=f"{variant} seed {seed}", position=1,
                                    leave=False)

    def __call__(self, kind: str, i: int, n: int, record=None) -> None:
        if kind == "epoch" and record is not None:
            self.epoch(record)
        if not self.tty:
            return
        if kind == "batch":
            if self.batches is None or i == 1:
                if self.batches is not None:
                    self.batches.close()
                self.batches = self.tqdm(total=n, desc="batches", position=2, leave=False)
            self.batches.update(1)
        elif kind == "epoch":
            self.epochs.update(1)

    def epoch(self, r) -> None:
        if not self.enabled:
            return
        line = (f"[{r.variant} seed={r.seed}] epoch {r.epoch}: train loss {r.train_loss:.4f}  "
                f"val loss {r.val_loss:.4f}  val acc {100 * r.val_acc:.2f}%  "
                f"({r.epoch_time:.1f}s)")
        if self.tty:
            self.epochs.set_postfix_str(f"val acc {100 * r.val_acc:.1f}%")
        else:
            print(line, flush=True)

    def end(self) -> None:
        if self.tty:
            for bar in (self.batches, self.epochs):
                if bar is not None:
                    bar.close()
            self.batches = self.epochs = None
            self.runs.update(1)

    def close(self) -> None:
        if self.tty and self.runs is not None:
            self.runs.close()


def _ablate(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    from . import _ablate_config, _ablate_data, _ablate_report, _ablate_train

    try:
        cfg = _ablate_config.load(args.config, _overrides(args))
        d = _ablate_train.setup_distributed(cfg.device)
        data = _ablate_data.load(cfg.data, cfg.image_size, cfg.val_fraction)
        _ablate_train.check_selectors(cfg, data.num_classes)
    except (_ablate_config.ConfigError, ValueError) as e:
        print(f"plugdrop ablate: {e}", file=sys.stderr)
        return 2
    variants = list(cfg.variants)
    runs = [(v, s) for v in variants for s in cfg.seeds]
    if d.main:
        print(f"plugdrop ablate: {cfg.model} on {data.name} ({len(data.x_train)} train / "
              f"{len(data.x_val)} val, {data.num_classes} classes, {cfg.image_size}px), "
              f"{len(variants)} variants x {len(cfg.seeds)} seeds x {cfg.epochs} epochs on "
              f"{d.device}" + (f" x {d.world} processes" if d.active else ""), flush=True)
    progress = _Progress(len(runs), d.main)
    records = []
    start = time.perf_counter()
    try:
        for variant, seed in runs:
            progress.start(variant, seed, cfg.epochs)
            records += _ablate_train.train_run(cfg, variant, seed, data, d, progress,
                                               out_dir=cfg.out)
            progress.end()
    finally:
        progress.close()
    if d.main:
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        summary = _ablate_report.summarize(records, variants, cfg.baseline)
        _ablate_report.write_csv(out / "results.csv", records)
        _ablate_report.write_json(
            out / "results.json", records, summary, cfg.resolved(), _ablate_train.versions(),
            {"name": data.name, "train": len(data.x_train), "val": len(data.x_val),
             "classes": data.classes, "world_size": d.world})
        plots = _ablate_report.plot(out, records, summary, variants)
        plots += sorted(out.glob("gradcam_*.png"))
        print()
        print(_ablate_report.table(summary, cfg.baseline))
        print(f"\n{len(runs)} runs in {time.perf_counter() - start:.0f}s. Written: "
              + ", ".join(str(p) for p in [out / "results.csv", out / "results.json", *plots]))
    if d.active:
        dist.barrier()
        dist.destroy_process_group()
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="plugdrop", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    lp = sub.add_parser("layers", help="the module tree of a model, with output shapes, and "
                                       "what a selector picks")
    lp.add_argument("model", help="a timm model name (pretrained=False) or package.module:factory")
    lp.add_argument("--input-size", nargs=3, type=int, default=(3, 224, 224),
                    metavar=("C", "H", "W"), help="input of the dry forward (default 3 224 224)")
    lp.add_argument("--match", help="a selector: modules it picks are marked with *")
    lp.add_argument("--depth", type=int, help="show modules down to this depth only")
    lp.set_defaults(func=_layers)
    ap = sub.add_parser("ablate", help="train every variant x seed of a YAML config and "
                                       "compare them")
    ap.add_argument("config", help="the YAML config (see examples/digits.yaml)")
    ap.add_argument("--out", help="output directory (config key: out)")
    ap.add_argument("--epochs", type=int, help="epochs per run (config key: epochs)")
    ap.add_argument("--seeds", type=int, nargs="+", help="seeds (config key: seeds)")
    ap.add_argument("--device", help="auto, cpu, cuda or cuda:N (config key: device)")
    ap.add_argument("--batch-size", type=int, help="(config key: batch_size)")
    ap.add_argument("--lr", type=float, help="(config key: lr)")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="override any config key, e.g. --set image_size=24 (repeatable)")
    ap.set_defaults(func=_ablate)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
