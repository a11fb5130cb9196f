"""The files a run's program may put in the run's folder (the contract's metrics file, the
receipt), looked at before they are read: a named pipe in their place would make a read
wait for ever."""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["not_regular"]


def not_regular(path: Path) -> str | None:
    """Why ``path``, which a run's program may have put there, is not read: it is there but
    not a regular file (a named pipe, whose read would wait for ever; a folder; a device);
    ``None`` when it is one, or missing. Looked at without opening it."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode)
            else "not a regular file")
    return f"is {kind}, not a regular file the program wrote"
