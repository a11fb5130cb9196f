"""``plugdrop ablate`` and ``plugdrop search``: studies of regularizers, each variant trained
over seeds into run folders and compared with honest statistics. Built on the public
``plugdrop`` API only.

Rooms, along the pipeline (ARCHITECTURE.md draws them): ``config/`` (the settings table, YAML ->
:class:`AblationConfig`), ``data/`` and ``model`` (data sets, loaders, models), ``results/``
(what the run folders hold, read back), ``decide/`` (the decisions: designs, verdicts, the
race), ``report/`` (statistics, tables, CSV, JSON, plots, the page), ``train/`` (one run's
training), ``programs/`` (what trains a run), ``runs/`` (run folders, locks, the one writer),
``execute`` (one attempt of a run, what every job executes), ``worker`` (a job's entry point),
``launch/`` (the launchers), ``search/`` (the search's space, proposals and results),
``study/`` (the one driver of every study, its strategies and listeners), ``progress``,
``logging`` (TensorBoard), ``errors``.
"""

from .config import AblationConfig, load
from .errors import ConfigError, DataGone, Fault, StorageError

__all__ = ["AblationConfig", "ConfigError", "DataGone", "Fault", "StorageError", "load"]
