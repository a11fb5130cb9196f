"""What one run trains with, built from the config: the model, the variant's attachments, timm's
optimizer and scheduler, the EMA model, the watched layers. Errors a config can cause become
:class:`ConfigError` naming the setting's place."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

import plugdrop as pd

from ..config import AblationConfig, Variant
from ..errors import ConfigError, one_line
from ..model import build_model

__all__ = ["attach_variant", "autocast", "locate", "loss_fn", "make_ema", "make_model",
           "make_optimizer", "make_scheduler", "make_watch"]

#: timm optimizers that take a momentum
_MOMENTUM = ("sgd", "nesterov", "momentum", "sgdp", "sgdw", "lars", "larc", "nlars", "nlarc",
             "rmsprop", "rmsproptf")


def locate(cfg: AblationConfig, msg: str, default: str) -> str:
    """``msg`` prefixed with the location of the setting it is about: the one it starts with
    (``model_kwargs: ...``), else ``default``."""
    key = default
    head = msg.split(":", 1)[0].strip()
    if head in cfg.locs:
        key = head
    elif default == "model" and "model_kwargs" in cfg.locs and (
            "keyword" in msg or "kwarg" in msg or any(f"'{k}'" in msg for k in cfg.model_kwargs)):
        key = "model_kwargs"
    loc = cfg.loc(key)
    return msg if msg.startswith(loc) else f"{loc}: {msg}"


def make_model(cfg: AblationConfig, num_classes: int) -> nn.Module:
    """The config's model; errors name the ``model`` (or ``model_kwargs``/``pretrained``)
    setting."""
    try:
        return build_model(cfg.model, num_classes=num_classes, model_kwargs=cfg.model_kwargs,
                           pretrained=cfg.pretrained)
    except ConfigError as e:
        raise ConfigError(locate(cfg, one_line(e), "model")) from None


def autocast(cfg: AblationConfig, device: torch.device) -> contextlib.AbstractContextManager:
    """The config's ``amp`` as a context: autocast to bf16 / fp16, or nothing."""
    if cfg.amp == "off":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if cfg.amp == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def loss_fn(cfg: AblationConfig) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Cross-entropy in float32 with the config's label smoothing."""
    smoothing = cfg.label_smoothing

    def criterion(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), target, label_smoothing=smoothing)
    return criterion


def attach_variant(cfg: AblationConfig, variant: Variant, model: nn.Module, total_steps: int,
                   scaler: torch.amp.GradScaler) -> list[Any]:
    """Attach the variant's transforms (schedules spanning ``total_steps``); all or nothing."""
    handles: list[Any] = []
    for a in variant.attachments:
        try:
            handles.append(a.attach(model, total_steps, scaler if cfg.amp == "fp16" else None))
        except (ValueError, TypeError) as e:
            for h in handles:
                h.remove()
            raise ConfigError(f"{a.loc}: variant {variant.name!r}: {one_line(e)}") from None
    return handles


def make_optimizer(cfg: AblationConfig, model: nn.Module) -> torch.optim.Optimizer:
    """timm's ``create_optimizer_v2`` with the config's settings."""
    import timm.optim

    opt_kwargs: dict[str, Any] = {}
    if cfg.optimizer in _MOMENTUM:
        opt_kwargs["momentum"] = cfg.momentum
    try:
        return timm.optim.create_optimizer_v2(
            model, opt=cfg.optimizer, lr=cfg.lr, weight_decay=cfg.weight_decay,
            filter_bias_and_bn=False, **opt_kwargs)
    except (ValueError, TypeError, ImportError) as e:
        raise ConfigError(f"{cfg.loc('optimizer')}: optimizer {cfg.optimizer!r}: "
                          f"{one_line(e)}") from None


def make_scheduler(cfg: AblationConfig, optimizer: torch.optim.Optimizer,
                   steps_per_epoch: int) -> Any:
    """timm's ``create_scheduler_v2``, stepped per optimizer step (``constant``: a step
    schedule that never decays)."""
    import timm.scheduler

    sched_name = cfg.lr_schedule
    extra: dict[str, Any] = {}
    if sched_name == "constant":
        sched_name, extra = "step", {"decay_epochs": 10 * cfg.epochs + 1, "decay_rate": 1.0}
    scheduler, _ = timm.scheduler.create_scheduler_v2(
        optimizer, sched=sched_name, num_epochs=cfg.epochs, warmup_epochs=cfg.warmup_epochs,
        warmup_lr=cfg.warmup_lr, min_lr=cfg.min_lr, step_on_epochs=False,
        updates_per_epoch=steps_per_epoch, **extra)
    return scheduler


def make_ema(cfg: AblationConfig, model: nn.Module) -> Any:
    """timm's ``ModelEmaV3`` of ``model`` with the config's decay, or ``None``."""
    if cfg.ema is None:
        return None
    from timm.utils import ModelEmaV3

    return ModelEmaV3(model, decay=cfg.ema)


def watch_selector(cfg: AblationConfig) -> Any:
    """The layers watched per epoch: the config's ``watch``, or (auto) every layer any variant
    attaches a forward transform to, so that all variants report the same layers."""
    if cfg.watch is False:
        return None
    if cfg.watch == "auto":
        return cfg.attached_layers() or None
    return cfg.watch


def _watchable(model: nn.Module, selector: Any, auto: bool) -> Any:
    """In auto mode, the selectors of other variants that match nothing in this model are
    left out (the variant that attaches them reports the error); a typo in ``watch:``
    itself fails."""
    if not auto:
        return selector
    keep = []
    for sel in selector:
        try:
            pd.select(model, sel)
            keep.append(sel)
        except (ValueError, TypeError):
            pass
    return keep or None


def make_watch(cfg: AblationConfig, model: nn.Module) -> Any:
    """The :func:`plugdrop.watch` of the watched layers, or ``None``."""
    watched = watch_selector(cfg)
    if watched is not None:
        watched = _watchable(model, watched, cfg.watch == "auto")
    if watched is None:
        return None
    try:
        return pd.watch(model, watched)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{cfg.loc('watch')}: watch: {one_line(e)}") from None
