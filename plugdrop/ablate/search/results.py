"""What a search leaves: ``OUT/search.json`` (the best with its attachments resolved, the
confirmation's verdict, seeds and interval, the search's seeds, the runs, every candidate with
its estimate, the importance of each dimension), ``OUT/best.yaml`` (the winner as an
``attach_all`` spec and an ablation variant) and ``OUT/report.html`` (:mod:`.report`).

Estimates are shown as the ablation shows them: the metric minus the baseline's, in display
units (percentage points for accuracies), so that for a loss a better candidate lies below 0.
A candidate's own interval is a plain t-interval over the seeds the search gave it: it takes
no account of the choice among many (the winner's curse); the confirmation's does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .. import runs
from ..config.locations import plain
from ..decide.race import Candidate, Step
from .setup import SearchConfig

__all__ = ["FORMAT", "estimate", "search_json", "write_results"]

#: the version of ``search.json``'s layout
FORMAT = 1


def _num(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def estimate(c: Candidate, sc: SearchConfig) -> dict[str, Any]:
    """``c``'s paired difference to the baseline as shown (metric minus baseline's)."""
    conf = 1.0 - sc.base.decision.alpha
    low, high = c.interval(conf) if c.n >= 2 else (None, None)
    mean = _num(c.mean)
    if not sc.base.decision.higher_is_better:
        mean, low, high = (None if mean is None else -mean, None if high is None else -high,
                           None if low is None else -low)
    return {"mean": mean, "low": _num(low), "high": _num(high), "n": c.n, "confidence": conf}


def _candidate(c: Candidate, sc: SearchConfig, atts: Any, number: int | None
               ) -> dict[str, Any]:
    return {"name": c.name, "trial": number, "params": dict(c.params),
            "attachments": plain(atts), "status": c.status, "reason": c.reason,
            "error": c.error, "seeds": list(c.seeds), "round": c.round,
            "estimate": estimate(c, sc)}


def search_json(sc: SearchConfig, step: Step, attachments: Mapping[int, Any],
                numbers: Mapping[int, int], importance: Mapping[str, float],
                evaluator: str) -> dict[str, Any]:
    """``search.json`` as data."""
    rule = sc.base.decision
    best = step.best
    conf = None
    if step.confirmation is not None:
        d = step.confirmation
        mean, low, high = d.shown()
        conf = {"verdict": d.verdict, "seeds": list(step.confirm_seeds), "n": d.n,
                "interval": {"mean": mean, "low": low, "high": high},
                "p_adjusted": d.p, "reason": d.reason, "procedure": d.procedure,
                "complete": step.phase == "done"}
    return {
        "format": FORMAT, "phase": step.phase, "source": sc.base.source,
        "metric": rule.metric.name, "goal": "max" if rule.higher_is_better else "min",
        "units": "percentage points" if rule.metric.scale == 100.0 else "the metric's",
        "alpha": rule.alpha, "margin": rule.margin,
        "budget": sc.spec.budget, "runs": step.runs, "rounds": step.rounds,
        "search_seeds": list(sc.search_seeds), "seeds": {"min": sc.seeds_min,
                                                         "max": sc.seeds_max,
                                                         "step": sc.seeds_step},
        "sampler": {"name": sc.spec.sampler, **dict(sc.spec.sampler_options),
                    "seed": sc.spec.seed}, "parallel": sc.spec.parallel,
        "space": [d.describe() for d in sc.spec.dimensions],
        "best": None if best is None else {
            "candidate": best.name, "params": dict(best.params),
            "attachments": plain(attachments[best.index]), "estimate": estimate(best, sc)},
        "confirmation": conf,
        "importance": {"evaluator": evaluator, "values": dict(importance)},
        "candidates": [_candidate(c, sc, attachments[c.index], numbers.get(c.index))
                       for c in step.candidates],
    }


def best_yaml(doc: Mapping[str, Any]) -> bytes | None:
    """``best.yaml``: the winner's attachments, with what the search said of it."""
    from .report import against

    best, conf = doc.get("best"), doc.get("confirmation")
    if best is None:
        return None
    verdict = (f"confirmed {against(conf['verdict'])} on seeds {conf['seeds']} that "
               f"the search never used" if conf and conf.get("complete") else "not confirmed yet")
    head = (f"# plugdrop search: {best['candidate']}, the best of {len(doc['candidates'])} "
            f"candidates ({doc['runs']} runs), {verdict}.\n"
            f"# An attach_all spec: plugdrop.attach_all(model, yaml.safe_load(open("
            f"\"best.yaml\")))\n"
            f"# An ablation variant: variants: {{baseline: [], best: <this list>}}\n")
    body = yaml.safe_dump(best["attachments"], sort_keys=False, default_flow_style=None)
    return (head + body).encode()


def write_results(out: Path, sc: SearchConfig, step: Step, proposals: Any,
                  attachments: Mapping[int, Any], final: bool) -> list[Path]:
    """Write ``search.json`` (every round) and, ``final``, ``best.yaml`` and the report with
    the importance of each dimension (seconds of fANOVA and matplotlib)."""
    from .proposals import importance

    values, evaluator = importance(proposals) if final else ({}, "")
    numbers = {k: t.number for k, t in proposals.trials.items()}
    doc = search_json(sc, step, attachments, numbers, values, evaluator)
    if not final:  # keep the importance of the last full report
        try:
            old = json.loads((out / "search.json").read_text())
            doc["importance"] = old.get("importance", doc["importance"])
        except (OSError, ValueError, AttributeError):
            pass
    files = [out / "search.json"]
    runs.atomic_write_json(out / "search.json", doc, "the search's results")
    if final:
        best = best_yaml(doc)
        if best is not None:
            runs.atomic_write_bytes(out / "best.yaml", best, "the best candidate")
            files.append(out / "best.yaml")
        from .report import render

        runs.atomic_write_bytes(out / "report.html", render(doc), "the search's report")
        files.append(out / "report.html")
    return files
