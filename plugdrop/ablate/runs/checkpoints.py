"""Reading a run's checkpoint back as data, never as code.

A checkpoint holds tensors and plain containers only (the model's, optimizer's, scheduler's,
scaler's and EMA's state dicts, the handles' steps, the random states: see
:mod:`plugdrop.ablate.train.rng`), and is loaded with ``torch.load(weights_only=True)``: a
file that needs anything else to load (a pickle whose ``__reduce__`` calls a function,
someone's object) is refused before any of it runs. Checkpoints written by plugdrop before
this rule held NumPy's random state as an array; those load too, with exactly NumPy's array
types allowed (:data:`LEGACY`), which rebuild arrays and nothing else.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["LEGACY", "CheckpointRefused", "load_checkpoint", "loads_checkpoint"]

#: what a checkpoint of an earlier plugdrop may need besides tensors: NumPy arrays (its random
#: state). Allowed on reading only; new checkpoints are written without them.
LEGACY: list[Any] = [np.ndarray(0).__reduce__()[0],  # numpy's _reconstruct (1.x and 2.x)
                     np.ndarray, np.dtype, type(np.dtype(np.uint32))]

_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")
_ZIP = b"PK\x03\x04"


class CheckpointRefused(ValueError):
    """A checkpoint that holds more than data: loading it would run code. ``what``: the
    Python name it asked for (e.g. ``posix.system``), when known."""

    def __init__(self, path: Path | str, what: str | None) -> None:
        self.path, self.what = path, what
        asked = f"it asks for {what}" if what else "it holds Python objects"
        super().__init__(f"{path} is refused: {asked}, which only code could rebuild (a "
                         f"checkpoint holds tensors and plain data); it was not loaded")


def loads_checkpoint(data: bytes, where: Path | str, map_location: Any = "cpu"
                     ) -> dict[str, Any]:
    """Load a checkpoint's bytes (read from ``where``) as data (see the module).

    Raises:
        CheckpointRefused: it needs a Python object other than tensors and plain containers.
        ValueError: it is no run's checkpoint (not a zip archive as ``torch.save`` writes, or
            another object than a checkpoint's mapping).
        Exception: it is torn (whatever ``torch.load`` raises on a cut zip archive).
    """
    if not data.startswith(_ZIP):
        _refuse_code(data, where)
        raise ValueError(f"not a checkpoint written by torch.save (it is no zip archive, "
                         f"{len(data)} bytes)")
    try:
        with torch.serialization.safe_globals(LEGACY), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Detected pickle protocol 4": not ours to show
            state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        found = _GLOBAL.search(str(e))
        if found is None:
            raise  # not a refusal: a garbled archive
        raise CheckpointRefused(where, found.group(1)) from None
    if not isinstance(state, dict) or "epoch" not in state:
        raise ValueError(f"it holds a {type(state).__name__}, not a run's checkpoint")
    return state


def _refuse_code(data: bytes, where: Path | str) -> None:
    """Raise :class:`CheckpointRefused` when ``data`` is a pickle that would call or build
    something (read with :mod:`pickletools`, which executes nothing)."""
    names: list[str] = []
    strings: list[str] = []
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
                strings = (strings + [str(arg)])[-2:]
            elif op.name == "GLOBAL":
                names.append(str(arg).replace(" ", "."))
            elif op.name == "STACK_GLOBAL":
                names.append(".".join(strings))
            elif op.name in ("REDUCE", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "BUILD"):
                names.append(names[-1] if names else op.name)
    except Exception:  # noqa: BLE001 - cut short or no pickle at all: torn, not code
        return
    if names:
        raise CheckpointRefused(where, names[0])


def load_checkpoint(path: Path, map_location: Any = "cpu") -> dict[str, Any]:
    """Load the checkpoint at ``path`` as data (see :func:`loads_checkpoint`)."""
    return loads_checkpoint(Path(path).read_bytes(), path, map_location)
