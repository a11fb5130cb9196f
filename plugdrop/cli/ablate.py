"""``plugdrop ablate CONFIG``: train every variant x seed of a YAML config into run folders.

Exit status: 0 when every run finished, 1 when a run failed (the others still trained),
2 for a mistake in the config, data or output folder (one line, before any training, printed
once by rank 0 under torchrun, whose launcher then adds its own failure report),
74 when a fault of the environment stopped it (a full disk, a read-only folder, data that
vanished: one line with the command that continues; no run is marked failed),
130 / 143 when SIGINT / SIGTERM stopped it (the command that resumes is printed).

The flags of settings (``--epochs``...) come from the runner's settings table, those of the
launchers (``--cpus-per-run``...) from their options table: both are declared once.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    from ..ablate import config
    from .study import add_launcher_arguments

    p = sub.add_parser("ablate", help="train every variant x seed of a YAML config and "
                                      "compare them")
    p.add_argument("config", nargs="?", help="the YAML config (see examples/digits.yaml)")
    p.add_argument("--resume", action="store_true",
                   help="continue the ablation in --out: skip finished runs, continue "
                        "unfinished ones from their last checkpoint")
    p.add_argument("--accept-data-change", action="store_true",
                   help="with --resume: go on although the data folder's files changed since "
                        "the ablation started (another split than its finished runs had)")
    p.add_argument("--open", action="store_true",
                   help="open report.html at its verdicts in the web browser when the "
                        "ablation ends (where there is a graphical one; else its path is "
                        "printed)")
    p.add_argument("--list", action="store_true",
                   help="print the runs (variant x seed, grids expanded) and the config's hash "
                        "(on stderr), and exit")
    p.add_argument("--settings", action="store_true",
                   help="print the reference of every setting (defaults, flags) and exit")
    for name, s in config.settings().items():
        if s.flag is not None and s.subflags:  # seeds: a list here, its mapping by subflags
            subs = " ".join(f"{config.flag_name(f'{name}_{sub}')} N" for sub in s.subflags)
            p.add_argument(config.flag_name(name), type=_listed(s.flag, subs), nargs="+",
                           help=f"the {name} of a fixed design, each a separate argument "
                                f"({config.flag_name(name)} 0 1 2); an adaptive design's: "
                                f"{subs} (config key: {name}; in the config or --set "
                                f"'{name}={{min: 3, max: 12}}' it also takes the mapping)")
        elif s.flag is not None:
            p.add_argument(config.flag_name(name), type=s.flag, nargs="+" if s.many else None,
                           help=f"{_plain(s.help)} (config key: {name})")
        for sub in s.subflags:
            p.add_argument(config.flag_name(f"{name}_{sub}"), type=int, metavar="N",
                           help=f"(config key: {name}.{sub})")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                   help="override any setting, nested ones too: --set image_size=24, "
                        "--set variants.dropblock.0.p=0.2 (repeatable)")
    add_launcher_arguments(p, with_shard=True)
    p.set_defaults(func=run)


def _listed(kind: Any, subs: str) -> Any:
    """The type of one item of a flag that takes a list (``--seeds 0 1 2``), whose mapping is
    given by its subflags: a mapping given here is refused saying so."""

    def convert(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an integer' if kind is int else 'a ' + kind.__name__}: "
                f"give the items as separate arguments, or an adaptive design as {subs}") \
                from None

    return convert


def _plain(text: str) -> str:
    """Help text without its Markdown marks (the settings page of the docs keeps them)."""
    return text.replace("`", "").replace("**", "")


def _overrides(args: argparse.Namespace) -> list[Any]:
    from ..ablate import config

    out = config.parse_overrides(args.set)
    for name, s in config.settings().items():
        if s.flag is not None:
            value = getattr(args, name)
            if value is not None:
                out.append(config.flag(config.flag_name(name), name, value))
        for sub in s.subflags:
            value = getattr(args, f"{name}_{sub}")
            if value is not None:
                out.append(config.flag(config.flag_name(f"{name}_{sub}"), f"{name}.{sub}",
                                       value))
    return out


def run(args: argparse.Namespace) -> int:
    from ..ablate import config
    from ..ablate.errors import ConfigError
    from ..ablate.launch.shard import parse_shard
    from ..ablate.study import strategy_of
    from ..ablate.train import world_from_env
    from . import study

    if args.settings:
        print(config.reference())
        return 0

    def strategy() -> Any:
        if args.config is None:
            raise ConfigError("give the YAML config: plugdrop ablate CONFIG (e.g. "
                              "examples/digits.yaml)")
        cfg = config.load(args.config, _overrides(args))
        if args.list:
            if world_from_env()[0] == 0:
                for v, s in cfg.runs():
                    print(f"{v}  seed={s}")
                print(f"config hash: {cfg.hash()} (what a worker started by hand takes as "
                      f"--config-hash)", file=sys.stderr)
            return None
        return strategy_of(cfg, Path(cfg.out), shard())

    def shard() -> tuple[int, int] | None:
        return None if args.shard is None else parse_shard(args.shard)

    return study.run("ablate", args, strategy, _finish, shard,
                     accept_data_change=args.accept_data_change)


def _finish(args: argparse.Namespace, strategy: Any, outcome: Any, d: Any) -> int:
    """The table, the failed runs and how to resume; the exit status."""
    from ..ablate.errors import Exit
    from . import study

    out = strategy.out
    code: int = Exit.OK
    if not d.main:
        return Exit.FAILED if outcome.failed else code
    if outcome.report_fault is not None:  # every run ended; only the report could not be written
        print(f"plugdrop ablate: {outcome.report_fault}; make room, then write it with: "
              f"plugdrop report {out}", file=sys.stderr, flush=True)
        code = Exit.FAULT
    rep = outcome.report
    if rep is not None:
        print()
        print(rep.table)
        print(f"\n{rep.finished} runs finished, {rep.failed} failed, {rep.incomplete} "
              f"incomplete. Written: {', '.join(str(p) for p in rep.files)}")
        page = out / "report.html"
        if getattr(args, "open", False) and page.exists():
            print(open_page(page, "verdicts"))
    for rid in outcome.failed:
        failed = out / "runs" / rid / "failed.json"
        print(f"plugdrop ablate: run {rid} failed; see {failed}", file=sys.stderr)
    study.stopped_lines("ablate", args, out, outcome,
                        strategy.cfg.program is not None)
    if outcome.failed and code == Exit.OK:
        code = Exit.FAILED
    return code


def open_page(page: Path, anchor: str) -> str:
    """Open ``page#anchor`` in a graphical web browser, if this session has one (a display on
    Linux and the BSDs; always on macOS and Windows); the line that says what happened."""
    import webbrowser

    uri = f"{page.resolve().as_uri()}#{anchor}"
    graphical = sys.platform in ("darwin", "win32") or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    try:
        opened = graphical and webbrowser.open(uri)
    except webbrowser.Error:
        opened = False
    if opened:
        return f"Opened the report at its verdicts in the web browser: {uri}"
    return f"The verdicts: {page}#{anchor} (no graphical web browser here: open it anywhere)"
