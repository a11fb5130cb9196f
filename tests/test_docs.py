"""The documentation site (docs/): it builds offline with Sphinx, warnings as errors; every
public name has a reference page; and every ```python block of a page runs, in order, in one
namespace per page (blocks written ```{code-block} python are shown, not run: Slurm, GPUs,
hours of training)."""

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import plugdrop as pd

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md")
               if "_build" not in p.parts and "generated" not in p.parts
               and "_generated" not in p.parts)
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def python_blocks(page: Path) -> list[str]:
    return FENCE.findall(page.read_text())


def test_every_page_is_in_the_table_of_contents():
    index = (DOCS / "index.md").read_text()
    listed = set(re.findall(r"^([\w/-]+)$", index, re.M))
    pages = {str(p.relative_to(DOCS).with_suffix("")) for p in PAGES} - {"index"}
    assert pages - listed == set(), "add these pages to docs/index.md's toctree"


def test_every_public_name_has_a_reference_page():
    api = (DOCS / "reference" / "api.md").read_text()
    listed = set(re.findall(r"^   ([\w.~]+)$", api, re.M))
    public = set(pd.__all__) - {"__version__"}
    assert public - listed == set(), "add these names to docs/reference/api.md"
    modules = {f"{m}.{n}" for m in ("functional", "schedules", "spec", "observe", "transforms")
               for n in getattr(pd, m).__all__ if n not in pd.__all__}
    aliases = {"schedules.ScheduleLike", "schedules.LayerRule", "spec.SpecLike",
               "spec.ATTACH_KEYS"}  # type aliases and a constant: named in their module's page
    assert modules - aliases - listed == set(), "add these names to docs/reference/api.md"
    assert listed - public - modules == {"integrations.lightning.Regularize",
                                         "integrations.transformers.Regularize"}


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)],
                         ids=lambda p: str(p.relative_to(DOCS)))
def test_the_examples_of_a_page_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    namespace: dict = {"__name__": "__docs__"}
    import torch

    torch.manual_seed(0)
    for i, block in enumerate(python_blocks(page)):
        code = compile(block, f"{page.relative_to(ROOT)} (python block {i + 1})", "exec")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(code, namespace)  # noqa: S102 - the documentation's own examples


@pytest.mark.slow
def test_the_docs_build_offline_without_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("furo")
    pytest.importorskip("myst_parser")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                          "html", "-d", str(tmp_path / "doctrees"), str(DOCS),
                          str(tmp_path / "html")], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    html = tmp_path / "html"
    for name in set(pd.__all__) - {"__version__"}:
        assert (html / "reference" / "generated" / f"plugdrop.{name}.html").is_file(), name
    assert (html / "_static" / "masks.png").is_file()
