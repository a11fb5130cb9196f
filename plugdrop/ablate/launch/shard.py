"""``--shard I/N``: train only the I-th of N shares of an ablation's runs.

The assignment is stable and balanced: the runs, in the config's order (variants x seeds, grids
expanded), are dealt round-robin, run ``k`` (0-based) to shard ``k % N + 1``. Every shard of one
config therefore agrees on who trains what, whichever machine or scheduler starts it. Shards
write into one ``--out`` side by side (a shared folder lock, a lock per run); ``plugdrop report
DIR`` merges them, since the summary is always rebuilt from the run folders.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from ..config import AblationConfig
from ..errors import ConfigError
from ..runs import RunDir

T = TypeVar("T")

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` -> ``(2, 4)``.

    Raises:
        ConfigError: not ``I/N`` with ``1 <= I <= N``.
    """
    m = _SHARD.fullmatch(text)
    if m is None:
        raise ConfigError(f"--shard {text!r}: write I/N, e.g. --shard 1/4 for the first of "
                          f"four shares of the runs")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1:
        raise ConfigError(f"--shard {text}: N must be at least 1 (the number of shards)")
    if i < 1:
        raise ConfigError(f"--shard {text}: shards count from 1; use --shard 1/{n} to "
                          f"--shard {n}/{n}")
    if i > n:
        raise ConfigError(f"--shard {text}: there are only {n} shards; I must be 1 to {n}")
    return i, n


def select(items: Sequence[T], i: int, n: int) -> list[T]:
    """The items of shard ``i`` of ``n`` (1-based): every n-th, starting at the i-th."""
    return [x for k, x in enumerate(items) if k % n == i - 1]


def check_fresh(out: Path, cfg: AblationConfig, shard: tuple[int, int], resume: bool) -> None:
    """Without ``--resume``, a shard refuses to start when runs of its own share exist already
    (the other shards' runs may: they start at the same time)."""
    if resume:
        return
    for v, s in select(cfg.runs(), *shard):
        rd = RunDir(out, v, s)
        if rd.path.is_dir() and any(p.name != ".lock" for p in rd.path.iterdir()):
            raise ConfigError(f"--out {out}: holds runs of shard {shard[0]}/{shard[1]} already "
                              f"({rd.id}); add --resume to continue them, or choose another "
                              f"--out")
