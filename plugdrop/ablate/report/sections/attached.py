"""What each variant's runs attached, from their receipts (``attached.json``, which
``run.attach``, the callbacks and the bootstrap write): how many runs left one, what attached,
the layers matched and how often the hooks ran. A variant that reads as "no effect" shows here
whether it was on the model at all."""

from __future__ import annotations

import statistics
from typing import Any

from ...results import Run, receipts
from ..markup import e, table
from .base import Facts, Section

__all__ = ["Attached"]


def _calls(receipt: dict[str, Any]) -> int:
    return receipts.calls(receipt)  # checked when read (results.read)


def _layers(receipt: dict[str, Any]) -> dict[str, int]:
    return {str(a.get("label")): len(a.get("layers") or []) for a in
            receipt.get("attachments") or [] if isinstance(a, dict)}


class Attached(Section):
    name = "attached"

    def rows(self, f: Facts) -> list[dict[str, Any]]:
        """One row per variant with attachments: its runs that ended, those with a receipt,
        what attached them, the layers per attachment and the hooks' runs per run
        (median)."""
        out = []
        by_variant: dict[str, list[Run]] = {}
        for r in f.ab.runs:
            if r.status != "incomplete":
                by_variant.setdefault(r.variant, []).append(r)
        for v in f.ab.config.variants:
            if not v.attachments:
                continue
            ended = by_variant.get(v.name, [])
            receipts = [r.attached for r in ended if r.attached is not None]
            ok = [x for x in receipts if "error" not in x]
            out.append({
                "variant": v.name, "runs": len(ended), "receipts": len(ok),
                "by": sorted({str(x.get("by")) for x in ok}),
                "layers": _layers(ok[-1]) if ok else {},
                "calls": statistics.median(_calls(x) for x in ok) if ok else None,
                "errors": sorted({str(x["error"]) for x in receipts if "error" in x})})
        return out

    def data(self, f: Facts) -> dict[str, Any]:
        return {"attached": self.rows(f)}

    def text(self, f: Facts) -> list[str]:
        if not f.ab.config.receipt:  # the program applies the spec by other means
            return []
        missing = [r for r in self.rows(f) if r["runs"] and (r["receipts"] < r["runs"]
                                                           or not r["calls"])]
        return [f"  {r['variant']}: {r['receipts']} of {r['runs']} runs show it attached "
                f"and running (attached.json)" for r in missing]

    def html(self, f: Facts) -> list[str]:
        rows = self.rows(f)
        if not rows:
            return []
        asked = f.ab.config.receipt
        if not asked and not any(r["receipts"] for r in rows):
            return ["<h2>What each variant attached</h2>",
                    '<p class="note">Not known: the config says receipt: false (the program '
                    'applies the spec by other means, and leaves no receipt).</p>']
        cells = []
        for r in rows:
            layers = "; ".join(f"{k} ({n} layer{'' if n == 1 else 's'})"
                               for k, n in r["layers"].items()) or "-"
            calls = "-" if r["calls"] is None else f"{r['calls']:,.0f}"
            bad = asked and r["runs"] and (r["receipts"] < r["runs"] or not r["calls"])
            note = "; ".join(r["errors"])
            cls = ' class="worse"' if bad else ""
            cells.append(f"<tr{cls}><td>{e(r['variant'])}</td>"
                         f"<td class=\"num\">{r['receipts']} of {r['runs']}</td>"
                         f"<td>{e(', '.join(r['by']) or '-')}</td><td>{e(layers)}</td>"
                         f"<td class=\"num\">{calls}</td><td>{e(note)}</td></tr>")
        return ["<h2>What each variant attached</h2>",
                '<p class="note">From each run\'s receipt (attached.json): the layers each '
                'attachment matched, and how often its hooks ran in a run (median over the '
                'runs).</p>',
                table(["variant", "runs with a receipt", "attached by", "layers matched",
                       "hook runs per run", "not attached"], cells, what="variants")]
