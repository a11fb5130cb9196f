"""``plugdrop search CONFIG --out OUT``: search where and how much to regularize within a budget
of runs, and confirm the best candidate against the baseline on fresh seeds.

Exit status: 0 when the search ended (whatever the verdict), 1 when runs failed or no
candidate could be confirmed, 2 for a mistake (one line, before any run trains), 74 for a
fault of the environment (one line with the command that continues), 128 + signal when a
signal stopped it (the command that resumes is printed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    from .study import add_launcher_arguments

    p = sub.add_parser("search", help="search where and how much to regularize within a "
                                      "budget of runs, and confirm the best on fresh seeds")
    p.add_argument("config", help="an ablation config with a search: block (budget, space)")
    p.add_argument("--out", help="the search folder (default: the config's out)")
    p.add_argument("--resume", action="store_true",
                   help="continue the search in --out; it ends as an uninterrupted one")
    add_launcher_arguments(p, with_shard=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..ablate.search import load_search, require_optuna
    from ..ablate.study import Search
    from . import study

    def strategy() -> Search:
        require_optuna()
        sc = load_search(args.config)
        return Search(sc, Path(args.out or sc.base.out))

    return study.run("search", args, strategy, _finish)


def _finish(args: argparse.Namespace, strategy: Any, outcome: Any, d: Any) -> int:
    """The failed runs, the verdict (or how to resume); the exit status."""
    from ..ablate.errors import Exit
    from ..ablate.search.report import summary_line
    from . import study

    out = strategy.out
    for rid in outcome.failed:
        study.say("search", f"run {rid} failed; see "
                            f"{strategy.runs_in / 'runs' / rid / 'failed.json'}")
    if outcome.stopped:
        study.stopped_lines("search", args, out, outcome, strategy.cfg.program is not None)
        return Exit.FAILED
    doc = json.loads((out / "search.json").read_text())
    print(f"plugdrop search: {summary_line(doc)}")
    files = [p for p in outcome.files if p.parent == out]
    print(f"Written: {', '.join(str(p) for p in files)}")
    confirmed = doc.get("confirmation") is not None and doc["confirmation"].get("complete")
    return Exit.OK if confirmed and not outcome.failed else Exit.FAILED
