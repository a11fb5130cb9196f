"""The adaptive design (``seeds: {min: 3, max: 12}``): seeds in rounds, a variant stops
receiving seeds once its difference to the baseline is decided
(:class:`~plugdrop.ablate.decide.Design`: exact group-sequential boundaries).

The design is a pure function of the values the runs ended with; this strategy keeps those
values as runs end (what ended before is read once, when the study opens) and replays the
design over them between rounds: a resumed ablation asks for the same runs and takes the same
decisions as an uninterrupted one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import runs
from ..config import AblationConfig, legacy_design
from ..decide import Design, Replay, design_of
from ..results import Run, run_value
from ..train import on_rank0
from .round import Round
from .strategy import Context, Strategy

__all__ = ["Adaptive"]


class Adaptive(Strategy):
    """Seeds in rounds until every variant is decided.

    Args:
        cfg: the config (``seeds: {min, max}``, a baseline).
        out: the study's folder.
    """

    name = "adaptive"

    def __init__(self, cfg: AblationConfig, out: Path) -> None:
        super().__init__(cfg, out)
        self.values: dict[str, dict[int, float | None]] = {}
        self.design: Design | None = None
        self.replay: Replay | None = None
        self.asked: list[tuple[str, int]] | None = None
        self.metric = cfg.decision.metric.name

    def describe(self) -> dict[str, Any]:
        plan = self.cfg.plan
        assert plan is not None
        return {"name": self.name, "min": plan.min, "max": plan.max, "step": plan.step,
                "first": plan.first}

    def open(self, ctx: Context) -> None:
        # a folder an older plugdrop started keeps the design it started with
        design = design_of(self.cfg, on_rank0(ctx.d, lambda: legacy_design(self.out)))
        assert design is not None  # an adaptive config has a baseline (config.check_together)
        self.design = design
        for run in ctx.ended_before():
            self.ended(run)

    def ended(self, run: Run) -> None:
        done, value = run_value(run, self.metric)
        if done:
            self.values.setdefault(run.variant, {})[run.seed] = value

    def next_round(self) -> Round | None:
        assert self.design is not None
        rep = self.replay = self.design.replay(self.values)
        if rep.complete or not rep.needed:
            return None
        if rep.needed == self.asked:
            return None  # nothing ended last round (a launcher that trains nothing): do not spin
        self.asked = list(rep.needed)
        title = f"round {len(rep.rounds)}: {rep.rounds[-1]} of at most {self.design.plan.max} seeds"
        return Round(tuple(runs.RunDir(self.out, v, s) for v, s in rep.needed), self.cfg, title)

    def decisions(self) -> list[dict[str, Any]] | None:
        return None if self.replay is None else list(self.replay.events)

    def result(self) -> Replay | None:
        return self.replay
