"""Stopping a study on what one run can show, before it spends the compute of the others:

- the first run of a program to complete without the decision metric (``decide_on`` names a
  metric it does not log) stops the study at once: one line names the metric, those the
  program logged, and how to continue with the right name (the run is kept: its training
  completed, and ``--resume`` judges it again);
- the first run of a variant with attachments that completes without its receipt (the
  program never attached it) stops it the same way;
- an ablation whose first round's runs all failed the same way (a program that cannot import
  its dependencies, say) stops after that round instead of starting another; and as soon as
  one run per parallel slot (``slots``; two at least) failed so, before any finished, when the
  baseline's run is among them or they are of two variants (a fixed design's first round is
  every run).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from .. import runs
from ..errors import ConfigError
from ..results import FINISHED, Run
from .listener import StudyInfo

__all__ = ["FailFast"]

#: ``failed.json``'s reasons that one run shows for every run
_EVERY_RUN = ("metric", "receipt")


def _failed(rd: runs.RunDir) -> dict[str, object]:
    try:
        doc = json.loads((rd.path / "failed.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _cause(error: str, rd: runs.RunDir) -> str:
    """A failure's line without what differs from run to run (the run's name, its folder,
    the end of its stderr)."""
    line = error.split(" (its stderr ends:")[0].split("; its stderr ends:")[0]
    for word in (str(rd.path), rd.id, rd.variant):
        line = line.replace(word, "<run>")
    return re.sub(r"\d+(\.\d+)?s\b", "<time>", line)


class FailFast:
    """Watches the runs of a study as they end (see the module).

    Args:
        info: the study.
        before: the runs that ended before this invocation (read when first needed).
    """

    def __init__(self, info: StudyInfo, before: Callable[[], list[Run]], slots: int = 1
                 ) -> None:
        self.info, self.before, self.slots = info, before, max(1, slots)
        self.finished: bool | None = None
        self.attached: bool | None = None
        self.first_round: list[tuple[runs.RunDir, str]] = []

    def _seen(self) -> None:
        if self.finished is None:
            ended = [r for r in self.before() if r.status == FINISHED]
            self.finished = bool(ended)
            cfg = self.info.cfg
            self.attached = any(r.variant in cfg.variant_names
                                and cfg.variant(r.variant).attachments for r in ended)

    def ended(self, rd: runs.RunDir, status: str) -> None:
        """A run ended (``status``, its folder's): stop the study when it shows every run
        would fail the same way."""
        self._seen()
        cfg = self.info.cfg
        with_attachments = rd.variant in cfg.variant_names and bool(
            cfg.variant(rd.variant).attachments)
        if status == FINISHED:
            self.finished = True
            self.attached = self.attached or with_attachments
            return
        failed = _failed(rd)
        reason, error = failed.get("reason"), str(failed.get("error", ""))
        if self.info.rounds == 1:
            self.first_round.append((rd, error))
        again = (f"continue with plugdrop {self.info.command} {cfg.source} --out "
                 f"{self.info.out} --resume")
        if reason == "metric" and not self.finished:
            raise ConfigError(f"{cfg.loc('decide_on')}: run {rd.id}, the first to complete, "
                              f"{error.removeprefix('the program ')}; no further run is "
                              f"started: correct decide_on (or metrics_from) in "
                              f"{cfg.source}, then {again} (the run's training is kept: it is "
                              f"judged again, not trained again)")
        if reason == "receipt" and not self.attached:
            # the judging settings stay the same, so the fixed program trains the run again
            raise ConfigError(f"{cfg.loc('program')}: run {rd.id}: {error}; no further run is "
                              f"started: attach the variant in the program, then {again} "
                              f"(the run trains again from the start, its program's folder "
                              f"kept as work.before-N; with receipt: false instead it is "
                              f"judged again, not trained again)")
        if reason is None and failed.get("exit_status") and not failed.get("signal") \
                and not failed.get("timed_out"):
            self._alike()

    def _alike(self) -> None:
        """Stop when the first round's first runs, one per slot at least, all failed the same
        way before any finished (see the module)."""
        if self.info.rounds != 1 or self.finished or not self.info.strategy.hashed:
            return
        ended = self.first_round
        cfg = self.info.cfg
        variants = {rd.variant for rd, _ in ended}
        baseline = any(v in cfg.variant_names and not cfg.variant(v).attachments
                       for v in variants)
        if len(ended) < max(2, self.slots) or len({_cause(e, rd) for rd, e in ended}) != 1 \
                or not (
                baseline or len(variants) > 1):
            return
        rd, error = ended[-1]
        raise ConfigError(f"{cfg.loc('program')}: the first {len(ended)} run"
                          f"{'s' * (len(ended) > 1)} failed the same way before any finished "
                          f"({', '.join(r.id for r, _ in ended)}), so no further run is "
                          f"started: {error} (see {rd.path / 'failed.json'}); fix it, then "
                          f"continue with plugdrop {self.info.command} {cfg.source} --out "
                          f"{self.info.out} --resume")

    def round_ended(self, failed: Sequence[str], finished: Sequence[str]) -> None:
        """The first round ended: stop when every one of its runs failed the same way (an
        ablation's; a search's candidates fail each their own way)."""
        self._seen()
        if self.info.rounds != 1 or finished or self.finished or not self.info.strategy.hashed:
            return
        ended = [(rd, e) for rd, e in self.first_round if rd.id in set(failed)]
        if len(ended) < 2 or len(ended) != len(failed):
            return
        causes = {_cause(e, rd) for rd, e in ended}
        if len(causes) == 1:
            rd, error = ended[-1]
            cfg = self.info.cfg
            raise ConfigError(f"{cfg.loc('program')}: every run of the first round "
                              f"({len(ended)}) failed the same way, so no second round is "
                              f"started: {error} (see {rd.path / 'failed.json'}); fix it, then "
                              f"continue with plugdrop {self.info.command} {cfg.source} --out "
                              f"{self.info.out} --resume")
