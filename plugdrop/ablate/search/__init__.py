"""``plugdrop search``: where and how much to regularize, searched over a space of attachments
within a budget of runs, and ended with a confirmed verdict.

The rooms, along the pipeline: the ``search:`` block (:mod:`.space`), the config around it and
the ablation config of each round (:mod:`.setup`), the proposals (:mod:`.study`: an Optuna
study in a journal file), the race of the candidates and the confirmation as a pure function
of the run folders (:mod:`.race`), the loop that trains each round through the runner's
launchers (:mod:`.runner`), and what it leaves (:mod:`.results`, :mod:`.report`,
:mod:`.plots`).
"""

from ..decide.race import RaceSetup, Step, replay
from .runner import SearchOutcome, run_search, setup_of
from .setup import SearchConfig, load_search, loads_search
from .space import Dimension, SearchSpec, parse_search
from .study import INSTALL, Study, require_optuna

__all__ = ["Dimension", "INSTALL", "RaceSetup", "SearchConfig", "SearchOutcome", "SearchSpec",
           "Step", "Study", "load_search", "loads_search", "parse_search", "replay",
           "require_optuna", "run_search", "setup_of"]
