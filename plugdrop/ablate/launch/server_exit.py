"""The warm server's end (imported by the server only, first of :data:`.warm.PRELOAD`).

The server ends with its driver. Left to itself, its interpreter would then run a last
collection over every object that torch, timm and torchvision made: a second or more of CPU,
during which the server still holds the driver's standard output and error, so that a reader
of the driver's output (``plugdrop ablate ... | tee log``, a test's pipe) waits that long for
its end. At exit the server freezes its objects instead (:func:`gc.freeze`, as the
``plugdrop`` command does): ``atexit`` handlers and module teardown run as before. Jobs forked
from the server are other processes and are left alone.
"""

from __future__ import annotations

import atexit
import gc
import os

__all__: list[str] = []

_SERVER = os.getpid()


def _freeze_at_exit() -> None:
    if os.getpid() == _SERVER:
        gc.freeze()


atexit.register(_freeze_at_exit)
