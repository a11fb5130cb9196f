"""An integration whose framework is not installed says which extra to install, in one line;
the library alone imports no framework."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from _processes import spawn

#: every test imports plugdrop in a process of its own
pytestmark = pytest.mark.slow


def _import_hiding(rank: int, module: str, hidden: list[str], said: str) -> None:
    """(In a process of its own, forked warm: plugdrop's integrations not imported yet) import
    ``plugdrop.integrations.MODULE`` with the modules ``hidden`` (as if not installed); write
    what the import said to the file ``said``."""
    for m in hidden:
        sys.modules[m] = None  # type: ignore[assignment]
    try:
        importlib.import_module(f"plugdrop.integrations.{module}")
    except ImportError as e:
        Path(said).write_text(str(e))
    else:
        Path(said).write_text("imported")


@pytest.mark.parametrize("module, hidden, extra", [
    ("lightning", ["lightning", "lightning.pytorch", "pytorch_lightning"], "lightning"),
    ("transformers", ["transformers", "transformers.trainer_callback"], "transformers"),
])
def test_a_missing_framework_names_its_extra(module, hidden, extra, tmp_path):
    said = tmp_path / "said"
    spawn(_import_hiding, (module, hidden, str(said)), nprocs=1)
    line = said.read_text().strip()
    assert "\n" not in line and line.startswith(f"plugdrop.integrations.{module} needs"), line
    assert line.endswith(f"pip install 'plugdrop[{extra}]'")


def test_the_library_imports_no_framework():
    """A fresh interpreter: ``import plugdrop`` and nothing else before it."""
    code = ("import sys, plugdrop\n"
            "print(sorted(m for m in ('lightning', 'transformers', 'accelerate') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "[]", out.stderr
