"""Which variants a table or a plot shows when there are more than fit: the baseline, every
decided variant, the best and the worst, up to :data:`MOST` (more only when more are decided);
the rest are summarised in one line with their count by verdict, and are all in
``results.csv``, ``results.json`` and the page's full table.

    >>> picked, rest = pick(summary)          # config order kept
    >>> print(rest_line(rest))
    ... and 940 more variants (no clear difference: 930, too few seeds: 10): every variant is
    in results.csv, results.json and report.html
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from ..results import Ablation
from .summary import VariantSummary

__all__ = ["DECIDED", "MOST", "focus", "pick", "rest_line"]

#: the rows of a table (and the variants of a plot) shown in full
MOST = 30
#: the verdicts of a decided variant
DECIDED = ("better", "worse", "equivalent", "dropped")


def _decided(s: VariantSummary) -> bool:
    return s.verdict.split(":")[0] in DECIDED


def _oriented(s: VariantSummary) -> float:
    """Its difference to the baseline, larger when better."""
    mean = s.versus()[0]  # type: ignore[index]
    return mean if s.rule.higher_is_better else -mean


def pick(summary: Sequence[VariantSummary], most: int = MOST
         ) -> tuple[list[VariantSummary], list[VariantSummary]]:
    """``(shown, rest)``: every variant when at most ``most``; else the baseline, the decided
    ones, then the best and the worst by their difference to the baseline (alternately) until
    ``most`` are shown. Both in the config's order."""
    if len(summary) <= most:
        return list(summary), []
    keep = {s.variant for s in summary if s.is_baseline or _decided(s)}
    ranked = sorted((s for s in summary if s.versus() is not None), key=_oriented)
    ends = [x for pair in zip(reversed(ranked), ranked) for x in pair]
    for s in ends:
        if len(keep) >= most:
            break
        keep.add(s.variant)
    for s in summary:  # nothing to rank by (no baseline, nothing finished): the first ones
        if len(keep) >= most:
            break
        keep.add(s.variant)
    return ([s for s in summary if s.variant in keep],
            [s for s in summary if s.variant not in keep])


def rest_line(rest: Sequence[VariantSummary]) -> str | None:
    """The line that stands for the variants a table leaves out (``None``: none is left out)."""
    if not rest:
        return None
    counts = Counter(s.verdict or "-" for s in rest)
    by = ", ".join(f"{v}: {n}" for v, n in counts.most_common())
    noun = "variant" if len(rest) == 1 else "variants"
    return (f"... and {len(rest)} more {noun} ({by}): every variant is in results.csv, "
            f"results.json and report.html")


def focus(ab: Ablation, shown: Sequence[VariantSummary]) -> Ablation:
    """``ab`` with the runs of the ``shown`` variants only (what a plot draws)."""
    names = {s.variant for s in shown}
    if len(names) == len(ab.variants):
        return ab
    return replace(ab, variants=[v for v in ab.variants if v in names],
                   runs=[r for r in ab.runs if r.variant in names])
