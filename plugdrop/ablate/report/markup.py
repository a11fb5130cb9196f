"""The page's building blocks: its style sheet (:data:`STYLE`, shared with the search's page),
escaping, inline images and tables whose rows beyond the first fold away (a study of a
thousand variants keeps a page that opens at once)."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from typing import Any

__all__ = ["FOLDED", "STYLE", "e", "img", "table", "verdict_class"]

#: rows a page's table shows before the rest fold into a ``<details>`` element
FOLDED = 50

#: the page's style sheet, shared by the other reports (plugdrop search)
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;
max-width:1100px;padding:0 1rem;color:#222}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}
th,td{border:1px solid #ddd;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{font-variant-numeric:tabular-nums;white-space:nowrap}
.better{color:#1e7d32;font-weight:600}.worse{color:#b71c1c;font-weight:600}
.equivalent{color:#1f5fa8;font-weight:600}.open{color:#b9770e}.baseline{color:#555}
img{max-width:100%;height:auto;border:1px solid #eee;margin:.3rem 0}
.cams{display:flex;flex-wrap:wrap;gap:1rem}.cams figure{margin:0;max-width:48%}
pre{background:#f7f7f7;padding:.7rem;overflow:auto;font-size:.78rem}
.meta,.note{color:#555;font-size:.9rem}
details summary{cursor:pointer;color:#1f5fa8;margin:.3rem 0}
"""

def e(value: Any) -> str:
    """``value`` as HTML text."""
    return html.escape(str(value))


def img(data: bytes, alt: str) -> str:
    """A PNG inline (a ``data:`` URI: the page needs no other file)."""
    return (f'<img alt="{e(alt)}" src="data:image/png;base64,'
            f'{base64.b64encode(data).decode("ascii")}">')


def verdict_class(verdict: str) -> str:
    """The style class of a verdict (``better``, ``worse``, ``dropped``, ...)."""
    return verdict.split(":")[0].split()[0] if verdict else ""


def table(head: Sequence[str], rows: Sequence[str], cls: str = "", what: str = "rows",
          fold_at: int | None = None) -> str:
    """A table of ``rows`` (each a ``<tr>...</tr>``); beyond ``fold_at`` rows (default
    :data:`FOLDED`), the rest fold into a ``<details>`` element that says how many (``what``:
    what a row is)."""
    at = FOLDED if fold_at is None else fold_at
    top = "<tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
    attr = f' class="{cls}"' if cls else ""
    first = f"<table{attr}>{top}{''.join(rows[:at])}</table>"
    if len(rows) <= at:
        return first
    more = len(rows) - at
    name = what[:-1] if more == 1 and what.endswith("s") else what
    return (first + f"<details><summary>{more} more {e(name)}</summary>"
            f"<table{attr}>{top}{''.join(rows[at:])}</table></details>")
