"""The ablation loop: check everything (a dry step per variant), then train every run that is
not finished yet into its folder, rebuilding the report after each.

Rank 0 owns the output folder (lock, markers, metrics, checkpoints, report); under torchrun
every rank trains every run and reads checkpoints to resume.
"""

from __future__ import annotations

import shlex
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from . import logging as run_logging
from . import runs
from .config import AblationConfig
from .data import DataSets, build_datasets, default_workers, parse_data_spec
from .errors import ConfigError
from .progress import Progress
from .train import Dist, StopFlag, Stopped, Trainer, locate, save_gradcam

T = TypeVar("T")


def on_rank0(d: Dist, fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 and give every rank its result, or raise its ConfigError
    everywhere (so that all processes stop together and only rank 0 prints)."""
    result: Any = None
    error: str | None = None
    if d.main:
        try:
            result = fn()
        except ConfigError as e:
            error = str(e)
    if d.active:
        box = [result, error]
        dist.broadcast_object_list(box, src=0)
        result, error = box
    if error is not None:
        raise ConfigError(error)
    return result


def agree(d: Dist, fn: Callable[[], T]) -> T:
    """Run ``fn`` on every rank; if any rank raises a ConfigError, every rank raises the
    first such message."""
    result: Any = None
    error: str | None = None
    try:
        result = fn()
    except ConfigError as e:
        error = str(e)
    if d.active:
        errors: list[Any] = [None] * d.world
        dist.all_gather_object(errors, error)
        error = next((e for e in errors if e), None)
    if error is not None:
        raise ConfigError(error)
    return result


def versions() -> dict[str, str]:
    import importlib

    out = {"python": sys.version.split()[0], "torch": torch.__version__}
    for name in ("plugdrop", "timm", "torchvision", "numpy"):
        try:
            out[name] = importlib.import_module(name).__version__
        except Exception:  # pragma: no cover - optional
            pass
    return out


def load_data(cfg: AblationConfig) -> DataSets:
    """The config's data sets (normalization from the model's pretrained config)."""
    try:
        return build_datasets(parse_data_spec(cfg.data), image_size=cfg.image_size,
                              val_fraction=cfg.val_fraction, augment=cfg.augment,
                              model=None if ":" in cfg.model else cfg.model,
                              bad_images=cfg.bad_images)
    except ConfigError as e:
        raise ConfigError(locate(cfg, " ".join(str(e).split()), "data")) from None


def workers_for(cfg: AblationConfig, data: DataSets) -> int:
    if data.in_memory:
        return 0
    return default_workers() if cfg.workers == "auto" else int(cfg.workers)


def dry_run(cfg: AblationConfig, data: DataSets, d: Dist) -> None:
    """One dry training step per variant, before any run trains: everything a config can
    get wrong fails in the first seconds (and the kernels warm up outside the timed runs)."""
    run_logging.check(cfg.log)
    for variant in cfg.variants:
        trainer = Trainer.create(cfg, variant, cfg.seeds[0], data, d, 0, ddp=False)
        try:
            trainer.dry_step()
            if isinstance(cfg.gradcam, dict) and cfg.gradcam.get("layer", "auto") != "auto":
                import plugdrop as pd

                try:
                    pd.select(trainer.model, cfg.gradcam["layer"])
                except ValueError as e:
                    raise ConfigError(f"{cfg.loc('gradcam')}: gradcam layer: "
                                      f"{' '.join(str(e).split())}") from None
        finally:
            trainer.close()


def resume_command(argv: Sequence[str], out: Path) -> str:
    """The command line that continues this ablation."""
    args = [a for a in argv if a != "--resume"]
    if "--out" not in args and not any(a.startswith("--out=") for a in args):
        args += ["--out", str(out)]
    return shlex.join(["plugdrop", *args, "--resume"])


@dataclass
class Outcome:
    finished: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    stopped: int = 0  # the signal that stopped the ablation, or 0


_PLOT_EVERY_S = 60.0
_last_plots = [0.0]


def write_report(out: Path, progress: Progress, final: bool = True) -> Any:
    """Rebuild the summary files; during an ablation the plots at most once a minute (the
    table, CSV and JSON after every run), at the end always."""
    from .report import write_report as _write

    plots = final or time.monotonic() - _last_plots[0] >= _PLOT_EVERY_S
    try:
        rep = _write(out, plots=plots)
        if plots:
            _last_plots[0] = time.monotonic()
        return rep
    except Exception as e:  # the report must never lose the runs
        progress.message(f"plugdrop ablate: could not write the report: {e}")
        return None


def train_run(cfg: AblationConfig, rd: runs.RunDir, data: DataSets, d: Dist, workers: int,
              resume: bool, stop: StopFlag, progress: Progress) -> None:
    """Train one run to the end (or resume it from its checkpoint)."""
    variant = cfg.variant(rd.variant)
    trainer = Trainer.create(cfg, variant, rd.seed, data, d, workers)
    try:
        start_epoch = 1
        ckpt = rd.checkpoint if resume and rd.checkpoint.exists() else None
        if ckpt is not None:
            state = torch.load(ckpt, map_location=d.device, weights_only=False)
            trainer.load_state_dict(state)
            start_epoch = trainer.epoch + 1
        if d.main:
            rd.start({"id": rd.id, "variant": rd.variant, "seed": rd.seed,
                      "attachments": [a.describe() for a in variant.attachments],
                      "grid": dict(variant.grid), "config_hash": cfg.hash()},
                     fresh=ckpt is None)
            if ckpt is not None:
                rd.truncate_metrics(trainer.epoch)
        logger = run_logging.RunLogger(cfg.log, rd.path, rd.id, start_epoch,
                                       cfg.resolved()) if d.main and cfg.log else None
        progress.run_start(rd.variant, rd.seed, cfg.epochs, trainer.steps_per_epoch,
                           start_epoch)
        t0 = time.perf_counter()
        try:
            for _ in range(start_epoch, cfg.epochs + 1):
                record = trainer.train_epoch(stop, progress.batch)
                state = trainer.state_dict()  # collective under torchrun
                if d.main:
                    rd.append_metrics(record)
                    runs.atomic_torch_save(rd.checkpoint, state)
                    if logger is not None:
                        logger.log(record)
                progress.epoch(record)
        finally:
            if logger is not None:
                logger.close()
        if d.main:
            if cfg.gradcam is not False and rd.seed == cfg.seeds[0]:
                try:
                    save_gradcam(cfg, trainer.model, data, d, rd.path / "gradcam.png")
                except (ValueError, TypeError, RuntimeError) as e:
                    progress.message(f"plugdrop ablate: no Grad-CAM for {rd.id}: "
                                     f"{' '.join(str(e).split())}")
            rd.done(cfg.epochs, time.perf_counter() - t0)
    finally:
        trainer.close()


def run_ablation(cfg: AblationConfig, *, out: Path, resume: bool, d: Dist,
                 argv: Sequence[str], data: DataSets | None = None,
                 progress: Progress | None = None, shard: tuple[int, int] | None = None,
                 launcher: Any = None) -> Outcome:
    """Check, then train every unfinished run of ``cfg`` into ``out``.

    Args:
        shard: ``(i, n)``: train only the i-th of n shares of the runs (see
            :mod:`plugdrop.ablate.launch.shard`); shards share ``out``.
        launcher: a :class:`plugdrop.ablate.launch.Launcher` that trains the runs elsewhere
            (Slurm jobs, Ray tasks); ``None`` trains them here, one after another.
    """
    if data is None:
        data = agree(d, lambda: load_data(cfg))
    workers = workers_for(cfg, data)
    agree(d, lambda: dry_run(cfg, data, d))
    manifest = {"format": runs.FORMAT, "config": cfg.resolved(), "config_hash": cfg.hash(),
                "variants": cfg.variant_names, "baseline": cfg.baseline,
                "seeds": list(cfg.seeds),
                "runs": [{"id": runs.run_id(v, s), "variant": v, "seed": s}
                         for v, s in cfg.runs()],
                "versions": versions(),
                "data": {"name": data.name, "train": _size(data.train),
                         "val": _size(data.val), "classes": list(data.classes),
                         "world_size": d.world}}
    lock = runs.Lock(out, shared=shard is not None)

    def claim() -> None:
        runs.check_out(out)
        out.mkdir(parents=True, exist_ok=True)
        lock.acquire()
        try:
            with runs.claiming(out):
                if shard is not None:
                    from .launch.shard import check_fresh

                    check_fresh(out, cfg, shard, resume)
                runs.prepare(out, manifest, resume or shard is not None)
                from .worker import save_config

                save_config(out, cfg)
        except ConfigError:
            lock.release()
            raise

    on_rank0(d, claim)
    _last_plots[0] = time.monotonic()
    outcome = Outcome()
    todo = []
    mine = cfg.runs()
    if shard is not None:
        from .launch.shard import select

        mine = select(mine, *shard)
    for v, s in mine:
        rd = runs.RunDir(out, v, s)
        status: str = on_rank0(d, lambda rd=rd: rd.status)  # type: ignore[misc]
        if status == "finished":
            outcome.skipped.append(rd.id)
        else:
            todo.append(rd)
    progress = progress or Progress(len(todo), d.main)
    if d.main:
        rank_note = f" x {d.world} processes" if d.active else ""
        n_train, n_val = _size(data.train), _size(data.val)
        print(f"plugdrop ablate: {cfg.model} on {data.name} ({n_train} train / "
              f"{n_val} val, {len(data.classes)} classes, {cfg.image_size}px), "
              f"{len(cfg.variants)} variants x {len(cfg.seeds)} seeds x {cfg.epochs} epochs on "
              f"{d.device}{rank_note}; {len(todo)} runs to train"
              + (f", {len(outcome.skipped)} finished already" if outcome.skipped else "")
              + (f" (shard {shard[0]}/{shard[1]})" if shard else "")
              + (f" through {launcher.name}" if launcher is not None else ""),
              flush=True)
    if launcher is not None:
        progress.close()  # the launcher's driver view (launch.monitor) takes over
        try:
            launcher.execute(cfg, out, todo, outcome)
        finally:
            if d.main:
                lock.release()
        return outcome
    stop = StopFlag()
    stop.install()
    try:
        for rd in todo:
            run_lock = runs.RunLock(rd)
            if not on_rank0(d, lambda: _claim_run(rd, run_lock)):
                outcome.skipped.append(rd.id)
                progress.name = f"{rd.variant} seed={rd.seed}"
                progress.run_end("skipped: another process trains it or finished it")
                continue
            try:
                train_run(cfg, rd, data, d, workers, resume or shard is not None, stop,
                          progress)
                outcome.finished.append(rd.id)
                progress.run_end("finished")
            except Stopped as e:
                outcome.stopped = e.signum
                progress.run_end(f"stopped by {e}; its last finished epoch is kept")
                break
            except KeyboardInterrupt:
                outcome.stopped = 2
                progress.run_end("interrupted")
                break
            except ConfigError:
                raise
            except Exception as e:  # a crashing run is recorded; the others go on
                outcome.failed.append(rd.id)
                if d.main:
                    rd.failed(e, _current_epoch(rd), traceback.format_exc())
                progress.run_end(f"failed: {type(e).__name__}: "
                                 f"{' '.join(str(e).split())[:300]}")
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            finally:
                run_lock.release()
            if d.main:
                write_report(out, progress, final=False)
    finally:
        stop.restore()
        progress.close()
        if d.main:
            lock.release()
    return outcome


def _claim_run(rd: runs.RunDir, lock: runs.RunLock) -> bool:
    """Take the run's lock; False when another process trains it or it finished meanwhile
    (shards and launcher jobs share one ``--out``)."""
    if not lock.try_acquire():
        return False
    if rd.status == "finished":
        lock.release()
        return False
    return True


def _size(ds: Any) -> int:
    return len(ds)


def _current_epoch(rd: runs.RunDir) -> int:
    return len(rd.read_metrics()) + 1
