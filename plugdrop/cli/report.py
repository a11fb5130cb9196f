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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..ablate.errors import ConfigError, Exit, Fault
    from ..ablate.report import write_report

    out = Path(args.out)
    if not (out / "ablation.json").is_file():
        print(f"plugdrop report: {out} is no plugdrop ablate folder (no ablation.json in it); "
              f"give the --out of an ablation", file=sys.stderr)
        return Exit.MISTAKE
    try:
        rep = write_report(out, plots=not args.no_plots)
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
