"""``plugdrop ablate``: train every variant x seed of a YAML config into run folders, and
compare them with honest statistics. Built on the public ``plugdrop`` API only.

Rooms, along the pipeline (ARCHITECTURE.md draws them): ``config/`` (the settings table, YAML ->
:class:`AblationConfig`), ``data/`` and ``model`` (data sets, loaders, models), ``train/`` (one
run's training), ``runs/`` (run folders, locks, the one writer), ``execute`` (one run, what
every launcher executes), ``worker`` (a job's entry point), ``launch/`` (the launchers and their
one driver loop), ``report/`` (statistics, tables, CSV, JSON, plots rebuilt from the run
folders), ``runner`` (the ablation), ``progress``, ``logging`` (TensorBoard), ``errors``.
"""

from .config import AblationConfig, load
from .errors import ConfigError, DataGone, Fault, StorageError

__all__ = ["AblationConfig", "ConfigError", "DataGone", "Fault", "StorageError", "load"]
