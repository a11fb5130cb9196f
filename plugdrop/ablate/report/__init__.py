"""Reporting: what a study's run folders hold, presented. The summary per variant
(:mod:`.summary`: statistics over seeds, the decisions taken by :mod:`plugdrop.ablate.decide`),
robust summaries (:mod:`.robust`), the text table (:mod:`.table`), the plots (:mod:`.plots`,
:mod:`.figures`), what a program logged (:mod:`.logged`), the page a person opens
(:mod:`.html`) and the files (:mod:`.write`). The folders are read by
:mod:`plugdrop.ablate.results` (re-exported here); the report decides nothing."""

from ..results import FAILED, FINISHED, INCOMPLETE, Ablation, Run, load_ablation
from .summary import VariantSummary, summarize
from .table import table
from .write import CSV_COLUMNS, Report, write_report

__all__ = ["CSV_COLUMNS", "FAILED", "FINISHED", "INCOMPLETE", "Ablation", "Report",
           "Run", "VariantSummary", "load_ablation", "summarize", "table", "write_report"]
