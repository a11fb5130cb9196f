"""The decisions an adaptive design took, in the order taken (``decisions.jsonl``): the
round, the seeds, the variant, its verdict and the reason."""

from __future__ import annotations

import json

from ..markup import e, table, verdict_class
from .base import Facts, Section

__all__ = ["Decisions"]


class Decisions(Section):
    name = "decisions"
    always = True

    def html(self, f: Facts) -> list[str]:
        path = f.out / "decisions.jsonl"
        try:
            lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        except (OSError, ValueError):
            return []
        if not lines:
            return ["<h2>Decisions</h2>", '<p class="note">No decision taken yet.</p>']
        rows = [f"<tr><td class=\"num\">{e(d.get('round'))}</td><td class=\"num\">"
                f"{e(d.get('seeds'))}</td><td>{e(d.get('variant'))}</td>"
                f"<td class=\"{verdict_class(str(d.get('verdict', '')))}\">"
                f"{e(d.get('verdict'))}</td><td>{e(d.get('reason'))}</td></tr>"
                for d in lines if isinstance(d, dict)]
        return ["<h2>Decisions</h2>",
                table(["round", "seeds", "variant", "verdict", "reason"], rows,
                      what="decisions")]
