import ctypes
import os
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

#: ``PLUGDROP_BENCH_THREADS=1`` runs every benchmark on one torch thread: on a shared machine a
#: parallel region waits for a descheduled thread, which swamps what is being measured.
if os.environ.get("PLUGDROP_BENCH_THREADS"):
    torch.set_num_threads(int(os.environ["PLUGDROP_BENCH_THREADS"]))


def _pin_allocator() -> str:
    """Fix glibc malloc's thresholds for the whole run (``PLUGDROP_BENCH_MALLOC=dynamic``
    leaves them alone).

    By default glibc moves its mmap threshold as blocks are freed and gives memory back to the
    system when the top of the heap is free: whether a fresh output tensor of a given size
    reuses warm heap memory or page-faults in new memory (about 0.2 us per 4 KiB page: as much
    as the op itself) then depends on the order of earlier allocations, and the same ``x * x``
    measures 0.5 or 2.6 ms from one process to the next. Pinned, every output up to 32 MiB
    comes from reused heap memory (as in a steady training loop) and larger ones are always
    mapped afresh, for plugdrop and baselines alike.
    """
    if os.environ.get("PLUGDROP_BENCH_MALLOC") == "dynamic" or not sys.platform.startswith(
            "linux"):
        return "glibc malloc, dynamic thresholds"
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return "allocator not pinned (no glibc)"
    m_trim_threshold, m_mmap_threshold = -1, -3
    if libc.mallopt(m_mmap_threshold, 32 << 20) != 1 or \
            libc.mallopt(m_trim_threshold, 1 << 30) != 1:
        return "allocator not pinned (mallopt refused)"
    return "glibc malloc pinned: mmap threshold 32 MiB, no trimming"


_ALLOCATOR = _pin_allocator()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# The 1-minute load average of the machine during the run, recorded in the JSON (report.py
# prints it): a run on a busy machine is not comparable with one on an idle machine.
_load: dict[str, float] = {}


def _sample_load(stop: threading.Event) -> None:
    while not stop.wait(5.0):
        _load["max"] = max(_load.get("max", 0.0), os.getloadavg()[0])


_stop = threading.Event()


def pytest_sessionstart(session):
    if hasattr(os, "getloadavg"):
        _load["start"] = _load["max"] = os.getloadavg()[0]
        threading.Thread(target=_sample_load, args=(_stop,), daemon=True).start()


@pytest.hookimpl(optionalhook=True)  # pytest-benchmark's hook: optional (see below)
def pytest_benchmark_update_json(config, benchmarks, output_json):
    _stop.set()
    if _load:
        _load["end"] = os.getloadavg()[0]
        output_json["load_average"] = dict(_load)
    output_json["allocator"] = _ALLOCATOR


try:
    import pytest_benchmark  # noqa: F401
except ImportError:
    # A machine without pytest-benchmark (a lent GPU machine's python3): the benchmarks
    # still run and record their rows (bench_cuda.py's BENCH_ROWS file, which
    # ``report.py --rows`` reads); the fixture keeps what they record and runs what they time.
    class _Rows:
        def __init__(self) -> None:
            self.extra_info: dict = {}

        def pedantic(self, fn, rounds: int = 1, iterations: int = 1, **_: object) -> None:
            for _ in range(rounds * iterations):
                fn()

    @pytest.fixture
    def benchmark():
        return _Rows()

