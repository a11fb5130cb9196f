"""A model saved whole (``torch.save(model)``) loaded where plugdrop cannot be imported, as on a
machine that serves the model without it."""

import os
import subprocess
import sys
from pathlib import Path

_LOAD = """\
import sys


class NoPlugdrop:
    '''Every import of plugdrop fails, as where it is not installed.'''

    def find_spec(self, name, path=None, target=None):
        if name == "plugdrop" or name.startswith("plugdrop."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoPlugdrop())
try:
    import plugdrop
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("plugdrop was imported")
import torch

model = torch.load(sys.argv[1], weights_only=False).train()
with torch.no_grad():
    out = model(**{INPUTS})
out = getattr(out, "logits", out)
print(type(model).__name__, tuple(out.shape))
"""


def load_without_plugdrop(path: Path, inputs: str) -> str:
    """Load the module saved whole at ``path`` in a process where importing plugdrop fails, run
    it in training mode on ``inputs`` (a dict display of keyword inputs, e.g.
    ``"{'x': torch.randn(2, 3, 8, 8)}"``); returns what it printed (its class and output
    shape), or raises with the process's error."""
    tests = Path(__file__).resolve().parent.parent  # where conftest's classes are found
    code = _LOAD.replace("{INPUTS}", inputs)
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, timeout=180, cwd=tests,
                         env={**os.environ, "PYTHONPATH": str(tests), "HF_HUB_OFFLINE": "1"})
    if out.returncode != 0:
        raise AssertionError(out.stderr.strip().splitlines()[-1] if out.stderr.strip()
                             else out.stdout)
    return out.stdout.strip()
