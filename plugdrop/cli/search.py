"""``plugdrop search CONFIG --out OUT``: search where and how much to regularize within a budget
of runs, and confirm the best candidate against the baseline on fresh seeds.

Exit status: 0 when the search ended (whatever the verdict), 1 when runs failed or no
candidate could be confirmed, 2 for a mistake (one line, before any run trains), 74 for a
fault of the environment (one line with the command that continues), 128 + signal when a
signal stopped it (the command that resumes is printed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    from ..ablate.launch import LAUNCHERS, options, takers

    p = sub.add_parser("search", help="search where and how much to regularize within a "
                                      "budget of runs, and confirm the best on fresh seeds")
    p.add_argument("config", help="an ablation config with a search: block (budget, space)")
    p.add_argument("--out", help="the search folder (default: the config's out)")
    p.add_argument("--resume", action="store_true",
                   help="continue the search in --out; it ends as an uninterrupted one")
    g = p.add_argument_group("scaling out (docs: guide/scaling)")
    g.add_argument("--launcher", default="local", metavar="{" + ",".join(LAUNCHERS) + "}",
                   help="where the runs train: " + ", ".join(LAUNCHERS))
    options.add_arguments(g, takers())
    p.set_defaults(func=run)


def _say(line: str) -> None:
    print(f"plugdrop search: {line}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from ..ablate.errors import ConfigError, Exit, Fault, one_line
    from ..ablate.launch import gpus_for_jobs, make_launcher, options
    from ..ablate.runner import resume_command
    from ..ablate.search import load_search, require_optuna, run_search
    from ..ablate.search.report import summary_line
    from ..ablate.train import resolve_device, setup_distributed

    out: Path | None = None
    try:
        require_optuna()
        sc = load_search(args.config)
        out = Path(args.out or sc.base.out)
        opts = options.from_args(args)
        launcher = make_launcher(args.launcher, opts)
        idle = gpus_for_jobs(sc.base, launcher.name, opts)
        if idle is not None:
            _say(idle)
        d = setup_distributed(resolve_device(sc.base.device, sc.base.loc("device")))
        outcome = run_search(sc, out=out, resume=args.resume, d=d, launcher=launcher,
                             options=opts)
    except KeyboardInterrupt:
        _say("interrupted before any run trained")
        return Exit.SIGNAL + 2
    except ConfigError as e:
        _say(one_line(e))
        return Exit.MISTAKE
    except Fault as e:
        again = resume_command(args.argv, out) if out is not None else "--resume"
        fix = f"; {e.fix}" if e.fix else ""
        _say(f"{one_line(e)}{fix} with: {again}")
        return Exit.FAULT
    for rid in outcome.failed:
        _say(f"run {rid} failed; see {out / 'trials' / 'runs' / rid / 'failed.json'}")
    if outcome.stopped:
        _say(f"stopped; every run kept what it reached. Resume with:\n  "
             f"{resume_command(args.argv, out)}")
        return Exit.SIGNAL + outcome.stopped
    import json

    doc = json.loads((out / "search.json").read_text())
    print(f"plugdrop search: {summary_line(doc)}")
    print(f"Written: {', '.join(str(p) for p in outcome.files)}")
    confirmed = doc.get("confirmation") is not None and doc["confirmation"].get("complete")
    return Exit.OK if confirmed and not outcome.failed else Exit.FAILED
