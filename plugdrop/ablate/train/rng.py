"""The random state of a run: seeded at its start, saved in every checkpoint and restored on
resume, so that a resumed run draws the masks and data order an uninterrupted one would."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["rng_state", "seed_all", "set_rng_state"]


def rng_state() -> dict[str, Any]:
    """torch's (CPU and every CUDA device's), Python's and NumPy's generator states."""
    import numpy as np

    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate(),
                             "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` saved."""
    import numpy as np

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_all(seed: int) -> None:
    """Seed torch, Python and NumPy with ``seed``."""
    import numpy as np

    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
