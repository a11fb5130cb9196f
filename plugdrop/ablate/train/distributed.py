"""This process's place in a run: rank, world size, device; joining torchrun's process group;
and deciding things once for all ranks (so that every rank stops together, with one message).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from ..errors import ConfigError, Fault

__all__ = ["Dist", "agree", "on_rank0", "resolve_device", "setup_distributed", "world_from_env"]

T = TypeVar("T")


@dataclass
class Dist:
    """This process's place: rank, world size, device."""

    rank: int = 0
    world: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


def resolve_device(name: str, loc: str = "device") -> torch.device:
    """``auto`` -> cuda if available, else cpu; a CUDA device that is not there is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{loc}: device {name!r}, but CUDA is not available here; use "
                          f"device: cpu (or auto)")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(f"{loc}: device {name!r}, but there are "
                          f"{torch.cuda.device_count()} GPUs here")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{loc}: device 'mps' is not available here; use device: cpu")
    return dev


def world_from_env() -> tuple[int, int]:
    """(rank, world) from torchrun's environment (0, 1 when not launched by it)."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def setup_distributed(device: torch.device) -> Dist:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1)."""
    rank, world = world_from_env()
    if world <= 1:
        return Dist(0, 1, device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(rank, world, device)


def on_rank0(d: Dist, fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 and give every rank its result, or raise its ConfigError or
    Fault everywhere (so that all processes stop together and only rank 0 prints)."""
    result: Any = None
    error: BaseException | None = None
    if d.main:
        try:
            result = fn()
        except (ConfigError, Fault) as e:
            error = e
    if d.active:
        box = [result, error]
        dist.broadcast_object_list(box, src=0)
        result, error = box
    if error is not None:
        raise error
    return result


def agree(d: Dist, fn: Callable[[], T]) -> T:
    """Run ``fn`` on every rank; if any rank raises a ConfigError or Fault, every rank raises
    the first one."""
    result: Any = None
    error: BaseException | None = None
    try:
        result = fn()
    except (ConfigError, Fault) as e:
        error = e
    if d.active:
        errors: list[Any] = [None] * d.world
        dist.all_gather_object(errors, error)
        error = next((e for e in errors if e is not None), None)
    if error is not None:
        raise error
    return result
