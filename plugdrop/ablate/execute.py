"""Executing one run: what the local launcher and every launcher's job
(``python -m plugdrop.ablate.worker``) call, so that a run trains the same way wherever it
trains.

A run is claimed through its lock (another process training it: ``busy``; finished meanwhile:
``finished``), every start is recorded in ``runs/<id>/attempts.jsonl``, it resumes from the last
checkpoint that loads (a torn one is passed over with a warning), writes a metrics line and a
verified checkpoint per epoch, and ends with ``done.json``, or ``failed.json`` when it crashed
(the crash is recorded, not raised). A fault of the environment (a full disk, data that
vanished) is raised, not recorded: the run is not the problem.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable

import torch

from . import logging as run_logging
from . import runs
from .config import AblationConfig
from .data import DataSets, build_datasets, default_workers
from .errors import ConfigError, Fault, one_line
from .outcome import RunResult
from .progress import Progress
from .train import Dist, StopFlag, Stopped, Trainer, on_rank0, save_gradcam
from .train.build import locate
from .train.cadence import Cadence

__all__ = ["execute", "load_data", "train_run", "workers_for"]

def load_data(cfg: AblationConfig) -> DataSets:
    """The config's data sets (normalization from the model's pretrained config)."""
    try:
        return build_datasets(cfg.data, image_size=cfg.image_size,
                              val_fraction=cfg.val_fraction, augment=cfg.augment,
                              model=None if ":" in cfg.model else cfg.model,
                              bad_images=cfg.bad_images)
    except ConfigError as e:
        raise ConfigError(locate(cfg, one_line(e), "data")) from None


def workers_for(cfg: AblationConfig, data: DataSets) -> int:
    """DataLoader worker processes of a run (none for in-memory data)."""
    if data.in_memory:
        return 0
    return default_workers() if cfg.workers == "auto" else int(cfg.workers)


def _claim(rd: runs.RunDir, lock: runs.RunLock, launcher: str
           ) -> tuple[RunResult | None, runs.Recovery | None]:
    """Take the run's lock, choose the checkpoint it resumes from and record the attempt
    (``(None, recovery)``); finished or busy instead when the run needs no training here
    (shards and launcher jobs share one ``--out``)."""
    if rd.status == runs.FINISHED:
        return RunResult.finished(), None
    if not lock.try_acquire():
        return RunResult.busy(), None
    try:
        if rd.status == runs.FINISHED:
            lock.release()
            return RunResult.finished(), None
        recovery = rd.recover()
        rd.record_attempt(recovery.epoch + 1, launcher, recovery.step)
    except BaseException:
        lock.release()
        raise
    return None, recovery


def train_run(cfg: AblationConfig, rd: runs.RunDir, data: DataSets, d: Dist, workers: int,
              stop: StopFlag, progress: Progress,
              recovery: runs.Recovery | None = None) -> None:
    """Train one run to the end, resuming from ``recovery`` (its checkpoint; default: the
    one :meth:`~plugdrop.ablate.runs.RunDir.recover` chooses)."""
    if recovery is None:
        recovery = on_rank0(d, rd.recover)
    variant = cfg.variant(rd.variant)
    trainer = Trainer.create(cfg, variant, rd.seed, data, d, workers)
    try:
        start_epoch = 1
        ckpt = recovery.path
        if d.main and (note := recovery.message(rd.id)) is not None:
            progress.message(f"plugdrop ablate: warning: {note}")
        if ckpt is not None:
            state = runs.load_checkpoint(ckpt, map_location=d.device)
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
        cadence = Cadence(cfg.checkpoint_every)

        def save(state: dict[str, object]) -> None:  # in the middle of an epoch
            if d.main:
                rd.save_checkpoint(state)

        try:
            for _ in range(start_epoch, cfg.epochs + 1):
                record = trainer.train_epoch(stop, progress.batch, save, cadence)
                state = trainer.state_dict()  # collective under torchrun
                if d.main:
                    rd.append_metrics(record)
                    rd.save_checkpoint(state)
                    if logger is not None:
                        logger.log(record)
                cadence.done()
                progress.epoch(record)
        finally:
            if logger is not None:
                logger.close()
        if d.main:
            if cfg.gradcam_at is not None and rd.seed == cfg.seed_list[0]:
                try:
                    save_gradcam(cfg, trainer.model, data, d, rd.path / "gradcam.png")
                except (ValueError, TypeError, RuntimeError) as e:
                    progress.message(f"plugdrop ablate: no Grad-CAM for {rd.id}: "
                                     f"{one_line(e)}")
            rd.done(cfg.epochs, time.perf_counter() - t0)
    finally:
        trainer.close()


def execute(cfg: AblationConfig, rd: runs.RunDir, d: Dist, data: Callable[[], DataSets], *,
            stop: StopFlag, progress: Progress, launcher: str) -> RunResult:
    """Claim, train (or resume) and mark one run, in this process (under torchrun, in all of
    its processes together).

    Args:
        data: gives the data sets (called once the run is claimed: a job turned away loads
            nothing).
        stop: the flag SIGINT / SIGTERM set; polled between steps.
        progress: where the run's epochs are reported.
        launcher: recorded in ``attempts.jsonl``.

    Returns:
        finished, busy (another process trains it) or failed: a crash of the run (an
        out-of-memory error, a NaN loss) is recorded in ``failed.json`` and returned as
        :meth:`~plugdrop.ablate.outcome.RunResult.failed` with its error on one line.

    Raises:
        Stopped: a signal stopped the run at a step boundary (its state checkpointed there).
        KeyboardInterrupt: a second Ctrl-C.
        ConfigError: a user mistake met only now (an unreadable image, say).
        Fault: the environment failed (a full disk, data that vanished): the run is not
            marked failed; its finished epochs are kept.
    """
    lock = runs.RunLock(rd)
    claimed, recovery = on_rank0(d, lambda: _claim(rd, lock, launcher))
    if claimed is not None:
        return claimed
    try:
        loaded = data()
        train_run(cfg, rd, loaded, d, workers_for(cfg, loaded), stop, progress, recovery)
        return RunResult.finished()
    except (ConfigError, Fault, Stopped):
        raise
    except Exception as e:  # a crashing run is recorded; the others go on
        if d.main:
            rd.failed(e, rd.current_epoch(), traceback.format_exc())
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return RunResult.failed(one_line(e, typed=True, limit=300))
    finally:
        if d.main:
            lock.release()
