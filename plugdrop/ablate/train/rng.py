"""The random state of a run: seeded at its start, saved in every checkpoint and restored on
resume, so that a resumed run draws the masks and data order an uninterrupted one would."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, cast

import torch

__all__ = ["rng_state", "seed_all", "set_rng_state"]


def rng_state() -> dict[str, Any]:
    """torch's (CPU and every CUDA device's), Python's and NumPy's generator states, as tensors
    and plain values (what a checkpoint loaded with ``weights_only=True`` may hold)."""
    import numpy as np

    kind, keys, pos, has_gauss, gauss = cast(tuple, np.random.get_state(legacy=True))
    numpy = {"kind": str(kind),  # the 624 uint32 words of MT19937, bit for bit as int32
             "keys": torch.from_numpy(keys.astype(np.uint32).view(np.int32)),
             "pos": int(pos), "has_gauss": int(has_gauss), "gauss": float(gauss)}
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate(),
                             "numpy": numpy}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` saved."""
    import numpy as np

    torch.set_rng_state(state["torch"].cpu())  # a checkpoint mapped to a GPU moved it there
    random.setstate(state["python"])
    numpy = state["numpy"]
    if isinstance(numpy, Mapping):
        np.random.set_state((numpy["kind"], numpy["keys"].cpu().numpy().view(np.uint32),
                             numpy["pos"], numpy["has_gauss"], numpy["gauss"]))
    else:  # a checkpoint of an earlier plugdrop: NumPy's own tuple
        np.random.set_state(numpy)
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([t.cpu() for t in state["cuda"]])


def seed_all(seed: int) -> None:
    """Seed torch, Python and NumPy with ``seed``."""
    import numpy as np

    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
