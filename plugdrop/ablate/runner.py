"""The ablation: check everything (a dry step per variant), prepare the output folder, then hand
every run that is not finished yet to a launcher (:mod:`.launch`; here, one after another, by
default).

Rank 0 owns the output folder (lock, markers, metrics, checkpoints, report); under torchrun
every rank trains every run and reads checkpoints to resume.
"""

from __future__ import annotations

import importlib
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from . import config, runs
from .config import AblationConfig
from .data import DataSets
from .errors import ConfigError
from .execute import load_data
from .launch import LaunchContext, LaunchOptions, Launcher, Outcome, drive, make_launcher
from .launch.shard import check_fresh, select
from .progress import Progress
from .train import Dist, agree, dry_run, on_rank0
from .worker import save_config

__all__ = ["Outcome", "resume_command", "run_ablation", "versions"]


def versions() -> dict[str, str]:
    """The versions of Python and of the packages a result depends on."""
    out = {"python": sys.version.split()[0], "torch": torch.__version__}
    for name in ("plugdrop", "timm", "torchvision", "numpy"):
        try:
            out[name] = importlib.import_module(name).__version__
        except Exception:  # pragma: no cover - optional
            pass
    return out


def resume_command(argv: Sequence[str], out: Path) -> str:
    """The command line that continues this ablation."""
    args = [a for a in argv if a != "--resume"]
    if "--out" not in args and not any(a.startswith("--out=") for a in args):
        args += ["--out", str(out)]
    return shlex.join(["plugdrop", *args, "--resume"])


def _manifest(cfg: AblationConfig, data: DataSets, d: Dist) -> dict[str, Any]:
    return {"format": runs.FORMAT, "config": cfg.resolved(), "config_hash": cfg.hash(),
            "variants": cfg.variant_names, "baseline": cfg.baseline,
            "seeds": list(cfg.seeds),
            "runs": [{"id": runs.run_id(v, s), "variant": v, "seed": s} for v, s in cfg.runs()],
            "versions": versions(),
            "data": {"name": data.name, "train": len(data.train),  # type: ignore[arg-type]
                     "val": len(data.val), "classes": list(data.classes),  # type: ignore[arg-type]
                     "world_size": d.world}}


def _claim_folder(cfg: AblationConfig, out: Path, lock: runs.Lock, manifest: dict[str, Any],
                  resume: bool, shard: tuple[int, int] | None) -> None:
    """Lock ``out`` and write ``ablation.json`` and the config the jobs read, or refuse the
    folder (runs of another config, runs without ``--resume``, another ablation in it)."""
    runs.check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    lock.acquire()
    try:
        with runs.claiming(out):
            if shard is not None:
                check_fresh(out, cfg, shard, resume)
            runs.prepare(out, manifest, resume or shard is not None, config.unhashed())
            save_config(out, cfg)
    except ConfigError:
        lock.release()
        raise


def run_ablation(cfg: AblationConfig, *, out: Path, resume: bool, d: Dist,
                 argv: Sequence[str], data: DataSets | None = None,
                 progress: Progress | None = None, shard: tuple[int, int] | None = None,
                 launcher: Launcher | None = None, options: LaunchOptions | None = None
                 ) -> Outcome:
    """Check, then train every unfinished run of ``cfg`` into ``out``.

    Args:
        shard: ``(i, n)``: train only the i-th of n shares of the runs (see
            :mod:`plugdrop.ablate.launch.shard`); shards share ``out``.
        launcher: where the runs train (:func:`plugdrop.ablate.launch.make_launcher`);
            default: here, one after another.
        options: the launcher's options (retries among them).
    """
    options = options or LaunchOptions()
    if data is None:
        data = agree(d, lambda: load_data(cfg))
    agree(d, lambda: dry_run(cfg, data, d))
    lock = runs.Lock(out, shared=shard is not None)
    manifest = _manifest(cfg, data, d)
    on_rank0(d, lambda: _claim_folder(cfg, out, lock, manifest, resume, shard))
    outcome = Outcome()
    mine = cfg.runs() if shard is None else select(cfg.runs(), *shard)
    todo = []
    for v, s in mine:
        rd = runs.RunDir(out, v, s)
        if on_rank0(d, lambda rd=rd: rd.status) == runs.FINISHED:  # type: ignore[misc]
            outcome.skipped.append(rd.id)
        else:
            todo.append(rd)
    launcher = launcher or make_launcher("local", options)
    progress = progress or Progress(len(todo), d.main)
    if d.main:
        rank_note = f" x {d.world} processes" if d.active else ""
        n_train, n_val = len(data.train), len(data.val)  # type: ignore[arg-type]
        print(f"plugdrop ablate: {cfg.model} on {data.name} ({n_train} train / "
              f"{n_val} val, {len(data.classes)} classes, {cfg.image_size}px), "
              f"{len(cfg.variants)} variants x {len(cfg.seeds)} seeds x {cfg.epochs} epochs on "
              f"{d.device}{rank_note}; {len(todo)} runs to train"
              + (f", {len(outcome.skipped)} finished already" if outcome.skipped else "")
              + (f" (shard {shard[0]}/{shard[1]})" if shard else "")
              + (f" through {launcher.name}" if launcher.name != "local" else ""),
              flush=True)
    try:
        drive(launcher, LaunchContext(cfg, out, d, data, progress, options), todo, outcome)
    finally:
        if d.main:
            lock.release()
    return outcome
