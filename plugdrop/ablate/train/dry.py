"""The dry step: one training step and one evaluation batch per variant on real data, before any
run trains, so that everything a config can get wrong fails in the first seconds (and the
kernels warm up outside the timed runs)."""

from __future__ import annotations

import torch

import plugdrop as pd

from .. import logging as run_logging
from ..config import AblationConfig
from ..data import DataSets, make_loader
from ..errors import ConfigError, one_line
from .build import autocast
from .distributed import Dist
from .trainer import Trainer

__all__ = ["dry_run", "dry_step"]


def dry_step(trainer: Trainer) -> None:
    """One training step and one evaluation batch on a throw-away ``trainer``. Errors become
    one-line :class:`ConfigError`; an attachment whose layers never ran is refused (it would
    read as "no effect")."""
    cfg, d, variant = trainer.cfg, trainer.d, trainer.variant
    loader = make_loader(trainer.data.train, batch_size=trainer.batch, train=True, workers=0,
                         seed=trainer.seed, epoch=0, rank=d.rank, world=d.world,
                         device=d.device)
    it = trainer.batches(loader)
    batches = [next(it) for _ in range(cfg.grad_accum)]
    loss_sum = torch.zeros((), dtype=torch.float64, device=d.device)
    try:
        trainer.model.train()
        trainer.train_step(batches, loss_sum)
        if trainer.watch is not None:
            trainer.watch.as_dict(reset=True)
        trainer.model.eval()
        with torch.no_grad(), autocast(cfg, d.device):
            trainer.model(batches[0][0][:2])
    except (ValueError, TypeError, RuntimeError, NotImplementedError, AssertionError,
            IndexError) as e:
        msg = one_line(e)
        if "Input height" in msg or "Input width" in msg or "img_size" in msg:
            raise ConfigError(f"{cfg.loc('model')}: model {cfg.model!r} does not take "
                              f"{cfg.image_size}px images ({msg}); add model_kwargs: "
                              f"{{img_size: {cfg.image_size}}}") from None
        loc = variant.loc
        if len(variant.attachments) == 1:
            loc = variant.attachments[0].loc
        raise ConfigError(f"{loc}: variant {variant.name!r}: the dry training step failed: "
                          f"{msg}") from None
    if not torch.isfinite(loss_sum):
        raise ConfigError(f"{variant.loc}: variant {variant.name!r}: the loss of the dry "
                          f"training step is {loss_sum.item()}")
    for a, h in zip(variant.attachments, trainer.handles):
        silent = h.never_fired
        if silent:  # a regularizer that never runs would read as "no effect"
            raise ConfigError(
                f"{a.loc}: variant {variant.name!r}: {a.transform} never ran at "
                f"{', '.join(map(repr, silent[:6]))}{' ...' if len(silent) > 6 else ''} "
                f"in the dry training step (the module is not called by forward, or a "
                f"fused path skips it, e.g. fused attention's attn_drop); select layers "
                f"that run: plugdrop layers {cfg.model} shows which are called")


def dry_run(cfg: AblationConfig, data: DataSets, d: Dist) -> None:
    """A dry step of every variant (and the loggers and the Grad-CAM layer checked)."""
    run_logging.check(cfg.log)
    for variant in cfg.variants:
        trainer = Trainer.create(cfg, variant, cfg.seed_list[0], data, d, 0, ddp=False)
        try:
            dry_step(trainer)
            spec = cfg.gradcam_at
            if spec is not None and spec.where != "auto":
                try:
                    pd.select(trainer.model, spec.where)
                except ValueError as e:
                    raise ConfigError(f"{cfg.loc('gradcam')}: gradcam layer: "
                                      f"{one_line(e)}") from None
        finally:
            trainer.close()
