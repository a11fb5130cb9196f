"""``plugdrop search``'s own parts: the ``search:`` block and its dimensions (:mod:`.space`),
the config around it and each round's ablation config of the candidates so far
(:mod:`.setup`), the proposals (:mod:`.proposals`: an Optuna study in a journal file), and
what a search leaves (:mod:`.results`: ``search.json``, ``best.yaml``; :mod:`.report` and
:mod:`.plots`: its page). The race and the confirmation are decisions
(:mod:`plugdrop.ablate.decide.race`); the search itself is a strategy of the study driver
(:mod:`plugdrop.ablate.study.search`).
"""

from .proposals import INSTALL, JOURNAL, Proposals, require_optuna
from .results import write_results
from .setup import BASELINE, SearchConfig, load_search, loads_search, setup_of
from .space import Dimension, SearchSpec, parse_search

__all__ = ["BASELINE", "Dimension", "INSTALL", "JOURNAL", "Proposals", "SearchConfig",
           "SearchSpec", "load_search", "loads_search", "parse_search", "require_optuna",
           "setup_of", "write_results"]
