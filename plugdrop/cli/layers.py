"""``plugdrop layers MODEL``: the module tree of a model with each module's output from one dry
forward, marking what a selector picks (to write selectors without reading the model's code).

Nothing is downloaded: timm models are built with ``pretrained=False``, torchvision factories
with ``weights=None`` and ``weights_backbone=None`` (where they take them). Exit status 2, with
one line and no traceback, for a model that cannot be built (unknown name, bad
``--model-kwargs``, weights it would download) or that fails on the given input (its message
and the fix: another ``--input-size``, or ``--model-kwargs '{img_size: 64}'`` for a ViT).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import http.client
import inspect
import io
import sys
import urllib.error
from typing import Any

import torch
import torch.nn as nn

import plugdrop as pd

#: what a model's build raises when it tries to download (weights) without a network
_DOWNLOAD_ERRORS = (urllib.error.URLError, http.client.HTTPException, ConnectionError,
                    TimeoutError)
_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
#: the factory arguments whose torchvision defaults download weights
_TORCHVISION_WEIGHTS = ("weights", "weights_backbone")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("layers", help="the module tree of a model, with output shapes, and "
                                      "what a selector picks")
    p.add_argument("model", help="a timm model name (pretrained=False), package.module:factory "
                                 "(torchvision's with weights=None, weights_backbone=None) or "
                                 "a class of the working directory's files (train.py:Net, "
                                 "train:Net); nothing is downloaded")
    p.add_argument("--input-size", nargs=3, type=int, default=(3, 224, 224),
                   metavar=("C", "H", "W"), help="input of the dry forward (default 3 224 224)")
    p.add_argument("--match", help="a selector: modules it picks are marked with *")
    p.add_argument("--depth", type=int, help="show modules down to this depth only (0: root)")
    p.add_argument("--residual", action="store_true",
                   help="find the residual branches (where DropPath belongs) and mark them R")
    p.add_argument("--model-kwargs", metavar="YAML",
                   help="keyword arguments of the model factory as a YAML mapping, e.g. "
                        "'{img_size: 64}' or 'weights: null'")
    p.set_defaults(func=run)


def _fail(msg: str) -> int:
    print(f"plugdrop layers: {msg}", file=sys.stderr)
    return 2


def _no_weights(factory: Any) -> dict[str, Any]:
    """``weights=None`` and ``weights_backbone=None`` for a torchvision factory that takes
    them (a detection model's backbone weights download by default); nothing for others."""
    if not str(getattr(factory, "__module__", "")).startswith("torchvision."):
        return {}
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
        return {}
    return {k: None for k in _TORCHVISION_WEIGHTS if k in params}


def _torchvision_name(name: str) -> str | None:
    """``package.module:factory`` of a torchvision model named without its module."""
    try:
        import torchvision.models as tvm

        if name not in tvm.list_models():
            return None
        builder: Any = tvm.get_model_builder(name)
    except Exception:  # torchvision missing or too old
        return None
    parts, attr = builder.__module__.split("."), builder.__name__
    for k in range(2, len(parts) + 1):  # the shortest module that has it
        if getattr(sys.modules.get(".".join(parts[:k])), attr, None) is builder:
            return f"{'.'.join(parts[:k])}:{attr}"
    return f"{builder.__module__}:{attr}"  # pragma: no cover


class _WouldDownload(ConnectionError):
    """Raised instead of torch.hub's download while ``plugdrop layers`` builds a model."""


def _refuse_download(url: str, *args: Any, **kwargs: Any) -> None:
    raise _WouldDownload(url)


def _model(name: str, kwargs: dict[str, Any]) -> torch.nn.Module:
    """The model, built without downloading: torch.hub's downloads raise instead (weights in
    its local cache still load), and what torch printed about them is dropped with the error;
    anything else the build printed (warnings) is passed on."""
    from ..ablate.errors import ConfigError

    out, err = io.StringIO(), io.StringIO()
    download = torch.hub.download_url_to_file
    setattr(torch.hub, "download_url_to_file", _refuse_download)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            model = _build(name, kwargs)
    except _DOWNLOAD_ERRORS as e:
        asked = [k for k in kwargs if "weight" in k or "pretrained" in k]
        fix = (f"--model-kwargs asks for weights ({', '.join(asked)}): the module tree needs "
               f"none, leave {'them' if len(asked) > 1 else 'it'} out" if asked else
               "build it without pretrained weights (e.g. --model-kwargs "
               "'{weights: null}'), or put its weights in torch.hub's cache first")
        what = e.args[0] if isinstance(e, _WouldDownload) else \
            pd.errors.one_line(e, typed=True, period=False, limit=300)
        raise ConfigError(f"model {name!r} tried to download while being built ({what}): "
                          f"plugdrop layers never downloads; {fix}") from None
    except BaseException:
        sys.stdout.write(out.getvalue())
        sys.stderr.write(err.getvalue())
        raise
    finally:
        setattr(torch.hub, "download_url_to_file", download)
    sys.stdout.write(out.getvalue())
    sys.stderr.write(err.getvalue())
    return model


def _module(name: str) -> Any:
    """The module ``name`` (``main`` or ``pkg.models``) as found from the working directory
    first, or a script's file (``train.py``, ``src/train.py``) run as a module of its stem (its
    ``if __name__ == "__main__":`` block is not run)."""
    import importlib
    import importlib.util
    import os

    if name.endswith(".py") or "/" in name:
        path = os.path.abspath(name if name.endswith(".py") else name + ".py")
        stem = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(stem, path)
        if spec is None or spec.loader is None or not os.path.isfile(path):
            raise ImportError(f"no script {path}")
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(path))  # what it imports beside it
        sys.modules[stem] = module
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # plugdrop's entry point does not put it there
    return importlib.import_module(name)


def _build(name: str, kwargs: dict[str, Any]) -> torch.nn.Module:
    import importlib

    from ..ablate.errors import ConfigError

    try:
        if ":" in name:
            module_name, _, attr = name.partition(":")
            try:
                factory = getattr(_module(module_name), attr)
            except (ImportError, AttributeError, OSError) as e:
                raise ConfigError(f"model {name!r}: cannot import {attr} from {module_name} "
                                  f"({e})") from None
            try:
                model = factory(**{**_no_weights(factory), **kwargs})
            except TypeError as e:
                raise ConfigError(f"model {name!r}: bad --model-kwargs: {e}") from None
            if not isinstance(model, torch.nn.Module):
                raise ConfigError(f"model {name!r}: the factory returned "
                                  f"{type(model).__name__}, not a torch.nn.Module; give a "
                                  f"function that builds the model")
            return model
        import timm

        if not timm.is_model(name):
            torchvision = _torchvision_name(name)
            if torchvision is not None:
                raise ConfigError(f"model {name!r} is not a timm model but a torchvision one: "
                                  f"plugdrop layers {torchvision}")
            names = timm.list_models()
            close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
            if not close:
                close = difflib.get_close_matches(name.replace("_", ""), names, n=3,
                                                  cutoff=0.6)
            raise ConfigError(f"model {name!r} is not a timm model"
                              + (f"; did you mean {', '.join(close)}?" if close else
                                 "; see timm.list_models()"))
        try:
            return timm.create_model(name, pretrained=False, **kwargs)
        except TypeError as e:
            raise ConfigError(f"model {name!r}: bad --model-kwargs: {e}") from None
    except (ConfigError, *_DOWNLOAD_ERRORS):
        raise
    except Exception as e:  # the factory's own check of its arguments
        given = f" with --model-kwargs '{_yaml(kwargs)}'" if kwargs else ""
        raise ConfigError(f"model {name!r} could not be built{given}: "
                          f"{pd.errors.one_line(e, typed=True, period=False, limit=300)}") \
            from None


def _yaml(kwargs: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(kwargs, default_flow_style=True, width=1000).strip()


def _dry_run(model: nn.Module, x: torch.Tensor) -> Exception | None:
    """The model's own error on ``x`` (one forward in eval mode, without gradients), if any."""
    model.eval()
    try:
        with torch.no_grad():
            model(x)
    except Exception as e:
        return e
    return None


def _input_fix(name: str, model: nn.Module, kwargs: dict[str, Any],
               size: tuple[int, int, int]) -> str:
    """How to give ``model`` an input it takes, as far as the model tells."""
    c, h, w = size
    built = getattr(getattr(model, "patch_embed", None), "img_size", None)
    if isinstance(built, (tuple, list)) and len(built) == 2 and tuple(built) != (h, w):
        # a ViT-like model (timm's patch embedding) is built for one image size
        return (f"build it for {h}x{w} with --model-kwargs "
                f"'{_yaml({**kwargs, 'img_size': h if h == w else [h, w]})}', or give the size "
                f"it was built for: --input-size {c} {built[0]} {built[1]}")
    first = next((m for m in model.modules() if isinstance(m, _CONVS)), None)
    if first is not None and first.in_channels != c:
        timm_fix = (f", or build it for {c} channels with --model-kwargs "
                    f"'{_yaml({**kwargs, 'in_chans': c})}'" if ":" not in name else "")
        return (f"it takes {first.in_channels} input channels: --input-size "
                f"{first.in_channels} {h} {w}{timm_fix}")
    cfg = getattr(model, "pretrained_cfg", None)
    made = cfg.get("input_size") if isinstance(cfg, dict) else None
    return ("give an input size it takes with --input-size C H W"
            + (f" (it was made for {' '.join(map(str, made))})" if made else ""))


def run(args: argparse.Namespace) -> int:
    import yaml


    from ..ablate.errors import ConfigError

    c, h, w = args.input_size
    if min(c, h, w) < 1:
        return _fail(f"--input-size {c} {h} {w}: every size must be >= 1, e.g. --input-size "
                     f"3 224 224")
    if args.depth is not None and args.depth < 0:
        return _fail(f"--depth {args.depth}: give a depth >= 0 (0: the model only)")
    kwargs: Any = {}
    if args.model_kwargs:
        try:
            kwargs = yaml.safe_load(args.model_kwargs)
        except yaml.YAMLError as e:
            return _fail(f"--model-kwargs {args.model_kwargs!r} is not valid YAML "
                         f"({getattr(e, 'problem', e)}); write a mapping such as "
                         f"'{{img_size: 64}}'")
        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, dict):
            return _fail(f"--model-kwargs {args.model_kwargs!r}: write a mapping such as "
                         f"'{{img_size: 64}}'")
    try:
        model = _model(args.model, kwargs)
    except ConfigError as e:
        return _fail(str(e))
    x = torch.zeros(1, c, h, w)
    failure = _dry_run(model, x)
    if failure is not None:
        return _fail(f"model {args.model!r} fails on the input {tuple(x.shape)} "
                     f"(--input-size {c} {h} {w}): "
                     f"{pd.errors.one_line(failure, typed=True, period=False, limit=300)}; "
                     f"{_input_fix(args.model, model, kwargs, (c, h, w))}")
    try:
        if args.residual:
            pd.residual_branches(model, x)  # remembered: the table marks them R
        whole = pd.layers(model, x, selector=args.match)
    except (ValueError, TypeError, RuntimeError) as e:
        return _fail(pd.errors.one_line(e))
    table = pd.LayerTable([r for r in whole if args.depth is None or r.depth <= args.depth])
    title = f"{args.model}: {len(table)} modules, input (1, {c}, {h}, {w})"
    if args.match:
        title += f"; * = picked by {args.match!r} ({_count(whole, table, 'picked', args.depth)})"
    if args.residual:
        title += (f"; R = residual branch ({_count(whole, table, 'residual', args.depth)}: "
                  f"select them with 'residual:')")
    table.title = title + "; last column: the layout DropBlock would read"
    print(table)
    return 0


def _count(whole: list[Any], shown: list[Any], mark: str, depth: int | None) -> str:
    """How many rows carry ``mark`` (``picked``, ``residual``): those the table lists, and
    those ``--depth`` hides (``"4"``, ``"0 shown, 4 deeper than --depth 2"``)."""
    listed = sum(getattr(r, mark) for r in shown)
    hidden = sum(getattr(r, mark) for r in whole) - listed
    return f"{listed} shown, {hidden} deeper than --depth {depth}" if hidden else str(listed)
