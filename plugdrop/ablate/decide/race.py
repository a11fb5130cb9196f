"""The search as a pure function of the finished runs: :func:`replay` walks the rounds from the
start, as an uninterrupted search took them, and stops at the first round whose runs have not
all ended (those are what to train next). So a search killed at any moment and resumed asks for
the same runs and ends with the same result, like the ablation's adaptive design.

Each round:

1. every candidate is compared with the baseline on the seeds it was given (paired by seed:
   the metric minus the baseline's, oriented so that positive is better, in display units);
   one whose run failed is **failed**; one with ``seeds.max`` seeds is **complete**;
2. the **leader** is the candidate of the highest mean; an open candidate whose paired
   difference to the leader (on their common seeds, a t-interval at ``1 - alpha``) lies below
   0 is **dropped** (clearly behind: it gets no more seeds);
3. the open candidates get ``seeds.step`` more seeds, the most promising first, while the
   budget lasts (else they **stop** where they are);
4. new candidates fill the free places (``search.parallel``), each paired with the baseline
   on the first ``seeds.min`` seeds.

A candidate leaving the race is told to the proposer with its mean. When no run is left to
give, the best (highest mean) is confirmed against the baseline on fresh seeds the search
never used, through the ablation's own adaptive design (:class:`Design`): its verdict holds
at ``alpha``, since the data that confirm it took no part in choosing it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

import numpy as np

from ..config import DecisionRule, SeedPlan
from ..runs import RunState
from .decision import Decision
from .design import Design
from .stats import mean_ci

__all__ = ["COMPLETE", "DROPPED", "FAILED", "OPEN", "STOPPED", "Candidate", "CandidateState",
           "Proposer", "Race",
           "RaceSetup", "Step", "candidate_name", "replay"]

class CandidateState(str, Enum):
    """Where a candidate stands in the race (its word in ``search.json``)."""

    #: racing: it gets more seeds
    OPEN = "open"
    #: it reached ``seeds.max``
    COMPLETE = "complete"
    #: clearly behind the leader: no more seeds
    DROPPED = "dropped"
    #: the budget ran out before it was complete
    STOPPED = "stopped"
    #: its attachments cannot run, or a run of it failed
    FAILED = RunState.FAILED.value

    def __str__(self) -> str:
        return self.value


OPEN, COMPLETE, DROPPED, STOPPED, FAILED = (CandidateState.OPEN, CandidateState.COMPLETE,
                                            CandidateState.DROPPED, CandidateState.STOPPED,
                                            CandidateState.FAILED)
#: failed candidates (attachments that cannot run) in a row after which the search stops
MAX_FAILED_IN_A_ROW = 20

Values = Mapping[str, Mapping[int, "float | None"]]


def candidate_name(k: int) -> str:
    """The variant name of candidate ``k`` (its run folders: ``c007__s3``)."""
    return f"c{k:03d}"


class Proposer(Protocol):
    """Where candidates come from (:class:`~.study.Study`, or a test's double)."""

    def propose(self, k: int) -> Any:
        """Candidate ``k``: an object with ``params`` and ``error`` (``None``: it can run)."""

    def tell(self, k: int, value: float | None) -> None:
        """Candidate ``k`` left the race with ``value`` (``None``: failed)."""


@dataclass(frozen=True)
class RaceSetup:
    """What the race needs of the config: the seeds, the budget and the decision rule."""

    search_seeds: tuple[int, ...]
    seeds_min: int
    seeds_max: int
    seeds_step: int
    confirm_first: int
    budget: int
    parallel: int
    rule: DecisionRule
    baseline: str = "baseline"

    @property
    def reserve(self) -> int:
        """The runs kept for the confirmation: the best and the baseline on ``max`` seeds."""
        return 2 * self.seeds_max

    def confirmation(self, best: str) -> Design:
        """The adaptive design that confirms ``best`` on the fresh seeds."""
        plan = SeedPlan(min=self.seeds_min, max=self.seeds_max, step=self.seeds_step,
                        first=self.confirm_first)
        return Design(plan, self.baseline, (best,), self.rule)

    def oriented(self, a: float | None, b: float | None) -> float:
        """``a - b`` oriented so that positive is better, in display units (``nan``: none)."""
        if a is None or b is None or not math.isfinite(a - b):
            return math.nan
        sign = 1.0 if self.rule.higher_is_better else -1.0
        return sign * self.rule.metric.scale * (a - b)


@dataclass
class Candidate:
    """One candidate and where it stands in the race (``mean``, ``low``, ``high``: its paired
    difference to the baseline, oriented, a plain t-interval at ``1 - alpha``)."""

    index: int
    name: str
    params: Mapping[str, Any]
    seeds: list[int] = field(default_factory=list)
    status: CandidateState = OPEN
    reason: str = ""
    error: str | None = None
    diffs: dict[int, float] = field(default_factory=dict)
    round: int = 0

    @property
    def n(self) -> int:
        return len(self.diffs)

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.diffs.values()))) if self.diffs else math.nan

    def interval(self, confidence: float) -> tuple[float | None, float | None]:
        iv = mean_ci(list(self.diffs.values()), confidence)
        return iv.low, iv.high


@dataclass
class Step:
    """Where the search stands: ``needed``, the runs to train next (``(variant, seed)``);
    ``phase``: ``"search"``, ``"confirm"`` or ``"done"``; the candidates; the best; the
    confirmation's decision once its design started; the runs given so far."""

    phase: str
    needed: list[tuple[str, int]]
    candidates: list[Candidate]
    best: Candidate | None = None
    confirmation: Decision | None = None
    confirm_seeds: list[int] = field(default_factory=list)
    runs: int = 0
    rounds: int = 0
    procedure: str = ""


def _behind(c: Candidate, leader: Candidate, confidence: float) -> bool:
    common = sorted(set(c.diffs) & set(leader.diffs))
    if len(common) < 2:
        return False
    x = [c.diffs[s] - leader.diffs[s] for s in common]
    high = mean_ci(x, confidence).high
    return high is not None and high < 0


class _Race:
    def __init__(self, setup: RaceSetup, values: Values, proposer: Proposer) -> None:
        self.s, self.values, self.proposer = setup, values, proposer
        self.cands: list[Candidate] = []
        self.base: set[int] = set()
        self.used = 0
        self.rounds = 0
        self.conf = 1.0 - setup.rule.alpha

    def value(self, variant: str, seed: int) -> float | None:
        return self.values.get(variant, {}).get(seed)

    def close(self, c: Candidate, status: CandidateState, reason: str) -> None:
        c.status, c.reason, c.round = status, reason, self.rounds
        self.proposer.tell(c.index, None if status == FAILED else c.mean)

    def update(self) -> None:
        """Steps 1 and 2: the finished runs' pairs, the failed, complete and dropped."""
        s = self.s
        for c in self.cands:
            if c.status != OPEN:
                continue
            c.diffs = {}
            for seed in c.seeds:
                d = s.oriented(self.value(c.name, seed), self.value(s.baseline, seed))
                if self.value(c.name, seed) is None:
                    self.close(c, FAILED, f"its run with seed {seed} failed")
                    break
                if not math.isnan(d):
                    c.diffs[seed] = d
        ranked = [c for c in self.cands if c.status in (OPEN, COMPLETE, STOPPED) and c.n >= 2]
        leader = max(ranked, key=lambda c: (c.mean, -c.index), default=None)
        for c in self.cands:
            if c.status != OPEN:
                continue
            if len(c.seeds) >= s.seeds_max:
                self.close(c, COMPLETE, f"{len(c.seeds)} seeds, the maximum")
            elif leader is not None and c is not leader and _behind(c, leader, self.conf):
                self.close(c, DROPPED, f"behind {leader.name} (their paired interval lies "
                                       f"below 0)")

    def plan(self) -> list[tuple[str, int]]:
        """Steps 3 and 4: the runs of the next round (empty: the search is over)."""
        s = self.s
        left = s.budget - s.reserve - self.used
        runs: list[tuple[str, int]] = []
        base = set(self.base)

        def cost(seeds: Sequence[int]) -> int:
            return len(seeds) + len(set(seeds) - base)

        def give(c: Candidate, seeds: Sequence[int]) -> None:
            nonlocal left
            left -= cost(seeds)
            runs.extend((c.name, x) for x in seeds)
            runs.extend((s.baseline, x) for x in seeds if x not in base)
            base.update(seeds)
            c.seeds.extend(seeds)

        open_ = sorted((c for c in self.cands if c.status == OPEN),
                       key=lambda c: (-(c.mean if c.n else math.inf), c.index))
        for c in open_:
            more = list(s.search_seeds[len(c.seeds):len(c.seeds) + s.seeds_step])
            if cost(more) <= left:
                give(c, more)
            else:
                self.close(c, STOPPED, f"the budget ran out at {len(c.seeds)} seeds")
        failed_in_a_row = 0
        while sum(c.status == OPEN for c in self.cands) < s.parallel:
            first = list(s.search_seeds[:s.seeds_min])
            if cost(first) > left or failed_in_a_row >= MAX_FAILED_IN_A_ROW:
                break
            k = len(self.cands)
            p = self.proposer.propose(k)
            c = Candidate(k, candidate_name(k), dict(p.params), round=self.rounds)
            self.cands.append(c)
            if p.error is not None:
                c.status, c.reason, c.error = FAILED, "its attachments cannot run", p.error
                failed_in_a_row += 1
                continue
            failed_in_a_row = 0
            give(c, first)
        self.base = base
        return runs

    def best(self) -> Candidate | None:
        ranked = [c for c in self.cands if c.status in (COMPLETE, STOPPED) and c.n >= 2]
        return max(ranked, key=lambda c: (c.mean, -c.index), default=None)


class Race:
    """The search, advanced as its runs end: :meth:`advance` walks the rounds on from where the
    last call stopped, over the values known now, and stops at the first round whose runs have
    not all ended. Values only ever arrive (a run ends once), and a round only reads the values
    of the seeds it gave, so advancing round by round gives what a replay from the start over
    the same values gives (:func:`replay`).

    Args:
        setup: the seeds, the budget and the decision rule.
        proposer: where candidates come from; told how each left the race.
    """

    def __init__(self, setup: RaceSetup, proposer: Proposer) -> None:
        self.setup = setup
        self.values: dict[str, dict[int, float | None]] = {}
        self.race = _Race(setup, self.values, proposer)
        self.pending: list[tuple[str, int]] | None = None
        self.searched = False

    def record(self, variant: str, seed: int, value: float | None) -> None:
        """Run ``variant`` x ``seed`` ended with ``value`` (``None``: it failed)."""
        self.values.setdefault(variant, {})[seed] = value

    def advance(self) -> Step:
        """Where the search stands over the values recorded so far."""
        race, values = self.race, self.values
        while not self.searched:
            if self.pending is None:
                race.update()
                runs = race.plan()
                if not runs:
                    self.searched = True
                    break
                race.used += len(runs)
                race.rounds += 1
                self.pending = runs
            missing = [r for r in self.pending if r[1] not in values.get(r[0], {})]
            if missing:
                return Step("search", missing, race.cands, None, runs=race.used - len(missing),
                            rounds=race.rounds)
            self.pending = None
        return self._confirm()

    def _confirm(self) -> Step:
        race, values, setup = self.race, self.values, self.setup
        best = race.best()
        if best is None:
            return Step("done", [], race.cands, None, runs=race.used, rounds=race.rounds)
        design = setup.confirmation(best.name)
        fresh = design.plan.seeds()
        rep = design.replay({v: {s: x for s, x in values.get(v, {}).items() if s in fresh}
                             for v in (setup.baseline, best.name)})
        decision = rep.decisions[best.name]
        seeds = list(fresh[:rep.rounds[-1] if rep.rounds else 0])
        confirm_runs = sum(s in values.get(v, {}) for v in (setup.baseline, best.name)
                           for s in seeds)
        phase = "confirm" if rep.needed else "done"
        return Step(phase, list(rep.needed), race.cands, best, decision, seeds,
                    race.used + confirm_runs, race.rounds + len(rep.rounds), rep.procedure)


def replay(setup: RaceSetup, values: Values, proposer: Proposer) -> Step:
    """The search over the finished runs' ``values`` (variant -> seed -> the decision metric,
    ``None`` for a failed run; a run not ended is absent), from its start, asking ``proposer``
    for candidates and telling it how each ended."""
    race = Race(setup, proposer)
    for v, by_seed in values.items():
        for s, x in by_seed.items():
            race.record(v, s, x)
    return race.advance()
