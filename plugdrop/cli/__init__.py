"""The ``plugdrop`` command: ``plugdrop ablate``, ``plugdrop report``, ``plugdrop plan``,
``plugdrop search`` and ``plugdrop layers``.

    plugdrop layers resnet18 --input-size 3 32 32 --match "layer3.*"
    plugdrop ablate examples/digits.yaml --out runs/digits --epochs 5 --seeds 0 1 2
    plugdrop ablate examples/digits.yaml --out runs/digits --resume
    plugdrop report runs/digits
    plugdrop plan --seeds 3..12 --effects 1,0,0,0
    plugdrop search search.yaml --out runs/search
    torchrun --nproc_per_node 2 -m plugdrop ablate examples/digits.yaml

``python -m plugdrop`` is the same command.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from . import ablate, layers, plan, report, search

__all__ = ["build_parser", "entry", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="plugdrop", description="Ablations of regularizers "
                                "retrofitted with plugdrop, and the layers of a model.")
    sub = p.add_subparsers(dest="command", required=True)
    layers.add_parser(sub)
    ablate.add_parser(sub)
    report.add_parser(sub)
    plan.add_parser(sub)
    search.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the ``plugdrop`` command line; returns the exit status."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `plugdrop ablate ... --list | head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def entry() -> NoReturn:
    """The ``plugdrop`` command and ``python -m plugdrop``: :func:`main`, its status the
    process's. What the command made is left to the process's end (:func:`gc.freeze`) instead
    of to a last collection over every object, which takes a second or more once torch (and
    timm) are loaded: in each torchrun rank and launcher's job too. Files are closed and
    ``atexit`` handlers run as before."""
    code = main()
    import gc

    gc.freeze()
    raise SystemExit(code)
