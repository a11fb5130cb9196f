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


def pytest_benchmark_update_json(config, benchmarks, output_json):
    _stop.set()
    if _load:
        _load["end"] = os.getloadavg()[0]
        output_json["load_average"] = dict(_load)
