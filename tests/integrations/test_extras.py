"""An integration whose framework is not installed says which extra to install, in one line."""

import subprocess
import sys

import pytest

#: every test imports plugdrop in a fresh process
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("module, hidden, extra", [
    ("lightning", ["lightning", "lightning.pytorch", "pytorch_lightning"], "lightning"),
    ("transformers", ["transformers", "transformers.trainer_callback"], "transformers"),
])
def test_a_missing_framework_names_its_extra(module, hidden, extra):
    code = (f"import sys\nfor m in {hidden!r}: sys.modules[m] = None\n"
            f"try:\n    import plugdrop.integrations.{module}\n"
            f"except ImportError as e:\n    print(e)\nelse:\n    print('imported')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert "\n" not in line and line.startswith(f"plugdrop.integrations.{module} needs")
    assert line.endswith(f"pip install 'plugdrop[{extra}]'")


def test_the_library_imports_no_framework():
    code = ("import sys, plugdrop\n"
            "print(sorted(m for m in ('lightning', 'transformers', 'accelerate') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "[]", out.stderr
