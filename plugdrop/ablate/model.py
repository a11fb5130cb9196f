"""TEMPORARY minimal model creation until the data helper's module is merged (spec API)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import torch

from .errors import ConfigError


def model_names(prefix: str = "") -> list[str]:
    import timm

    return timm.list_models(f"{prefix}*")


def build_model(name: str, *, num_classes: int, model_kwargs: Mapping[str, Any] | None = None,
                pretrained: bool | str | None = None, in_chans: int = 3) -> torch.nn.Module:
    kwargs = dict(model_kwargs or {})
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"model {name!r}: cannot import {attr} from {module_name} ({e})") \
                from None
        try:
            return factory(num_classes=num_classes, **kwargs)
        except TypeError as e:
            raise ConfigError(f"model {name!r}: {e}") from None
    import timm

    if not timm.is_model(name):
        import difflib

        close = difflib.get_close_matches(name, timm.list_models(), n=3)
        raise ConfigError(f"model {name!r} is not a timm model"
                          + (f"; did you mean {', '.join(close)}?" if close else ""))
    try:
        return timm.create_model(name, pretrained=False, num_classes=num_classes, **kwargs)
    except TypeError as e:
        raise ConfigError(f"model {name!r}: bad model_kwargs: {e}") from None
