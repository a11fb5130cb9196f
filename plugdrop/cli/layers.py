"""``plugdrop layers MODEL``: the module tree of a model with each module's output from one dry
forward, marking what a selector picks (to write selectors without reading the model's code)."""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import Any

import torch


def add_parser(sub: Any) -> None:
    p = sub.add_parser("layers", help="the module tree of a model, with output shapes, and "
                                      "what a selector picks")
    p.add_argument("model", help="a timm model name (pretrained=False) or package.module:factory")
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


def _model(name: str, kwargs: dict[str, Any]) -> torch.nn.Module:
    import importlib

    from ..ablate.errors import ConfigError

    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"model {name!r}: cannot import {attr} from {module_name} "
                              f"({e})") from None
        try:
            return factory(**kwargs)
        except TypeError as e:
            raise ConfigError(f"model {name!r}: bad --model-kwargs: {e}") from None
    import timm

    if not timm.is_model(name):
        names = timm.list_models()
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        if not close:
            close = difflib.get_close_matches(name.replace("_", ""), names, n=3, cutoff=0.6)
        raise ConfigError(f"model {name!r} is not a timm model"
                          + (f"; did you mean {', '.join(close)}?" if close else
                             "; see timm.list_models()"))
    try:
        return timm.create_model(name, pretrained=False, **kwargs)
    except TypeError as e:
        raise ConfigError(f"model {name!r}: bad --model-kwargs: {e}") from None


def run(args: argparse.Namespace) -> int:
    import yaml

    import plugdrop as pd

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
    try:
        branches = pd.residual_branches(model, x) if args.residual else []
        table = pd.layers(model, x, selector=args.match, max_depth=args.depth)
    except (ValueError, TypeError, RuntimeError) as e:
        return _fail(" ".join(str(e).split()))
    title = f"{args.model}: {len(table)} modules, input (1, {c}, {h}, {w})"
    if args.match:
        title += f"; * = picked by {args.match!r} ({sum(r.picked for r in table)})"
    if args.residual:
        title += f"; R = residual branch ({len(branches)}: select them with 'residual:')"
    table.title = title + "; last column: the layout DropBlock would read"
    print(table)
    return 0
