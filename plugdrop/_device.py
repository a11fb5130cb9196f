"""One value as 0-dim float32 tensors, one per device, updated in place; small host tensors
moved to a device without a synchronization. Private.

Scheduled settings (and the constant one of DropBlock's count rescaling) are read by
``torch.compile``\\ d code as tensors, so a changing value does not recompile; the tensors are
created outside inference mode (an inference tensor cannot be used in a recorded graph).
"""

from __future__ import annotations

import torch

from . import _compat


class PerDevice:
    """``value`` as a 0-dim float32 tensor on each device it was asked for."""

    def __init__(self, value: float) -> None:
        self.value = value
        self._tensors: dict[torch.device, torch.Tensor] = {}

    def get(self, device: torch.device) -> torch.Tensor:
        """The tensor on ``device`` (created at the first request)."""
        t = self._tensors.get(device)
        if t is None:
            with _compat.constants():
                t = torch.tensor(self.value, dtype=torch.float32, device=device)
            self._tensors[device] = t
        return t

    def fill(self, value: float) -> None:
        """Set the value, in place in every tensor already created."""
        self.value = value
        for t in self._tensors.values():
            t.fill_(value)


def on_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` (a small CPU tensor) on ``device``. To a CUDA device it is copied from pinned
    memory without blocking: a copy from pageable memory waits for the device (a
    synchronization at every new ``p`` of a schedule)."""
    if t.device == device:
        return t
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)

