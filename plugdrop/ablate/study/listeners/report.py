"""The report of a study's run folders (``results.csv``, ``results.json``, ``report.html``, the
plots: :func:`~plugdrop.ablate.report.write_report`), rebuilt while runs end and once at the
end.

A rebuild reads every run folder, so its cost grows with the runs: rebuilt after every run, it
would make a study quadratic. While runs end it is rebuilt at most every :attr:`ReportWriter.every`
seconds, and never more often than it leaves the driver :attr:`ReportWriter.share` of its time
(a rebuild of 2 s waits 40 s for the next), so that the driver's cost per run stays flat however
many runs the folder holds; the plots (seconds of matplotlib) at most once a
minute; everything at the end. ``plugdrop report OUT`` rebuilds it any time.
"""

from __future__ import annotations

import sys
import time

from ...errors import Fault
from ...report import Report, write_report
from ...runs import RunDir
from ..listener import Listener, StudyInfo
from ..outcome import Outcome

__all__ = ["ReportWriter"]


class ReportWriter(Listener):
    """Rebuilds the report while the study runs (on rank 0). It raises only a
    :class:`~plugdrop.ablate.errors.Fault` (the folder takes no file, so the runs could not
    either): any other failure is a line, never a lost run.

    Args:
        every: the least time between two rebuilds while runs end, in seconds.
        share: the most of the driver's time the rebuilds may take while runs end.
        plots_every: the least time between two drawings of the plots, in seconds.
    """

    def __init__(self, every: float = 5.0, share: float = 0.05, plots_every: float = 60.0
                 ) -> None:
        self.every, self.share, self.plots_every = every, share, plots_every
        self.next_at = 0.0
        self.plots_at = 0.0

    def on_study_start(self, study: StudyInfo) -> None:
        now = time.monotonic()
        self.next_at, self.plots_at = now + self.every, now + self.plots_every

    def on_run_end(self, study: StudyInfo, run: RunDir, state: str, detail: str | None) -> None:
        if time.monotonic() >= self.next_at:
            self.rebuild(study, final=False)

    def on_study_end(self, study: StudyInfo, outcome: Outcome) -> None:
        try:
            rep = self.rebuild(study, final=True)
        except Fault as e:  # every run ended; only the report could not be written
            outcome.report_fault = e
            return
        if rep is not None:
            outcome.report = rep
            outcome.files += rep.files

    def rebuild(self, study: StudyInfo, final: bool) -> Report | None:
        """Write the report now (the plots too when ``final`` or a minute passed)."""
        if not study.main or not (study.runs_in / "ablation.json").is_file():
            return None  # rank > 0, or a search stopped before its first round
        t0 = time.monotonic()
        plots = study.cfg.plots and (final or t0 >= self.plots_at)
        try:
            rep = write_report(study.runs_in, plots=plots, cfg=study.cfg)
        except Fault:  # the folder takes no file: the runs could not either, so stop
            raise
        except Exception as e:  # the report must never lose the runs
            print(f"plugdrop {study.command}: could not write the report: {e}",
                  file=sys.stderr, flush=True)
            rep = None
        now = time.monotonic()
        if plots:
            self.plots_at = now + self.plots_every
        self.next_at = now + max(self.every, (now - t0) / self.share)
        return rep
