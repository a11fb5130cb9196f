"""The cells and layout of the printed tables: fixed-width columns (:func:`format_table`) and
the cells every table shows of a variant (its runs, its seeds, its time)."""

from __future__ import annotations

from collections.abc import Sequence

from .summary import VariantSummary

__all__ = ["format_table", "runs_cell", "seeds_cell", "time_cell"]


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Fixed-width columns, left-aligned, with a rule under the header."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
            for r in [header, ["-" * w for w in widths], *rows]]


def runs_cell(s: VariantSummary) -> str:
    """``3/4 (1 failed)``: its finished runs of its runs."""
    cell = f"{s.finished}/{s.runs}"
    extra = [f"{n} {what}" for n, what in ((s.failed, "failed"), (s.incomplete, "incomplete"))
             if n]
    return cell + (f" ({', '.join(extra)})" if extra else "")


def seeds_cell(s: VariantSummary) -> str:
    """:func:`runs_cell`, and an adaptive design's maximum: ``3/3 of 8``."""
    if s.seeds_max is None:
        return runs_cell(s)
    return runs_cell(s) + f" of {s.seeds_max}"


def time_cell(s: VariantSummary, baseline: bool) -> str:
    """Its time per epoch (or per run), relative to the baseline's when there is one."""
    if s.epoch_time is None:
        return "-"
    mark = "*" if s.time_with_first else ""
    secs = f"{s.epoch_time:.2f}s{mark}"
    if baseline and s.time_ratio is not None:
        return f"{s.time_ratio:.2f}x ({secs})"
    return secs
