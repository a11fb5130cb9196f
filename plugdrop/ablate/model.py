"""Models for ablations: a timm name or ``package.module:factory``, optionally with pretrained
weights from a local file (fine-tuning) or from timm's local cache. Nothing is ever downloaded.

For timm models a checkpoint goes through timm's own loading (``pretrained=True`` with
``pretrained_cfg_overlay=dict(file=PATH)``: its checkpoint filters and input-conv adaptation), built
with the checkpoint's number of classes and a strict load, then :meth:`reset_classifier` to the data
set's classes when they differ (the checkpoint's classifier is kept when they match). For other
factories the file is loaded with a checked :meth:`~torch.nn.Module.load_state_dict`: everything
must fit but the classifier, which is left freshly initialized when its shape differs.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
import torch.nn as nn

from .errors import ConfigError, one_line

__all__ = ["build_model", "model_names"]

# model_kwargs the runner sets itself
_RESERVED = ("num_classes", "pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "in_chans")
_BUILD_ERRORS = (TypeError, ValueError, AssertionError, KeyError, AttributeError, RuntimeError,
                 NotImplementedError)


def model_names(prefix: str = "") -> list[str]:
    """timm's model names starting with ``prefix`` (all of them for ``""``), sorted."""
    import timm

    return list(timm.list_models(f"{prefix}*"))


def _bad_kwarg(err: TypeError) -> str | None:
    found = re.search(r"unexpected keyword argument '([^']+)'", str(err))
    return found.group(1) if found else None


def _kwargs_error(name: str, err: BaseException, kwargs: Mapping[str, Any],
                  accepted: list[str] | None = None) -> ConfigError:
    bad = _bad_kwarg(err) if isinstance(err, TypeError) else None
    if bad is not None and bad in kwargs:
        close = difflib.get_close_matches(bad, accepted or [], n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else \
            "; remove or correct it"
        return ConfigError(f"model_kwargs: {name} has no argument {bad!r}{hint}")
    shown = f" with model_kwargs {dict(kwargs)}" if kwargs else ""
    return ConfigError(f"model {name}{shown} cannot be built "
                       f"({one_line(err, typed=True, limit=300)}); check model_kwargs")


# ----------------------------------------------------------------------------- checkpoints

def _checkpoint_path(value: str | os.PathLike[str]) -> Path:
    path = Path(value).expanduser()
    if not path.exists():
        raise ConfigError(f"pretrained: {path} does not exist; give the path of a weights file "
                          f"(.pth/.pt/.bin state dict or .safetensors) or pretrained: false")
    if not path.is_file():
        raise ConfigError(f"pretrained: {path} is a directory; give the weights file inside it "
                          f"(.pth/.pt/.bin state dict or .safetensors)")
    return path


def _read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The state dict in ``path`` (timm's reader: ``.safetensors`` or a torch file, unwrapped from
    ``{'state_dict': ...}`` / ``{'model': ...}``, ``module.`` prefixes removed)."""
    from timm.models import load_state_dict

    try:
        sd = load_state_dict(str(path))
    except Exception as e:  # torch/pickle/safetensors each raise their own types
        raise ConfigError(f"pretrained: cannot read {path} ({one_line(e, typed=True, limit=300)})"
                          f"; expected a state dict saved with torch.save (.pth/.pt/.bin) or a "
                          f".safetensors file") from None
    if not isinstance(sd, Mapping) or not sd or \
            not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in sd.items()):
        raise ConfigError(f"pretrained: {path} holds no state dict (a mapping of parameter names "
                          f"to tensors, possibly under 'state_dict' or 'model')")
    return dict(sd)


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(map(str, t.shape)) + ")"


def _mismatch(own: Mapping[str, torch.Tensor], sd: Mapping[str, torch.Tensor],
              ignore: set[str] = frozenset()) -> str:  # type: ignore[assignment]
    """A short description of how ``sd`` does not fit ``own`` (empty when it fits)."""
    missing = [k for k in own if k not in sd and k not in ignore]
    unexpected = [k for k in sd if k not in own and k not in ignore]
    shapes = [f"{k} {_shape(sd[k])} in the file vs {_shape(own[k])} in the model"
              for k in own if k in sd and k not in ignore and sd[k].shape != own[k].shape]
    parts = []
    for label, keys in (("shape mismatches", shapes), ("missing keys", missing),
                        ("unexpected keys", unexpected)):
        if keys:
            parts.append(f"{len(keys)} {label}: {', '.join(keys[:3])}"
                         + (", ..." if len(keys) > 3 else ""))
    return "; ".join(parts)


def _fit_error(path: Path, name: str, detail: str) -> ConfigError:
    return ConfigError(f"pretrained: {path} does not fit model {name} ({detail}); use a checkpoint "
                       f"saved from {name} or fix model/model_kwargs")


def _cached_weights(name: str) -> Path:
    """The file of timm's default weights for ``name`` in the local caches (Hugging Face hub cache,
    then torch.hub's), or ConfigError saying how to supply them."""
    from timm.models import get_pretrained_cfg

    try:
        cfg = get_pretrained_cfg(name)
    except RuntimeError as e:
        raise ConfigError(f"model {name}: {e}") from None
    if cfg is None or not (cfg.hf_hub_id or cfg.url or cfg.file):
        raise ConfigError(f"model {name}: timm has no pretrained weights for it; give a weights "
                          f"file with pretrained: /path/to/weights.safetensors")
    looked: list[str] = []
    if cfg.file:
        if Path(cfg.file).is_file():
            return Path(cfg.file)
        looked.append(str(cfg.file))
    if cfg.hf_hub_id:
        try:
            from huggingface_hub import constants, try_to_load_from_cache
        except ImportError:  # pragma: no cover - huggingface_hub comes with timm
            pass
        else:
            names = [cfg.hf_hub_filename] if cfg.hf_hub_filename else \
                ["model.safetensors", "pytorch_model.bin"]
            for filename in names:
                found = try_to_load_from_cache(cfg.hf_hub_id, filename)
                if isinstance(found, str) and os.path.isfile(found):
                    return Path(found)
            looked.append(f"{constants.HF_HUB_CACHE} for {cfg.hf_hub_id}")
    if isinstance(cfg.url, str) and cfg.url:
        path = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(cfg.url).path)
        if path.is_file():
            return path
        looked.append(str(path))
    raise ConfigError(f"model {name}: pretrained: true needs timm's weights in the local cache and "
                      f"they are not there (looked in {'; '.join(looked)}); nothing is downloaded: "
                      f"copy a weights file here and set pretrained: /path/to/weights.safetensors")


def _head_rows(sd: Mapping[str, torch.Tensor], classifier: Any) -> int | None:
    names = (classifier,) if isinstance(classifier, str) else tuple(classifier or ())
    for cls_name in names:
        weight = sd.get(f"{cls_name}.weight")
        if weight is not None and weight.ndim >= 1:
            return int(weight.shape[0])
    return None


# ----------------------------------------------------------------------------- timm

def _timm_model(name: str, num_classes: int, kwargs: dict[str, Any],
                pretrained: bool | str | os.PathLike[str] | None, in_chans: int) -> nn.Module:
    import timm
    from timm.models import get_pretrained_cfg

    def create(**extra: Any) -> nn.Module:
        try:
            return timm.create_model(name, in_chans=in_chans, **extra, **kwargs)
        except _BUILD_ERRORS as e:
            if isinstance(e, RuntimeError) and extra.get("pretrained"):
                raise
            raise _kwargs_error(name, e, kwargs) from None

    if pretrained is None or pretrained is False:
        return create(pretrained=False, num_classes=num_classes)
    path = _cached_weights(name) if pretrained is True else _checkpoint_path(pretrained)
    sd = _read_state_dict(path)
    cfg = get_pretrained_cfg(name)
    classifier = cfg.classifier if cfg is not None else None
    rows = _head_rows(sd, classifier)
    build = rows if rows is not None else num_classes
    try:
        model = create(pretrained=True, num_classes=build,
                       pretrained_cfg_overlay=dict(file=str(path), num_classes=build))
    except (RuntimeError, KeyError) as e:
        try:
            own = timm.create_model(name, pretrained=False, num_classes=build, in_chans=in_chans,
                                    **kwargs).state_dict()
            detail = _mismatch(own, sd) or one_line(e, typed=True, limit=300)
        except _BUILD_ERRORS:
            detail = one_line(e, typed=True, limit=300)
        raise _fit_error(path, name, detail) from None
    if build != num_classes:
        model.reset_classifier(num_classes)  # type: ignore[operator]
    return model


# ----------------------------------------------------------------------------- factories

def _factory(name: str) -> Callable[..., Any]:
    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"model {name!r}: write a factory as package.module:function, e.g. "
                          f"torchvision.models:resnet18")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"model {name!r}: cannot import {module_name} "
                          f"({one_line(e, typed=True, limit=300)}); check the module path or "
                          f"install it") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        public = [n for n in dir(module) if not n.startswith("_")]
        close = difflib.get_close_matches(attr, public, n=3, cutoff=0.6)
        raise ConfigError(f"model {name!r}: {module_name} has no callable {attr!r}"
                          + (f"; did you mean {' or '.join(map(repr, close))}?" if close else ""))
    return factory


def _classifier_names(model: nn.Module) -> set[str]:
    """The state-dict keys of the model's classifier: ``get_classifier()`` if the model has it,
    else its last :class:`~torch.nn.Linear`."""
    head: nn.Module | None = None
    get = getattr(model, "get_classifier", None)
    if callable(get):
        got = get()
        head = got if isinstance(got, nn.Module) else None
    if head is None:
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        head = linears[-1] if linears else None
    if head is None:
        return set()
    prefix = next((n for n, m in model.named_modules() if m is head), None)
    if prefix is None:
        return set()
    return {f"{prefix}.{k}" if prefix else k for k in head.state_dict()}


def _factory_model(name: str, num_classes: int, kwargs: dict[str, Any],
                   pretrained: bool | str | os.PathLike[str] | None, in_chans: int) -> nn.Module:
    factory = _factory(name)
    if pretrained is True:
        raise ConfigError(f"model {name}: pretrained: true is for timm models (timm's weight "
                          f"cache); give a weights file: pretrained: /path/to/weights.pth")
    try:
        params = inspect.signature(factory).parameters
        accepted = [p for p in params if params[p].kind is not inspect.Parameter.VAR_KEYWORD]
        open_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        accepted, open_kwargs = [], True
    args = dict(kwargs)
    if in_chans != 3:
        args["in_chans"] = in_chans
    if name.startswith("torchvision."):  # nothing downloads: a detector's backbone would
        args.update({w: None for w in ("weights", "weights_backbone")
                     if w in accepted and w not in args})
    takes_classes = "num_classes" in accepted or open_kwargs
    try:
        try:
            model = factory(num_classes=num_classes, **args) if takes_classes else factory(**args)
        except TypeError as e:
            if not (takes_classes and _bad_kwarg(e) == "num_classes"):
                raise
            takes_classes = False  # **kwargs went somewhere without num_classes
            model = factory(**args)
    except _BUILD_ERRORS as e:
        raise _kwargs_error(name, e, args, accepted) from None
    reset_head = getattr(model, "reset_classifier", None)
    if not takes_classes and callable(reset_head):
        reset_head(num_classes)
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model {name}: the factory returned {type(model).__name__}, not a "
                          f"torch.nn.Module")
    if pretrained is None or pretrained is False:
        return model
    path = _checkpoint_path(pretrained)
    sd = _read_state_dict(path)
    own = model.state_dict()
    head = _classifier_names(model)
    reset = {k for k in head if k in sd and k in own and sd[k].shape != own[k].shape}
    detail = _mismatch(own, sd, ignore=reset)
    if detail:
        raise _fit_error(path, name, detail)
    model.load_state_dict({k: v for k, v in sd.items() if k not in reset}, strict=not reset)
    return model


# ----------------------------------------------------------------------------- entry point

def build_model(name: str, *, num_classes: int, model_kwargs: Mapping[str, Any] | None = None,
                pretrained: bool | str | os.PathLike[str] | None = None,
                in_chans: int = 3) -> nn.Module:
    """The model a config names, with ``num_classes`` outputs.

    Args:
        name: a timm model name (``resnet18``, ``vit_tiny_patch16_224.augreg_in21k``) or a factory
            ``package.module:function`` (``torchvision.models:resnet18``).
        num_classes: outputs of the classifier (the data set's classes).
        model_kwargs: extra keyword arguments for ``timm.create_model`` or the factory
            (``drop_path_rate``, ``img_size``, ...). Default: none.
        pretrained: ``None``/``False`` (default): random weights. A path: a local checkpoint (a
            state dict in a ``.pth``/``.pt``/``.bin`` file, possibly under ``'state_dict'`` or
            ``'model'``, or a ``.safetensors`` file); the classifier is kept when it has
            ``num_classes`` outputs and reset otherwise. ``True``: timm's default weights, only
            from the local cache (timm models only).
        in_chans: input channels (timm adapts a pretrained first convolution).

    Returns:
        the model, in training mode, on the CPU.

    Raises:
        ConfigError: an unknown model (with close names), a factory that cannot be imported, a
            model_kwargs entry the model does not take (named), a missing or unreadable
            checkpoint, weights that do not fit (the mismatching keys/shapes), ``pretrained:
            true`` without cached weights (saying how to supply them).
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"model: expected a timm name or package.module:factory, got {name!r}")
    if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
        raise ConfigError(f"num_classes: expected a positive integer, got {num_classes!r}")
    if model_kwargs is not None and not isinstance(model_kwargs, Mapping):
        raise ConfigError(f"model_kwargs: expected a mapping of keyword arguments, got "
                          f"{model_kwargs!r}")
    kwargs = dict(model_kwargs or {})
    for key in kwargs:
        if key in _RESERVED:
            raise ConfigError(f"model_kwargs: {key} is set by the runner (from the data set and "
                              f"pretrained:); remove it")
    if not (pretrained is None or isinstance(pretrained, (bool, str, os.PathLike))):
        raise ConfigError(f"pretrained: expected true, false or a weights file path, got "
                          f"{pretrained!r}")
    if isinstance(pretrained, str) and not pretrained.strip():
        raise ConfigError("pretrained: empty path; give a weights file or false")
    name = name.strip()
    if ":" in name:
        return _factory_model(name, num_classes, kwargs, pretrained, in_chans)
    import timm

    if not timm.is_model(name):
        close = difflib.get_close_matches(name, model_names(), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        if not close and "." in name:
            module, _, attr = name.rpartition(".")
            hint = f"; a factory is written {module}:{attr}"
        raise ConfigError(f"model {name!r} is not a timm model{hint}")
    if "." in name:
        from timm.models import get_pretrained_cfg

        arch, _, tag = name.partition(".")
        try:
            get_pretrained_cfg(name)
        except RuntimeError:
            tags = [n.partition(".")[2] for n in timm.list_pretrained(f"{arch}.*")]
            raise ConfigError(f"model {name!r}: timm has no weights tag {tag!r} for {arch}"
                              + (f" (it has: {', '.join(tags[:8])})" if tags else "")) from None
    return _timm_model(name, num_classes, kwargs, pretrained, in_chans)
