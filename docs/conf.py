"""Sphinx configuration of plugdrop's documentation: ``./dev docs`` builds it into
``docs/_build/html`` offline, warnings as errors. Guides are Markdown (MyST); the API reference
is generated from the docstrings (autodoc + autosummary, Google-style sections by napoleon);
the pictures of masks are drawn at build time by ``_ext/figures.py``."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

import plugdrop  # noqa: E402

project = "plugdrop"
author = "the plugdrop developers"
copyright = "2026, the plugdrop developers"
release = version = plugdrop.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "figures",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "_generated/*.md", "README.md"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autodoc_mock_imports: list[str] = []
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

html_theme = "furo"
html_title = f"plugdrop {release}"
html_static_path = ["_generated"]
templates_path = ["_templates"]
