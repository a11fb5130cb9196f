"""What trains the runs of an ablation, behind one seam (:class:`Program`): plugdrop's own
training loop (:mod:`.builtin`, the default) or a training program of the user's
(:mod:`.external`, ``program:``) run under the run contract (:mod:`.contract`) as a process
(:mod:`.process`). The runner, :func:`~plugdrop.ablate.execute.execute`, the launchers and the
report see only the seam and the run folders."""

from __future__ import annotations

from ..config import AblationConfig
from ..data import DataSets
from .builtin import BuiltinProgram, load_data, train_run, workers_for
from .external import ExternalProgram, Start
from .protocol import Program, RunFailed

__all__ = ["BuiltinProgram", "ExternalProgram", "Program", "RunFailed", "Start", "load_data",
           "program_of", "train_run", "workers_for"]


def program_of(cfg: AblationConfig, data: DataSets | None = None) -> Program:
    """The program of ``cfg``: its ``program:``, else plugdrop's trainer (on ``data`` when
    loaded already)."""
    if cfg.program is not None:
        return ExternalProgram(cfg)
    return BuiltinProgram(cfg, data)
