"""The fixed design (``seeds: [0, 1, 2]``): every variant x seed, in one round; a run that
finished before is skipped. With ``--shard I/N`` (:mod:`plugdrop.ablate.launch.shard`) only the
I-th share of the runs. Its verdicts are decided once every run ended, by Holm's procedure
(:mod:`plugdrop.ablate.decide.fixed`, in the report)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import runs
from ..config import AblationConfig
from ..launch.shard import select
from ..train import on_rank0
from .round import Round
from .strategy import Context, Strategy

__all__ = ["Grid"]


class Grid(Strategy):
    """Every run of a fixed design (of one shard), once.

    Args:
        cfg: the config (a list of seeds).
        out: the study's folder.
        shard: ``(i, n)``: only the i-th of n shares of the runs.
    """

    name = "grid"

    def __init__(self, cfg: AblationConfig, out: Path, shard: tuple[int, int] | None = None
                 ) -> None:
        super().__init__(cfg, out)
        self.shard = shard
        self.done = False
        self.ctx: Context | None = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "seeds": list(self.cfg.seed_list)}

    def open(self, ctx: Context) -> None:
        self.ctx = ctx

    def next_round(self) -> Round | None:
        if self.done:
            return None
        self.done = True
        assert self.ctx is not None
        mine = self.cfg.runs() if self.shard is None else select(self.cfg.runs(), *self.shard)
        dirs = [runs.RunDir(self.out, v, s) for v, s in mine]
        states = on_rank0(self.ctx.d, lambda: [rd.status for rd in dirs])
        todo = tuple(rd for rd, st in zip(dirs, states) if st != runs.FINISHED)
        title = f"{len(self.cfg.seed_list)} seeds"
        return Round(todo, self.cfg, title, finished=len(dirs) - len(todo))
