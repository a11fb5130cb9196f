"""A round: the runs a strategy asks for at once (:class:`Round`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..runs import RunDir

if TYPE_CHECKING:
    from ..config import AblationConfig

__all__ = ["Round"]


@dataclass(frozen=True)
class Round:
    """Runs a strategy asks for at once: the driver trains them all before it asks again.

    Attributes:
        runs: the runs to train (those that finished before are not among them).
        cfg: the config they train under (a search's grows with its candidates).
        title: how the header line names the round (``"5 seeds"``, ``"round 2: 5 of at most 8
            seeds"``).
        recorded: every ``(variant, seed)`` the folder's ``ablation.json`` must list for the
            round's jobs (a search's runs so far); ``None``: the config's runs, recorded when
            the folder was claimed.
        finished: how many runs of the strategy finished before this invocation (the header
            says so).
    """

    runs: tuple[RunDir, ...]
    cfg: AblationConfig
    title: str
    recorded: tuple[tuple[str, int], ...] | None = None
    finished: int = 0
