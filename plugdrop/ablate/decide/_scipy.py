"""scipy's ``special``, ``stats`` and ``optimize``, each imported when it is first used: a
process that never decides (a torchrun rank, a launcher's job, a run's worker) does not pay
the second that importing them takes.

    >>> from plugdrop.ablate.decide import _scipy as sp
    >>> float(sp.special.ndtri(0.5))
    0.0
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = ("special", "stats", "optimize")


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        module = importlib.import_module(f"scipy.{name}")
        globals()[name] = module  # later uses: a plain attribute
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
