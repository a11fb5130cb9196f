import os
import sys
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
