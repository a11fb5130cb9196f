"""Preprocessing from timm's data package: :func:`timm.data.resolve_data_config` with the model's
pretrained config (normalization follows the model) and :func:`timm.data.create_transform`.
Without ``augment`` both splits get timm's evaluation transform (resize, center crop,
normalize), so runs are deterministic; with ``augment`` (timm's names, :data:`AUGMENT_KEYS`)
the training split gets timm's training transform."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ..errors import ConfigError
from .spec import suggest

__all__ = ["AUGMENT_KEYS", "check_augment", "make_transforms", "pretrained_cfg"]

#: The keys accepted in a config's ``augment:`` block: timm's own names
#: (:func:`timm.data.create_transform` / :func:`timm.data.resolve_data_config`).
AUGMENT_KEYS: frozenset[str] = frozenset({
    "hflip", "vflip", "color_jitter", "color_jitter_prob", "grayscale_prob", "gaussian_blur_prob",
    "auto_augment", "re_prob", "re_mode", "re_count", "scale", "ratio", "train_crop_mode",
    "interpolation", "crop_pct", "crop_mode", "mean", "std",
})

# augment keys that resolve_data_config reads (they shape evaluation preprocessing too)
RESOLVED_KEYS = ("interpolation", "crop_pct", "crop_mode", "mean", "std")


def check_augment(augment: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if augment is None:
        return None
    if not isinstance(augment, Mapping):
        raise ConfigError(f"augment: expected a mapping of timm augmentation settings "
                          f"(e.g. {{hflip: 0.5, auto_augment: rand-m9-mstd0.5}}), got {augment!r}")
    out = dict(augment)
    for key, val in out.items():
        if key not in AUGMENT_KEYS:
            raise ConfigError(f"augment: unknown setting {key!r}"
                              + (suggest(str(key), sorted(AUGMENT_KEYS))
                                 or f" (timm's names: {', '.join(sorted(AUGMENT_KEYS))})"))
        if key in ("mean", "std"):
            seq = [val] if isinstance(val, (int, float)) else val
            if (not isinstance(seq, Sequence) or isinstance(seq, str) or len(seq) not in (1, 3)
                    or not all(isinstance(v, (int, float)) for v in seq)):
                raise ConfigError(f"augment: {key} must be one number or three (per channel), "
                                  f"got {val!r}")
            out[key] = tuple(float(v) for v in seq)
        elif key in ("scale", "ratio"):
            if (not isinstance(val, Sequence) or isinstance(val, str) or len(val) != 2
                    or not all(isinstance(v, (int, float)) for v in val)):
                raise ConfigError(f"augment: {key} must be two numbers [low, high], got {val!r}")
            out[key] = (float(val[0]), float(val[1]))
        elif key == "color_jitter" and isinstance(val, list):
            out[key] = tuple(val)
    return out


def pretrained_cfg(name: str) -> dict[str, Any] | None:
    """timm's pretrained config of a model name (``None`` for factories and unknown names)."""
    import timm
    from timm.models import get_pretrained_cfg

    if ":" in name or not timm.is_model(name):
        return None
    try:
        cfg = get_pretrained_cfg(name)
    except RuntimeError:  # an unknown weights tag: build_model reports it
        return None
    return cfg.to_dict() if cfg is not None else None


def make_transforms(augment: dict[str, Any] | None, model: torch.nn.Module | str | None,
                image_size: int, stats: tuple[tuple[float, ...], tuple[float, ...]] | None = None
                ) -> tuple[Callable[[Any], torch.Tensor] | None, Callable[[Any], torch.Tensor],
                           dict[str, Any]]:
    """(train transform or None when there is no augmentation, eval transform, data config)."""
    from timm.data import create_transform, resolve_data_config

    args: dict[str, Any] = {k: v for k, v in (augment or {}).items() if k in RESOLVED_KEYS}
    args["input_size"] = (3, image_size, image_size)
    if stats is not None:
        args.setdefault("mean", stats[0])
        args.setdefault("std", stats[1])
    try:
        if isinstance(model, str):
            cfg = resolve_data_config(args, pretrained_cfg=pretrained_cfg(model))
        else:
            cfg = resolve_data_config(args, model=model)
    except (AssertionError, ValueError, TypeError) as e:
        raise ConfigError(f"augment: {e or type(e).__name__}") from None
    eval_tf = create_transform(**cfg, is_training=False)
    train_tf = None
    if augment is not None:
        extra = {k: v for k, v in augment.items() if k not in RESOLVED_KEYS}
        try:
            train_tf = create_transform(**{k: v for k, v in cfg.items() if k != "crop_pct"},
                                        is_training=True, **extra)
        except (AssertionError, ValueError, TypeError, KeyError) as e:
            shown = ", ".join(f"{k}: {v}" for k, v in extra.items())
            raise ConfigError(f"augment: timm rejects {{{shown}}}: "
                              f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return train_tf, eval_tf, dict(cfg)
