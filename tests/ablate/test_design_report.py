"""What the report says of an adaptive design's decisions (issue 34), on folders written by hand:
a folder an older plugdrop started (its recorded config has no ``spending``) replays the very
decisions it made, also after ``--resume``, and says so; a new folder decides by the exact
design; the table, ``results.json`` and ``report.html`` name the procedure, forecast the seeds an
undecided variant would need and warn about skewed differences."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _folders import OFFSETS, VALUES, adaptive_folder

from plugdrop.ablate import config, runs
from plugdrop.ablate.errors import ConfigError
from plugdrop.ablate.report import load_ablation, summarize, table, write_report
from plugdrop.ablate.decide import legacy as L
from plugdrop.ablate.decide.simulate import seeds_needed

#: what plugdrop before issue 34 decided on VALUES (commit c94adbb's sequential.py):
#: verdict, round, n, mean, low, high, p adj.
BEFORE = {
    "good": ("better", 1, 3, 5.033333333333338, 4.102441736329049, 5.964224930337626,
             0.0017324325445175462),
    "grid[p=0.1]": ("inconclusive", 3, 5, 2.100000000000002, -0.38800157377758326,
                    4.588001573777587, 0.09425292410996278),
    "grid[p=0.2]": ("inconclusive", 3, 5, -1.0000000000000009, -3.6522185891163375,
                    1.6522185891163357, 1.0),
    "noisy": ("inconclusive", 3, 5, 0.28000000000000025, -4.109561985785038, 4.669561985785038,
              1.0),
}
OLD_LEGEND = ("mean [confidence sequence: alpha 0.05 split over the 4 variants and spent over "
              "the rounds (Pocock-type), valid however often it was looked at].")


def _decided(out) -> dict:
    return {s.variant: s.decision for s in summarize(load_ablation(out)) if s.decision}


def test_an_old_folder_replays_the_decisions_it_made(tmp_path):
    out = tmp_path / "old"
    adaptive_folder(out, legacy=True)
    assert config.legacy_design(out)
    got = _decided(out)
    for v, want in BEFORE.items():
        d = got[v]
        assert (d.verdict, d.round, d.n, d.mean, d.low, d.high, d.p) == want, v
        assert d.procedure == L.PROCEDURE
    ab = load_ablation(out)
    text = table(ab, summarize(ab))
    assert OLD_LEGEND in text and "procedure: legacy" in text


def test_an_old_folder_keeps_its_design_when_resumed(tmp_path):
    """``--resume`` rewrites ablation.json: the runner records the config as the folder has it
    (``config.as_recorded``), without the design's settings at their defaults, so the hash
    stays and the folder stays legacy; a design away from them is another config, refused."""
    out = tmp_path / "old"
    cfg = adaptive_folder(out, legacy=True)
    manifest = json.loads((out / "ablation.json").read_text())
    again = dict(manifest, config=config.as_recorded(out, cfg.resolved()))
    assert "spending" in cfg.resolved() and "spending" not in again["config"]
    assert runs.prepare(out, again, True, config.unhashed()) is None
    assert config.legacy_design(out)
    assert {v: d.verdict for v, d in _decided(out).items()} == \
        {v: want[0] for v, want in BEFORE.items()}
    other = config.loads(cfg.origin["text"], "cfg.yaml", config.parse_overrides(
        ["spending=obf"]))
    # the spending only judges (since 0.2): the runs are kept, the change recorded and said
    assert other.hash() == cfg.hash() and other.judged_hash() != cfg.judged_hash()
    moved = dict(manifest, config=config.as_recorded(out, other.resolved()),
                 config_hash=other.hash())
    warning = runs.prepare(out, moved, True, config.unhashed(), judging=config.judging())
    assert warning is not None and "the judging changed after runs ended (spending: " in warning
    (change,) = json.loads((out / "ablation.json").read_text())["judging_changes"]
    assert change["changed"]["spending"]["to"] == "obf" and change["runs_ended"] > 0


def test_a_new_folder_decides_by_the_exact_design(tmp_path):
    """The same values, recorded with ``spending``: the exact design calls ``grid[p=0.1]``
    better at the last round where the old one left it inconclusive (its interval was the
    intersection of union-bound intervals); the rest keep their verdicts."""
    out = tmp_path / "new"
    cfg = adaptive_folder(out)
    assert not config.legacy_design(out)
    got = _decided(out)
    assert {v: d.verdict for v, d in got.items()} == {
        "good": "better", "grid[p=0.1]": "better", "grid[p=0.2]": "inconclusive",
        "noisy": "inconclusive"}
    assert got["good"].round == 1 and got["grid[p=0.1]"].round == 3
    assert "Holm" in got["good"].procedure and str(cfg.decision.spending) in \
        got["good"].procedure
    assert got["grid[p=0.1]"].low > 0  # type: ignore[operator]  # interval and verdict agree


def test_the_table_the_json_and_the_page_name_the_procedure_and_forecast(tmp_path):
    out = tmp_path / "new"
    adaptive_folder(out)
    rep = write_report(out, plots=False)
    noisy = _decided(out)["noisy"]
    d = 100 * np.array(OFFSETS["noisy"])
    level = 0.05 / 2  # good and grid[p=0.1] passed their shares on to the others (Holm)
    assert noisy.forecast == seeds_needed(d.mean() / d.std(ddof=1), level, 0.8)
    assert f"forecast: noisy stays inconclusive at 5 seeds: a true difference of the size " \
           f"observed (+0.28 pp) needs about {noisy.forecast} seeds" in rep.table
    assert "procedure: exact group-sequential t-tests, alpha 0.05 spent over the rounds by " \
           "first(0.21)+hsd(-3.25), passed on by Holm (graphical, Maurer-Bretz)" in rep.table
    assert "Pocock" not in rep.table and "forecast: good" not in rep.table
    doc = json.loads((out / "results.json").read_text())
    row = next(s for s in doc["summary"] if s["variant"] == "noisy")
    assert row["decision"]["forecast_seeds"] == noisy.forecast
    assert row["decision"]["procedure"].startswith("exact group-sequential")
    assert row["decision"]["skewness"] == pytest.approx(noisy.skewness)
    page = (out / "report.html").read_text()
    assert "Procedure: exact group-sequential" in page and "forecast: noisy" in page


def test_skewed_differences_are_warned_about(tmp_path):
    """One variant's differences with a far outlier (skewness 2.2 over 5 seeds) and the same
    in all variants together: a warning line each, in the table and the page."""
    skewed = {"baseline": dict(enumerate([0.9] * 5)),
              **{v: {s: 0.9 + (0.001 * (s + 1) if s < 4 else 0.08) for s in range(5)}
                 for v in ("good", "grid[p=0.1]", "grid[p=0.2]", "noisy")}}
    out = tmp_path / "skewed"
    adaptive_folder(out, skewed)
    got = _decided(out)
    assert got["noisy"].skew_warning and got["noisy"].skewness > 2  # type: ignore[operator]
    rep = write_report(out, plots=False)
    assert "skewness: noisy's differences are skewed (G1 = +2.2" in rep.table
    assert "skewness: the differences of all variants together are skewed" in rep.table
    assert "skewness: noisy" in (out / "report.html").read_text()
    assert got["noisy"].as_dict()["skew_warning"] is True
