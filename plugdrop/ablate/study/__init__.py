"""The study driver: one loop for every kind of study.

A study is a folder and a :class:`~.strategy.Strategy` (the fixed grid, the adaptive design,
the search) that says which runs to train next; the driver (:func:`run_study`) owns the rest:
the checks before any run, the folder's lock and record, resume, the rounds handed to a
launcher (:mod:`.jobs`), the outcome, and the events its listeners hear
(:mod:`.listener`; the report, ``decisions.jsonl``, the console and a search's results are
listeners, :mod:`.listeners`). ``plugdrop ablate`` and ``plugdrop search`` are thin commands
over it; a new kind of study is one new strategy file.
"""

from .adaptive import Adaptive
from .checks import check_command, resume_command, strategy_of
from .jobs import dispatch
from .driver import run_study
from .grid import Grid
from .listener import Listener, Listeners, StudyInfo
from .outcome import Outcome
from .search import TRIALS, Search
from .round import Round
from .strategy import Claim, Context, Strategy

__all__ = ["Adaptive", "Claim", "Context", "Grid", "Listener", "Listeners", "Outcome", "Round",
           "Search", "Strategy", "StudyInfo", "TRIALS", "check_command", "dispatch",
           "resume_command", "run_study", "strategy_of"]
