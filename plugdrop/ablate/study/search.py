"""The search (``plugdrop search``): candidates proposed by a sampler
(:class:`~plugdrop.ablate.search.Proposals`), raced against the baseline on the seeds each was
given (:class:`~plugdrop.ablate.decide.race.Race`), then the best confirmed on fresh seeds by the
adaptive design. Each round's runs train into ``OUT/trials``, an ablation folder whose variants
are the baseline and the candidates so far (read as any ablation's: ``plugdrop report
OUT/trials``); ``OUT/search-config.json`` holds what a resumed search must match.

The race advances as runs end; a search stopped at any moment and resumed proposes, races and
confirms what an uninterrupted one does (the proposals are seeded per candidate, the race is a
function of the values).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import runs
from ..config import AblationConfig
from ..decide.race import FAILED, MAX_FAILED_IN_A_ROW, Candidate, Race, Step
from ..errors import ConfigError, one_line
from ..programs import program_of
from ..results import Run, run_value
from ..search import BASELINE, JOURNAL, Proposals, SearchConfig, setup_of
from ..programs import Program
from ..train import Dist
from .folder import SEARCH_RECORD, manifest, record
from .listener import Listener
from .listeners import Console, ReportWriter, SearchResults
from .round import Round
from .strategy import Claim, Context, Strategy

__all__ = ["FIRST_FAILURES", "Search", "TRIALS"]

#: the run folders' ablation, inside the search folder
TRIALS = "trials"
#: candidates that cannot run before any could, after which the space is called wrong
FIRST_FAILURES = 3


class Search(Strategy):
    """Propose, race, confirm.

    Args:
        sc: the checked search config.
        out: the search's folder.
    """

    name = "search"
    command = "search"
    hashed = False

    def __init__(self, sc: SearchConfig, out: Path) -> None:
        super().__init__(sc.base, out)
        self.sc = sc
        self.setup = setup_of(sc)
        self.step: Step | None = None
        self.asked: list[tuple[str, int]] | None = None
        self.checked: set[int] = set()
        self.metric = sc.base.decision.metric.name
        self.ctx: Context | None = None

    @property
    def runs_in(self) -> Path:
        return self.out / TRIALS

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "budget": self.sc.spec.budget,
                "sampler": self.sc.spec.sampler, "seed": self.sc.spec.seed,
                "fingerprint": self.sc.fingerprint()}

    # -- the folder -------------------------------------------------------------------------

    def claim(self, how: Claim) -> str | None:
        """Under the folder's lock: refuse a folder of another search, of this one without
        ``--resume``, an ablation's or one holding other files; else record the search in it
        (``search-config.json``, what ``--resume`` is held to)."""
        out, sc, resume = self.out, self.sc, how.resume
        rec = out / SEARCH_RECORD
        if rec.exists():
            try:
                old = json.loads(rec.read_text())
            except (OSError, ValueError):
                old = {}
            if not isinstance(old, dict) or old.get("fingerprint") != sc.fingerprint():
                raise ConfigError(f"--out {out}: holds another search (another config or "
                                  f"search: block); choose another --out, or restore that "
                                  f"config to continue it with --resume")
            if not resume:
                raise ConfigError(f"--out {out}: holds this search already; add --resume to "
                                  f"continue it, or choose another --out")
        elif (out / "ablation.json").exists():
            raise ConfigError(f"--out {out}: holds a plugdrop ablate's runs; choose another "
                              f"--out for the search")
        elif any(p.name != ".lock" for p in out.iterdir()):
            raise ConfigError(f"--out {out}: holds other files; give an empty or new folder")
        runs.atomic_write_json(out / SEARCH_RECORD, {
            "fingerprint": sc.fingerprint(), "source": sc.base.source,
            "search": sc.spec.plain(), "config": sc.base.resolved()}, "the search's config")
        return None

    def listeners(self) -> list[Listener]:
        """The ablation's listeners over ``OUT/trials`` and the search's own results
        (``search.json``, ``best.yaml``, ``report.html``)."""
        return [Console(), ReportWriter(), SearchResults()]

    def before_round(self, rnd: Round, program: Program, d: Dist) -> None:
        """The run folders' ``ablation.json`` (every run of the search so far) and the round's
        config, for the jobs and the report."""
        assert rnd.recorded is not None
        doc = manifest(rnd.cfg, program, d, self.describe(), rnd.recorded, hashed=False,
                       search_fingerprint=self.sc.fingerprint())
        record(self.runs_in, rnd.cfg, doc)

    # -- the rounds -------------------------------------------------------------------------

    def open(self, ctx: Context) -> None:
        self.ctx = ctx
        self.proposals = Proposals(self.out / JOURNAL, self.sc.spec)
        self.race = Race(self.setup, self.proposals)
        for run in ctx.ended_before():
            self.ended(run)

    def ended(self, run: Run) -> None:
        done, value = run_value(run, self.metric)
        if done:
            self.race.record(run.variant, run.seed, value)

    def attachments(self, c: Candidate) -> list[Any]:
        return self.sc.spec.attachments(c.params)

    def config(self, candidates: Sequence[Candidate]) -> AblationConfig:
        return self.sc.ablation({c.name: self.attachments(c) for c in candidates if c.seeds},
                                self.runs_in)

    def check(self, step: Step) -> bool:
        """Check the candidates new to this process (a dry step with plugdrop's trainer), in
        the order proposed; the first that cannot run is failed in the study (its trial says
        why). Whether all could.

        Raises:
            ConfigError: the first :data:`FIRST_FAILURES` candidates cannot run, or
                :data:`~plugdrop.ablate.decide.race.MAX_FAILED_IN_A_ROW` in a row (the space
                cannot produce a runnable candidate): one line, with the last one's cause.
        """
        assert self.ctx is not None
        data = getattr(self.ctx.program, "data", None)
        for c in sorted(step.candidates, key=lambda c: c.index):
            if c.index in self.checked or c.status == FAILED or not c.seeds:
                continue
            try:
                cfg = self.sc.ablation({c.name: self.attachments(c)}, self.runs_in)
                program_of(cfg, data).prepare(self.ctx.d)
            except ConfigError as e:
                self._cannot_run(step, c.index, one_line(e))
                self.proposals.fail(c.index, one_line(e))
                return False
            self.checked.add(c.index)
        return True

    def _cannot_run(self, step: Step, index: int, error: str) -> None:
        """Candidate ``index`` cannot run: stop the search when the space has shown it cannot
        produce a runnable candidate (the first ones, or too many in a row)."""
        ran = [x for x in step.candidates if x.index < index and (
            x.index in self.checked or x.status != FAILED)]
        in_a_row = index - max((x.index for x in ran), default=-1)
        if not ran and index + 1 >= FIRST_FAILURES or in_a_row >= MAX_FAILED_IN_A_ROW:
            what = (f"the first {index + 1} candidates" if not ran else
                    f"{in_a_row} candidates in a row")
            raise ConfigError(f"{self.sc.spec.at('space')}: search.space: {what} cannot run, "
                              f"so no further one is proposed; the last: "
                              f"{error.rstrip('. ')}; change "
                              f"the space so that its candidates can run (a selector must "
                              f"match layers of the model), then plugdrop search "
                              f"{self.sc.base.source} --out {self.out} "
                              f"--resume")

    def next_round(self) -> Round | None:
        while True:
            step = self.step = self.race.advance()
            if not step.needed:
                return None
            if not self.check(step):
                # a candidate failed its check: the race is replayed from its values, the
                # failed candidate now failed at its proposal (as a resumed search sees it)
                self.race = self._replayed()
                continue
            if step.needed == self.asked:
                return None  # nothing ended last round (a launcher that trains nothing)
            self.asked = list(step.needed)
            cfg = self.cfg = self.config([c for c in step.candidates if c.seeds])
            return Round(tuple(runs.RunDir(self.runs_in, v, s) for v, s in step.needed), cfg,
                         self.title(step), self.recorded(step))

    def _replayed(self) -> Race:
        """The race over the values recorded so far, from its start."""
        race = Race(self.setup, self.proposals)
        for variant, by_seed in self.race.values.items():
            for seed, value in by_seed.items():
                race.record(variant, seed, value)
        return race

    def recorded(self, step: Step) -> tuple[tuple[str, int], ...]:
        """Every run of the search so far: the baseline's, the candidates', the confirmation's,
        and the round's."""
        given = [(c.name, s) for c in step.candidates for s in c.seeds]
        if step.best is not None:
            given += [(step.best.name, s) for s in step.confirm_seeds]
        base = sorted({s for _, s in given} | {s for _, s in step.needed})
        ids = [(BASELINE, s) for s in base] + given + list(step.needed)
        return tuple(dict.fromkeys(ids))

    def title(self, step: Step) -> str:
        what = ("confirming " + (step.best.name if step.best else "?")
                if step.phase == "confirm" else
                f"round {step.rounds}, {len(step.candidates)} candidates so far")
        return (f"{what}: {len(step.needed)} runs to train, {step.runs} of "
                f"{self.sc.spec.budget} trained")

    def result(self) -> Step | None:
        return self.step
