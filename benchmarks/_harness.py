"""Timing helpers shared by the benchmarks: interleaved medians in one process."""

from __future__ import annotations

import copy
import gc
import random
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn as nn

import plugdrop as pd


def interleaved(fns: dict[str, Callable[[], object]], *, budget_s: float = 3.0,
                min_rounds: int = 7, max_rounds: int = 60, warmup: int = 2,
                before: Callable[[], object] | None = None,
                clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Median seconds of each function, measured round-robin (one call of each per round) so
    that slow drifts of the machine hit every candidate alike. Each round calls the functions
    in a new order (shuffled with a fixed seed), so that each follows every other one about
    equally often: a call that leaves the machine busy or its caches flushed (a large
    baseline, torch's worker threads spinning after a parallel op) slows whichever call comes
    next, and a fixed cyclic order, even started one function further along each round, would
    always put the same function after it and charge that to it alone. ``before``, if given,
    runs (untimed) before every timed call: to measure each call after other work, with its
    caches cold. ``clock``: what is timed (wall time by default; ``time.thread_time``: the CPU
    time of this thread, not the time it waited for a core on a busy machine)."""
    for _ in range(warmup):
        for f in fns.values():
            f()
    start = time.perf_counter()
    for f in fns.values():
        if before is not None:
            before()
        f()
    per_round = max(time.perf_counter() - start, 1e-6)
    rounds = int(min(max(budget_s / per_round, min_rounds), max_rounds))
    times: dict[str, list[float]] = {k: [] for k in fns}
    items = list(fns.items())
    order = random.Random(0)
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            order.shuffle(items)
            for k, f in items:
                if before is not None:
                    before()
                t = clock()
                f()
                times[k].append(clock() - t)
    finally:
        if gc_was:
            gc.enable()
    return {k: statistics.median(v) for k, v in times.items()}


def record(benchmark, case: str, medians: dict[str, float], subject: str = "plugdrop",
           **info: object) -> None:
    """Store medians (ms) and ratios subject / baseline in the pytest-benchmark record."""
    benchmark.extra_info["case"] = case
    benchmark.extra_info["subject"] = subject
    benchmark.extra_info["median_ms"] = {k: v * 1e3 for k, v in medians.items()}
    benchmark.extra_info["ratio"] = {k: medians[subject] / v for k, v in medians.items()
                                     if k != subject}
    benchmark.extra_info.update(info)


def saved_bytes(fn: Callable[[], torch.Tensor]) -> int:
    """Bytes of the tensors autograd saves for the backward of ``fn()`` (distinct storages)."""
    seen: dict[tuple[int, int], int] = {}

    def pack(t: torch.Tensor):
        key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        seen[key] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def drop_path_model(bare: nn.Module, x: torch.Tensor, rate: float, skip: bool,
                    pad: int | None = None) -> nn.Module:
    """A copy of ``bare`` with DropPath on every residual branch, rates rising from 0 to
    ``rate`` by depth (timm's ``drop_path_rate`` rule), ``skip_compute=skip`` (and its
    ``pad``: None for the default)."""
    model = copy.deepcopy(bare).train()
    pd.residual_branches(model, x[:2])
    pd.attach(model, "residual:", pd.DropPath(pd.by_depth(0.0, rate, by="parent"),
                                                skip_compute=skip, pad=pad))
    return model
