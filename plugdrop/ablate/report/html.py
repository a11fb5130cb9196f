"""``OUT/report.html``: one self-contained page a person opens to read an ablation's result.

Everything is inside the file (plots and Grad-CAM images as ``data:`` URIs, the style inline, no
script or font from the network), so it opens offline, from a copied folder or an e-mail: the
verdicts with their intervals (a table and a forest plot), the seeds an adaptive design used
against its maximum, the robust summaries, the learning curves, calibration, the measured drop
fraction against the schedule, Grad-CAM per variant, the decisions and their reasons, failed
runs and warnings, and the resolved config.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .notes import notes, procedure
from . import logged
from ..results import FAILED, FINISHED, INCOMPLETE, Ablation
from .summary import VariantSummary, run_counts, saved_runs

__all__ = ["PLOTS", "render"]

#: the plot files the page shows, in order, with their headings
PLOTS = (("forest.png", "Differences to the baseline"), ("seeds.png", "Seeds used"),
         ("val_acc.png", "Learning curves"), ("final_acc.png", "Final accuracy"),
         ("calibration.png", "Calibration"), ("drop_frac.png", "Drop fraction against the schedule"))

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
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _img(data: bytes, alt: str) -> str:
    return (f'<img alt="{_e(alt)}" src="data:image/png;base64,'
            f'{base64.b64encode(data).decode("ascii")}">')


def _verdict_class(verdict: str) -> str:
    return verdict.split(":")[0].split()[0] if verdict else ""


def _verdict_table(ab: Ablation, summary: Sequence[VariantSummary]) -> str:
    metric, scale = ab.config.decide_on.name, ab.config.decide_on.scale
    unit = " (pp)" if ab.config.decide_on.percent else ""
    program = ab.config.program is not None  # no accuracy of ours: its metric only
    extra = metric != "val_acc" or program
    head = ["variant", "seeds / runs done"] + ([] if program else ["final val acc %"]) + (
        [f"final {metric}"] if extra else []) + [f"vs {ab.baseline}{unit}", "p adj.",
                                                 "verdict", "reason"]
    rows = []
    for s in summary:
        seeds = f"{s.finished}/{s.runs}" + (f" of {s.seeds_max}" if s.seeds_max else "")
        if s.is_baseline:
            diff = p = "(baseline)"
        else:
            diff = s.format_versus()
            p = s.format_p()
        reason = s.decision.reason if s.decision is not None else ""
        cells = [s.variant, seeds] + ([] if program else [s.final.format()]) + (
            [s.decided.format(scale, s.digits) if s.decided is not None else "-"] if extra
            else []) + [
            diff, p, s.verdict, reason]
        cls = _verdict_class(s.verdict)
        at = len(cells) - 2  # the verdict's column
        rows.append("<tr>" + "".join(
            f'<td class="{"num" if 1 <= i < at else (cls if i == at else "")}">{_e(c)}</td>'
            for i, c in enumerate(cells)) + "</tr>")
    return ("<table class=\"verdicts\"><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head)
            + "</tr>" + "".join(rows) + "</table>")


def _robust_table(ab: Ablation, summary: Sequence[VariantSummary]) -> str:
    metric, scale = ab.config.decide_on.name, ab.config.decide_on.scale
    rows = [f"<tr><td>{_e(s.variant)}</td><td class=\"num\">"
            f"{_e(s.iqm.format(scale, s.digits) if s.iqm else '-')}</td><td class=\"num\">"
            f"{_e(s.p_improve.format(1.0) if s.p_improve else '-')}</td></tr>"
            for s in summary]
    return (f"<table><tr><th>variant</th><th>IQM of final {_e(metric)} [95% bootstrap CI]</th>"
            f"<th>P(a seed beats a baseline seed) [95% CI]</th></tr>" + "".join(rows)
            + "</table>")


def _cams(ab: Ablation) -> str:
    figs = []
    for v in ab.variants:
        run = next((r for r in ab.runs if r.variant == v and r.gradcam is not None), None)
        if run is None or run.gradcam is None:
            continue
        try:
            data = run.gradcam.read_bytes()
        except OSError:
            continue
        figs.append(f"<figure>{_img(data, f'Grad-CAM of {v}')}<figcaption>{_e(v)} "
                    f"(seed {run.seed})</figcaption></figure>")
    return '<div class="cams">' + "".join(figs) + "</div>" if figs else \
        '<p class="note">No Grad-CAM images (gradcam: false, or no run finished yet).</p>'


def _decisions(out: Path) -> str:
    path = out / "decisions.jsonl"
    try:
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return ""
    if not lines:
        return '<p class="note">No decision taken yet.</p>'
    rows = "".join(f"<tr><td class=\"num\">{_e(d.get('round'))}</td><td class=\"num\">"
                   f"{_e(d.get('seeds'))}</td><td>{_e(d.get('variant'))}</td>"
                   f"<td class=\"{_verdict_class(str(d.get('verdict', '')))}\">"
                   f"{_e(d.get('verdict'))}</td><td>{_e(d.get('reason'))}</td></tr>"
                   for d in lines)
    return ("<table><tr><th>round</th><th>seeds</th><th>variant</th><th>verdict</th>"
            "<th>reason</th></tr>" + rows + "</table>")


def _trained(ab: Ablation) -> str:
    """What trained: ``resnet18 on digits``, or the program."""
    cfg = ab.config
    if cfg.program is not None:
        return f"program {cfg.program} (in {cfg.cwd})"
    return f"{cfg.model} on {ab.data.get('name', '?')}"


def render(ab: Ablation, summary: Sequence[VariantSummary], text_table: str) -> bytes:
    """The page, as UTF-8 bytes, from the folder's state (its plot files as they are now)."""
    cfg = ab.config
    rule = cfg.decision
    c = run_counts(ab, summary)
    design = (f"adaptive: {cfg.plan.min} to {cfg.plan.max} seeds, alpha {rule.alpha:g}, "
              f"margin {rule.margin:g}" if cfg.plan is not None
              else f"fixed: seeds {list(cfg.seed_list)}")
    parts = [f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>plugdrop ablation: {_e(ab.out.name)}</title><style>{STYLE}</style>"
             f"</head><body>",
             f"<h1>Ablation <code>{_e(ab.out)}</code></h1>",
             f"<p class=\"meta\">{_e(_trained(ab))}; "
             f"{len(ab.variants)} variants; {_e(design)}; decided on "
             f"{_e(rule.metric.name)}; {c[FINISHED]} runs finished, "
             f"{c[FAILED]} failed, {c[INCOMPLETE]} incomplete; built "
             f"{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}.</p>",
             "<h2 id=\"verdicts\">Verdicts</h2>", _verdict_table(ab, summary)]
    ran = procedure(summary)
    parts += [f"<p class=\"note\">{_e(line)}</p>" for line in
              ([f"Procedure: {ran}."] if ran else []) + notes(summary)]
    saved = saved_runs(summary)
    if saved is not None:
        parts.append(f"<p>The adaptive design used {saved[0]} runs; a fixed design with the "
                     f"maximum seeds trains {saved[1]}: <b>{saved[1] - saved[0]} runs saved</b>."
                     f"</p>")
    for name, heading in PLOTS:
        path = ab.out / name
        if path.is_file():
            parts += [f"<h2>{_e(heading)}</h2>", _img(path.read_bytes(), heading)]
        if name == "seeds.png":
            parts += ["<h2>Robust summaries</h2>", _robust_table(ab, summary)]
            if cfg.program is not None:  # what the program logged, and what it cannot show
                curves = ab.out / "curves.png"
                parts += logged.html_sections(
                    ab, curves.read_bytes() if curves.is_file() else None,
                    summary[0].final.confidence if summary else 0.95)
    if cfg.program is None:
        parts += ["<h2>Grad-CAM</h2>", _cams(ab)]
    decisions = _decisions(ab.out)
    if decisions:
        parts += ["<h2>Decisions</h2>", decisions]
    parts += ["<h2>The table, as the command prints it</h2>", f"<pre>{_e(text_table)}</pre>",
              "<h2>Configuration</h2>",
              f"<pre>{_e(json.dumps(cfg.resolved(), indent=2, default=str))}</pre>",
              "<script>window.addEventListener('load',function(){var n=0;"
              "document.querySelectorAll('img').forEach(function(i){if(i.naturalWidth>0)n++;});"
              "document.body.setAttribute('data-images-shown',n);});</script>",
              "</body></html>"]
    return "\n".join(parts).encode("utf-8")
