"""``OUT/report.html``: one self-contained page a person opens to read an ablation's result.

Everything is inside the file (plots and Grad-CAM images as ``data:`` URIs, the style inline, no
script or font from the network), so it opens offline, from a copied folder or an e-mail: the
parts of the report's sections that apply (:mod:`.sections`: the verdicts with their intervals,
a forest plot, the seeds an adaptive design used, the robust summaries, the learning curves,
calibration, the drop fraction against its schedule, Grad-CAM, what a program logged, the
decisions and their reasons), what the report leaves out and why, the printed table and the
resolved config. Long tables fold their rows beyond the first (:mod:`.markup`), so a study of
thousands of runs keeps a page that opens at once.
"""

from __future__ import annotations

import datetime as _dt
import json

from ..results import FAILED, FINISHED, INCOMPLETE
from .markup import STYLE, e
from .sections import Facts, left_out
from .summary import run_counts

__all__ = ["STYLE", "render"]


def render(f: Facts, text_table: str) -> bytes:
    """The page, as UTF-8 bytes, from the folder's state (its plot files as they are now)."""
    ab = f.ab
    cfg = ab.config
    rule = cfg.decision
    c = run_counts(ab, f.summary)
    design = (f"adaptive: {cfg.plan.min} to {cfg.plan.max} seeds, alpha {rule.alpha:g}, "
              f"margin {rule.margin:g}" if cfg.plan is not None
              else f"fixed: seeds {list(cfg.seed_list)}")
    own = f" ({e(rule.metric.own_unit)})" if rule.metric.own_unit else ""  # a program's unit
    parts = [f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>plugdrop ablation: {e(ab.out.name)}</title><style>{STYLE}</style>"
             f"</head><body>",
             f"<h1>Ablation <code>{e(ab.out)}</code></h1>",
             f"<p class=\"meta\">{e(ab.trains)}; "
             f"{len(ab.variants)} variants; {e(design)}; decided on "
             f"{e(rule.metric.name)}{own}; {c[FINISHED]} runs finished, "
             f"{c[FAILED]} failed, {c[INCOMPLETE]} incomplete; built "
             f"{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}.</p>"]
    for s in f.sections:
        parts += s.html(f)
    if missing := left_out(f):
        parts += ["<h2>Left out</h2>", "<ul class=\"note\">" + "".join(
            f"<li>{e(line)}.</li>" for line in missing) + "</ul>"]
    parts += ["<h2>The table, as the command prints it</h2>", f"<pre>{e(text_table)}</pre>",
              "<h2>Configuration</h2>",
              f"<pre>{e(json.dumps(cfg.resolved(), indent=2, default=str))}</pre>",
              "<script>window.addEventListener('load',function(){var n=0;"
              "document.querySelectorAll('img').forEach(function(i){if(i.naturalWidth>0)n++;});"
              "document.body.setAttribute('data-images-shown',n);});</script>",
              "</body></html>"]
    return "\n".join(parts).encode("utf-8")
