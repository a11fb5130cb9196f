"""Reporting: the results of an ablation rebuilt from its run folders. Reading them
(:mod:`.read`), the statistics (:mod:`.stats`, :mod:`.robust`), the adaptive design's decisions
(:mod:`.sequential`), the summary per variant (:mod:`.summary`), the text table
(:mod:`.table`), the plots (:mod:`.plots`, :mod:`.figures`), the page a person opens
(:mod:`.html`) and the files (:mod:`.write`)."""

from .read import FAILED, FINISHED, INCOMPLETE, Ablation, Run, load_ablation
from .summary import VariantSummary, decision_values, summarize
from .table import table
from .write import CSV_COLUMNS, Rebuilder, Report, write_report

__all__ = ["CSV_COLUMNS", "FAILED", "FINISHED", "INCOMPLETE", "Ablation", "Rebuilder", "Report",
           "Run", "VariantSummary", "decision_values", "load_ablation", "summarize", "table",
           "write_report"]
