"""plugdrop's own training loop as the ablation's program (the default, no ``program:``): the
config's model on its data, a dry step per variant before any run, one run trained in this
process (under torchrun, in all of its processes), resumed from its last checkpoint.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from .. import logging as run_logging
from .. import runs
from ..config import AblationConfig, check_classes
from ..data import DataSets, build_datasets, default_workers
from ..errors import ConfigError, one_line
from ..progress import Progress
from ..train import Dist, StopFlag, Trainer, agree, dry_run, on_rank0, save_gradcam
from ..train.build import locate
from ..train.cadence import Cadence

__all__ = ["BuiltinProgram", "SECTIONS", "load_data", "train_run", "workers_for"]

#: the report's sections a run of plugdrop's trainer supplies (its records: accuracy per epoch,
#: the calibration bins of the last epoch, the watched drop fractions, Grad-CAM images)
SECTIONS = ("epochs", "calibration", "drop_fraction", "gradcam")


def load_data(cfg: AblationConfig) -> DataSets:
    """The config's data sets (normalization from the model's pretrained config)."""
    try:
        return build_datasets(cfg.data, image_size=cfg.image_size,
                              val_fraction=cfg.val_fraction, augment=cfg.augment,
                              model=None if ":" in cfg.model else cfg.model,
                              bad_images=cfg.bad_images, train_size=cfg.train_size)
    except ConfigError as e:
        raise ConfigError(locate(cfg, one_line(e), "data")) from None


def workers_for(cfg: AblationConfig, data: DataSets) -> int:
    """DataLoader worker processes of a run (none for in-memory data)."""
    if data.in_memory:
        return 0
    return default_workers() if cfg.workers == "auto" else int(cfg.workers)


def _same_data(out: Path, data: DataSets) -> DataSets:
    """``data``, checked against the files the ablation started on (a job on another machine
    may see another copy of the data)."""
    try:
        want = json.loads((out / "ablation.json").read_text()).get("data", {})
    except (OSError, ValueError):
        return data
    if want.get("fingerprint") and runs.fingerprint(data.files) != want["fingerprint"]:
        raise ConfigError(f"data: {data.name}: the files here ({socket.gethostname()}: "
                          f"{len(data.files)}) are not those the ablation started on "
                          f"({want.get('files', '?')}); give this machine the same data")
    return data


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


class BuiltinProgram:
    """plugdrop's trainer (:class:`~plugdrop.ablate.train.Trainer`) as a
    :class:`~.protocol.Program`.

    Args:
        cfg: the ablation's config.
        data: its data sets, when loaded already (else loaded by :meth:`prepare` or
            :meth:`load`).
    """

    name = "plugdrop's trainer"

    def __init__(self, cfg: AblationConfig, data: DataSets | None = None) -> None:
        self.cfg = cfg
        self.data = data

    def prepare(self, d: Dist, only: Collection[str] | None = None) -> None:
        cfg = self.cfg
        if self.data is None:
            self.data = agree(d, lambda: load_data(cfg))
        data = self.data
        check_classes(cfg, data.name, len(data.classes))
        agree(d, lambda: dry_run(cfg, data, d))

    def _loaded(self) -> DataSets:
        assert self.data is not None, "prepare() or load() loads the data first"
        return self.data

    def manifest(self, d: Dist) -> dict[str, Any]:
        data = self._loaded()
        return {"trains": f"{self.cfg.model} on {data.name}", "sections": list(SECTIONS),
                "data": {"name": data.name, "train": len(data.train),  # type: ignore[arg-type]
                         "val": len(data.val), "classes": list(data.classes),  # type: ignore[arg-type]
                         "world_size": d.world,
                         **({"files": len(data.files),
                             "fingerprint": runs.fingerprint(data.files)} if data.files else {})}}

    @property
    def files(self) -> Sequence[str]:
        return self._loaded().files

    def headline(self, d: Dist) -> tuple[str, str]:
        cfg, data = self.cfg, self._loaded()
        rank_note = f" x {d.world} processes" if d.active else ""
        n_train, n_val = len(data.train), len(data.val)  # type: ignore[arg-type]
        return (f"{cfg.model} on {data.name} ({n_train} train / {n_val} val, "
                f"{len(data.classes)} classes, {cfg.image_size}px)",
                f" x {cfg.epochs} epochs on {d.device}{rank_note}")

    def check_folder(self, out: Path) -> None:
        pass  # runs.prepare compares the config and the data files

    def load(self, out: Path, d: Dist) -> None:
        if self.data is None:
            cfg = self.cfg
            self.data = agree(d, lambda: _same_data(out, load_data(cfg)))

    def rejudges(self, rd: runs.RunDir) -> bool:
        return False  # a run of plugdrop's trainer is judged as it ends, trained when asked

    def begin(self, rd: runs.RunDir, launcher: str) -> runs.Recovery:
        recovery = rd.recover()
        rd.record_attempt(recovery.epoch + 1, launcher, recovery.step)
        return recovery

    def train(self, rd: runs.RunDir, d: Dist, start: Any, *, stop: StopFlag,
              progress: Progress, lock: runs.RunLock) -> None:
        data = self._loaded()
        train_run(self.cfg, rd, data, d, workers_for(self.cfg, data), stop, progress, start)
