"""The decisions an adaptive design took, in the order taken (``decisions.jsonl``): the
round, the seeds, the variant, its verdict and the reason; and each change of the settings
that judge (the decision metric, the margin, ...) made after runs had ended, said on the page
and under the table."""

from __future__ import annotations

import json
from typing import Any

from ..markup import e, table, verdict_class
from .base import Facts, Section

__all__ = ["Decisions", "change_line"]


def change_line(change: dict[str, Any]) -> str:
    """One change of the judging settings, in words."""
    got = change.get("changed")
    what: dict[str, Any] = got if isinstance(got, dict) else {}
    said = "; ".join(f"{k} {json.dumps(c.get('from'))} -> {json.dumps(c.get('to'))}"
                     for k, c in what.items() if isinstance(c, dict))
    ended = change.get("runs_ended")
    after = (f"after {ended} run{'' if ended == 1 else 's'} had ended"
             if isinstance(ended, int) and not isinstance(ended, bool) else "after runs had ended")
    at = change.get("at")
    when = f", {at}" if isinstance(at, str) and at else ""
    return (f"the judging changed {after} ({said or 'settings not recorded'}{when}): the "
            f"verdicts are of the new setting, chosen after seeing results, which the error "
            f"rate does not cover")


def _changes(f: Facts) -> list[str]:
    return [change_line(c) for c in f.ab.judging_changes]


class Decisions(Section):
    name = "decisions"
    always = True

    def html(self, f: Facts) -> list[str]:
        return self.changes(f) + self.decisions(f)

    def text(self, f: Facts) -> list[str]:
        return [f"  note: {line}" for line in _changes(f)]

    def data(self, f: Facts) -> dict[str, Any]:
        return {"judging_changes": f.ab.judging_changes} if f.ab.judging_changes else {}

    def changes(self, f: Facts) -> list[str]:
        lines = _changes(f)
        if not lines:
            return []
        return ['<p class="note worse">' + "<br>".join(e(x) for x in lines) + "</p>"]

    def decisions(self, f: Facts) -> list[str]:
        path = f.out / "decisions.jsonl"
        try:
            lines = [d for x in path.read_text().splitlines() if x.strip()
                     if "judging_changed" not in (d := json.loads(x))]
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
