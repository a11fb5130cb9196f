"""``OUT/report.html`` of a search: one self-contained page (plots as ``data:`` URIs) built
from ``search.json`` alone: the verdict, the best candidate's attachments, what mattered (the
importance of each dimension), the estimate against each searched value, the history, the
confirmation's forest plot and every candidate."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from typing import Any

import yaml

from ..report.markup import STYLE
from .plots import plot_confirmation, plot_history, plot_importance, plot_values

__all__ = ["against", "render", "summary_line"]


def _e(value: Any) -> str:
    return html.escape(str(value))


def _img(data: bytes | None, alt: str) -> str:
    if data is None:
        return f'<p class="note">({_e(alt)}: not enough candidates to draw)</p>'
    return (f'<img alt="{_e(alt)}" src="data:image/png;base64,'
            f'{base64.b64encode(data).decode("ascii")}">')


def _n(x: float | None) -> str:
    return "-" if x is None else f"{x:+.4g}"


def _v(x: Any) -> str:
    """A searched value as a person reads it (Optuna's floats to 4 significant digits)."""
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _sampler(s: Mapping[str, Any]) -> str:
    """``{name: tpe, seed: 0, n_startup_trials: 5}`` as ``TPE (n_startup_trials 5), seed 0``."""
    options = ", ".join(f"{k} {_v(v)}" for k, v in s.items() if k not in ("name", "seed"))
    text = str(s.get("name", "?")).upper() + (f" ({options})" if options else "")
    return text if s.get("seed") is None else f"{text}, seed {s['seed']}"


def against(verdict: str) -> str:
    """A verdict said of the best against the baseline: ``better than the baseline``,
    ``equivalent to the baseline``, ``inconclusive against the baseline``."""
    if verdict in ("better", "worse"):
        return f"{verdict} than the baseline"
    return f"{verdict} {'to' if verdict == 'equivalent' else 'against'} the baseline"


def summary_line(doc: Mapping[str, Any]) -> str:
    """The search's result in one sentence (the page's and the command's)."""
    best, conf = doc.get("best"), doc.get("confirmation")
    n = len(doc["candidates"])
    if best is None:
        return f"no candidate of {n} finished with paired seeds: nothing to confirm"
    est = best["estimate"]
    text = (f"best of {n} candidates: {best['candidate']} ({_n(est['mean'])} on "
            f"{est['n']} search seeds)")
    if conf is None or not conf.get("complete"):
        return text + "; its confirmation on fresh seeds is not finished"
    iv = conf["interval"]
    return (f"{text}; confirmed on {conf['n']} fresh seeds: {against(conf['verdict'])} "
            f"({_n(iv['mean'])} [{_n(iv['low'])}, {_n(iv['high'])}])")


def _candidates(doc: Mapping[str, Any]) -> str:
    names = [d["name"] for d in doc["space"]]
    head = "".join(f"<th>{_e(n)}</th>" for n in names)
    rows = []
    for c in doc["candidates"]:
        e = c["estimate"]
        cells = "".join(f"<td>{_e(_v(c['params'].get(n, '-')))}</td>" for n in names)
        reason = c["error"] or c["reason"]
        rows.append(f"<tr><td>{_e(c['name'])}</td>{cells}<td>{_e(c['status'])}</td>"
                    f"<td class=num>{len(c['seeds'])}</td><td class=num>{_n(e['mean'])}</td>"
                    f"<td class=num>[{_n(e['low'])}, {_n(e['high'])}]</td>"
                    f"<td>{_e(reason)}</td></tr>")
    return (f"<table><tr><th>candidate</th>{head}<th>status</th><th>seeds</th><th>mean</th>"
            f"<th>interval (its seeds, unadjusted)</th><th>why</th></tr>{''.join(rows)}"
            f"</table>")


def render(doc: Mapping[str, Any]) -> bytes:
    """The page, as UTF-8 bytes."""
    best, conf = doc.get("best"), doc.get("confirmation")
    verdict = conf["verdict"] if conf and conf.get("complete") else ""
    parts = [f"<!doctype html><html><head><meta charset=utf-8><title>plugdrop search: "
             f"{_e(doc['source'])}</title><style>{STYLE}</style></head><body>",
             f"<h1>plugdrop search: {_e(doc['source'])}</h1>",
             f"<p class='{_e(verdict)}'>{_e(summary_line(doc))}.</p>",
             f"<p class=note>{doc['runs']} of {doc['budget']} runs; decided on "
             f"{_e(doc['metric'])} ({_e(doc['goal'])}), alpha {doc['alpha']:g}; the search's "
             f"seeds {doc['search_seeds']}; sampler {_e(_sampler(doc['sampler']))}.</p>"]
    if best is not None:
        parts += ["<h2>The best candidate (best.yaml)</h2>",
                  f"<pre>{_e(yaml.safe_dump(best['attachments'], sort_keys=False))}</pre>"]
    if conf is not None:
        parts += ["<h2>Confirmation on fresh seeds</h2>",
                  f"<p>{_e(conf['reason'])} (seeds {conf['seeds']}; {_e(conf['procedure'])}). "
                  f"The search's own estimate of the best is biased upwards (the best of many "
                  f"noisy candidates looks better than it is); the fresh seeds took no part in "
                  f"the choice, so the confirmation's verdict holds at alpha.</p>",
                  _img(plot_confirmation(doc), "confirmation")]
    evaluator = doc.get("importance", {}).get("evaluator") or ""
    parts += ["<h2>What mattered</h2>",
              f"<p class=note>The share of the candidates' estimates each searched dimension "
              f"explains ({_e(evaluator or 'too few candidates finished to say')}).</p>",
              _img(plot_importance(doc), "importance"),
              "<h2>Estimate against each searched value</h2>",
              _img(plot_values(doc), "estimate against each value"),
              "<h2>History</h2>", _img(plot_history(doc), "history"),
              "<h2>Every candidate</h2>", _candidates(doc), "</body></html>"]
    return "\n".join(parts).encode("utf-8")
