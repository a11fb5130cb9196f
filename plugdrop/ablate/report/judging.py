"""A report that judges the runs otherwise than their config (``plugdrop report
--decide-on`` / ``--set``), checked before anything is written: every setting it takes must
change what it reports, and a decision metric must be one the runs logged. A refusal is one
line, and leaves every file of the folder as it was.

    >>> check_rejudging(Path("out"), cfg, ["decide_on"])  # doctest: +SKIP
    ConfigError: --decide-on test_accc: no run of out logged it; they logged test_acc,
    test_loss (did you mean 'test_acc'?); nothing was written
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from ..config import AblationConfig
from ..config.locations import suggest
from ..errors import ConfigError
from ..results import load_ablation
from ..runs import logged_names

__all__ = ["check_rejudging", "logged_metrics", "unlogged"]

#: the settings of the adaptive design alone: a fixed design's report has no use for them
_ADAPTIVE = ("spending", "passing")


def check_rejudging(out: Path, cfg: AblationConfig, names: Collection[str]) -> None:
    """Refuse, in one line, a report of ``out`` under ``cfg`` (its config with the settings
    ``names`` changed) that would report nothing it says: ``metrics_from`` (where a
    program's metrics are read, when its run ends: the report reads what the runs hold), a
    setting of the adaptive design for a fixed one, or a decision metric no run logged (the
    metrics they logged named, and the closest).

    Raises:
        ConfigError: the line.
    """
    if "metrics_from" in names:
        raise ConfigError(
            f"--set metrics_from: a report reads the metrics the runs of {out} hold "
            f"(metrics.jsonl, copied from metrics_from when each run ended); to read them "
            f"from another source, continue the ablation with plugdrop ablate CONFIG --out "
            f"{out} --resume --set metrics_from=..., which reads it again for every run; "
            f"nothing was written")
    fixed = [n for n in _ADAPTIVE if n in names and cfg.plan is None]
    if fixed:
        raise ConfigError(
            f"--set {fixed[0]}: {out} is a fixed design (seeds: a list), which {fixed[0]} does "
            f"not judge ({', '.join(_ADAPTIVE)} are an adaptive design's: seeds: {{min, "
            f"max}}); its verdicts follow decide_on, margin and alpha; nothing was written")
    if "decide_on" not in names:
        return
    metric = cfg.decide_on.name
    logged = logged_metrics(out, cfg)
    if metric in logged or not logged:
        return
    raise unlogged(metric, out, logged)


def logged_metrics(out: Path, cfg: AblationConfig) -> list[str]:
    """The metrics the runs of ``out`` logged, in the order first met."""
    ab = load_ablation(out, cfg)
    return logged_names([rec for r in ab.runs for rec in r.metrics])


def unlogged(metric: str, out: Path, logged: list[str]) -> ConfigError:
    """The refusal of ``--decide-on metric``, which no run of ``out`` logged."""
    shown = ", ".join(logged[:20]) + (" ..." if len(logged) > 20 else "")
    return ConfigError(f"--decide-on {metric}: no run of {out} logged it; they logged {shown}"
                       f"{suggest(metric, logged)}; nothing was written")
