"""The study's listeners, one file each: the console's header lines (:mod:`.console`), the
report rebuilt while runs end and at the end (:mod:`.report`), ``decisions.jsonl``
(:mod:`.decisions`) and a search's results (:mod:`.search`)."""

from .console import Console
from .decisions import DecisionsFile
from .report import ReportWriter
from .search import SearchResults

__all__ = ["Console", "DecisionsFile", "ReportWriter", "SearchResults"]
