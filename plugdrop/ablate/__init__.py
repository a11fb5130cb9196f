"""``plugdrop ablate``: train every variant x seed of a YAML config into run folders, and
compare them with honest statistics. Built on the public ``plugdrop`` API only.

Modules: ``config`` (YAML -> :class:`AblationConfig`), ``data`` and ``model`` (data sets,
loaders, models), ``train`` (one run), ``runs`` (run folders on disk), ``runner`` (the loop),
``stats`` and ``report`` (tables, CSV, JSON, plots rebuilt from the run folders),
``progress``, ``logging`` (TensorBoard), ``errors``.
"""

from .config import AblationConfig, load
from .errors import ConfigError

__all__ = ["AblationConfig", "ConfigError", "load"]
