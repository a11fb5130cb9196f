"""``plugdrop report DIR``: rebuild the table, CSV, JSON and plots of an ablation from its run
folders, at any time (also while the ablation is still running elsewhere)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="rebuild the summary of an ablation folder from its runs")
    p.add_argument("out", help="the folder of a plugdrop ablate (its --out)")
    p.add_argument("--no-plots", action="store_true", help="tables, CSV and JSON only")
    p.add_argument("--decide-on", metavar="METRIC",
                   help="judge the runs on another metric than the config's decide_on "
                        "(nothing trains; the page says so); with --goal for a metric of a "
                        "program's own")
    p.add_argument("--goal", choices=("max", "min"), help="the goal of --decide-on's metric")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="another value of a setting that only judges (margin, alpha; "
                        "spending, passing of an adaptive design), as plugdrop ablate --set "
                        "takes it; metrics_from is read again by plugdrop ablate --resume")
    p.set_defaults(func=run)


def _judging(args: argparse.Namespace) -> list[str]:
    """The ``--set`` items of ``--decide-on``, ``--goal`` and ``--set``."""
    items = list(args.overrides)
    if args.decide_on is not None:
        metric = args.decide_on
        items.append(f"decide_on={{metric: {metric}, goal: {args.goal}}}" if args.goal
                     else f"decide_on={metric}")
    elif args.goal is not None:
        items.append(f"decide_on.goal={args.goal}")
    return items


def _own_metric(out: Path, stored: Any, metric: str) -> None:
    """``--decide-on M`` without ``--goal`` that plugdrop does not know: refused as a metric
    no run logged, or for want of its goal."""
    from ..ablate.errors import ConfigError
    from ..ablate.report.judging import logged_metrics, unlogged

    logged = logged_metrics(out, stored)
    if logged and metric not in logged:
        raise unlogged(metric, out, logged)
    if metric in logged:
        raise ConfigError(f"--decide-on {metric}: a metric of the program's own needs its "
                          f"goal: add --goal max (higher is better) or --goal min; nothing "
                          f"was written")


def run(args: argparse.Namespace) -> int:
    from ..ablate.errors import ConfigError, Exit, Fault
    from ..ablate.report import write_report

    out = Path(args.out)
    if not (out / "ablation.json").is_file():
        print(f"plugdrop report: {out} is no plugdrop ablate folder (no ablation.json in it); "
              f"give the --out of an ablation", file=sys.stderr)
        return Exit.MISTAKE
    try:
        cfg = None
        items = _judging(args)
        if items:
            from ..ablate import config
            from ..ablate.report.judging import check_rejudging

            stored, _ = config.load_settings(out)
            overrides = config.parse_overrides(items)
            try:
                cfg = config.rejudged(stored, overrides, "--set" if args.overrides else
                                      "--decide-on")
            except ConfigError:
                if args.decide_on is None or args.goal is not None:
                    raise
                _own_metric(out, stored, args.decide_on)
                raise
            check_rejudging(out, cfg, {str(o.path).split(".")[0] for o in overrides})
        rep = write_report(out, plots=not args.no_plots, cfg=cfg)
    except ConfigError as e:
        print(f"plugdrop report: {e}", file=sys.stderr)
        return Exit.MISTAKE
    except Fault as e:
        print(f"plugdrop report: {e}; make room or make it writable (or copy the folder and "
              f"report there), then run plugdrop report {out} again", file=sys.stderr)
        return Exit.FAULT
    print(rep.table)
    print(f"\n{rep.finished} runs finished, {rep.failed} failed, {rep.incomplete} incomplete. "
          f"Written: {', '.join(str(p) for p in rep.files)}")
    return Exit.OK
