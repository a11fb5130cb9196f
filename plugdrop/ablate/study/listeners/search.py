"""What a search leaves besides its run folders: ``search.json`` (where the search stands,
rewritten while it runs: at most every few seconds and at the end), and at its end
``best.yaml`` and ``report.html`` (:func:`plugdrop.ablate.search.write_results`)."""

from __future__ import annotations

import time
from typing import Any

from ...search import write_results
from ..listener import Listener, StudyInfo
from ..outcome import Outcome
from ..round import Round

__all__ = ["SearchResults"]


class SearchResults(Listener):
    """Writes a search's results (on rank 0).

    Args:
        every: the least time between two writes of ``search.json`` while the search runs,
            in seconds.
    """

    def __init__(self, every: float = 5.0) -> None:
        self.every = every
        self.next_at = 0.0

    def on_round_start(self, study: StudyInfo, round: Round) -> None:
        if time.monotonic() >= self.next_at:
            self.write(study, final=False)

    def on_study_end(self, study: StudyInfo, outcome: Outcome) -> None:
        outcome.files += self.write(study, final=not outcome.stopped)

    def write(self, study: StudyInfo, final: bool) -> list[Any]:
        search: Any = study.strategy
        step = search.result()
        if not study.main or step is None:
            return []
        files = write_results(study.out, search.sc, step, search.proposals,
                              {c.index: search.attachments(c) for c in step.candidates},
                              final=final)
        self.next_at = time.monotonic() + self.every
        return files
