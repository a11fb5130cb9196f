"""The report of a ``program:`` ablation, decided on a metric the program logs: ``results.json``
says what its runs record (the decision metric under its own name, the time of a run, no
accuracy it never logged), an interrupted adaptive design counts the runs that finished, the
values are shown to the digits their intervals support, and the ``unit`` of
``decide_on: {metric, goal, unit}`` is named in the table and on the page. The program is
``programs/fake.py`` (the standard library only, well under a second a run)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _programs import ablate, config, fake, folder, run_dir

from plugdrop.ablate import config as C
from plugdrop.ablate.config.metrics import METRICS, Metric, supported_digits
from plugdrop.ablate.errors import ConfigError
from plugdrop.ablate.report import write_report
from plugdrop.cli import main

BASE_GOOD = """\
  baseline: []
  good:
    - {layers: "layer1.*", transform: Dropout, p: 0.1}
"""
MS = "{metric: score, goal: max, unit: ms}\nmargin: 0.005"


def _summary(out: Path) -> dict[str, dict]:
    return {s["variant"]: s for s in json.loads((out / "results.json").read_text())["summary"]}


# ------------------------------------------------------------------------------ results.json


def test_results_json_of_a_program_has_its_metric_and_run_time_not_val_acc(
        tmp_path, monkeypatch, capsys):
    folder(tmp_path, monkeypatch, config(fake(), seeds="[0, 1, 2]"))
    assert ablate() == 0
    summary = _summary(tmp_path / "out")
    for s in summary.values():
        assert s["finished"] == 3
        assert s["final_score"] == s["final_metric"] and s["final_score"]["n"] == 3
        assert "no finished runs" not in json.dumps(s)
        for key in ("final_acc", "best_acc", "final_acc_ema", "best_acc_ema",
                    "diff_final_acc", "diff_final_acc_ema"):
            assert key not in s, key
        assert "no val_acc" in s["left_out"]
        # a program's runs record no epoch time: the median wall time of a run, named so
        assert s["run_time"] > 0 and "epoch_time" not in s
        assert "epoch_time_includes_first_epoch" not in s
    assert summary["good"]["time_vs_baseline"] > 0


def test_a_program_that_logs_val_acc_keeps_its_accuracy(tmp_path, monkeypatch):
    folder(tmp_path, monkeypatch, config(fake(), seeds="[0, 1]", variants=BASE_GOOD))
    assert ablate() == 0
    out = tmp_path / "out"
    for path in (out / "runs").glob("*/metrics.jsonl"):  # a program that also logs val_acc
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({**r, "val_acc": r["score"]}) + "\n" for r in lines))
    write_report(out, plots=False)
    good = _summary(out)["good"]
    assert good["final_acc"]["n"] == 2 and "left_out" not in good
    assert good["final_acc"]["mean"] == pytest.approx(good["final_score"]["mean"])


# --------------------------------------------------------------------- an interrupted design


def test_an_interrupted_adaptive_design_counts_the_runs_that_finished(tmp_path, monkeypatch,
                                                                       capsys):
    folder(tmp_path, monkeypatch, config(fake(), seeds="{min: 3, max: 5}"))
    assert ablate() == 0
    out = tmp_path / "out"
    # stopped while its first round trained: 4 of the 9 runs it asked for had finished
    for run in ("good__s1", "good__s2", "bad__s0", "bad__s1", "bad__s2"):
        (run_dir(out, run) / "done.json").unlink()
    capsys.readouterr()
    rep = write_report(out, plots=False)
    assert rep.finished == 4
    line = next(x for x in rep.table.splitlines() if x.startswith("The adaptive design"))
    assert line == ("The adaptive design has finished 4 of the 9 runs it asked for so far; a "
                    "fixed design with 5 seeds per variant trains 15: at most 6 runs saved.")
    page = (out / "report.html").read_text()
    assert "has finished 4 of the 9 runs it asked for so far" in page
    assert "used 9 runs" not in page and "has trained 9" not in page
    # once decided, what it trained and what it saved
    done = tmp_path / "done"
    done.mkdir()
    folder(done, monkeypatch, config(fake(), seeds="{min: 3, max: 5}"))
    assert ablate() == 0
    assert ("The adaptive design trained 9 runs; a fixed design with 5 seeds per variant "
            "trains 15: 6 runs saved.") in write_report(done / "out", plots=False).table


# ------------------------------------------------------------------------------ the digits


@pytest.mark.parametrize("spread,value,digits", [
    (0.049, 0.49, 3), (0.0049, 0.49, 4), (3.2, 27.08, 1), (0.96, 27.08, 2), (45.0, 1234.5, 0),
    (None, 27.0833, 2), (None, 0.490312, 4), (0.0, 8.9583, 3), (None, 12345.6, 0),
    (1e-9, 1.0, 6), (None, None, 4), (float("nan"), 0.0, 4)])
def test_a_logged_metric_is_shown_to_the_digits_its_interval_supports(spread, value, digits):
    assert supported_digits(spread, value) == digits
    custom = Metric.logged("score", True)
    assert custom.shown_digits(spread, value) == digits
    # the metrics plugdrop knows keep their fixed digits: 2 in pp, 3 in nats
    assert METRICS["val_acc"].shown_digits(spread, value) == 2
    assert METRICS["val_nll"].shown_digits(spread, value) == 3


def test_the_table_shows_the_digits_the_intervals_support_and_no_stray_space(
        tmp_path, monkeypatch, capsys):
    tiny = """\
  baseline: []
  tiny:
    - {layers: "layer1.*", transform: Dropout, p: 0.001}
"""  # too small to decide within 4 seeds: inconclusive, with a forecast
    folder(tmp_path, monkeypatch, config(fake(), seeds="{min: 3, max: 4}", variants=tiny,
                                         decide="{metric: score, goal: max}\nmargin: 0.0001"))
    assert ablate() == 0
    table = write_report(tmp_path / "out", plots=False).table
    rows: dict[str, str] = {}
    for line in table.splitlines():  # the verdicts' rows, the first of each variant
        if line.split()[:1] in (["baseline"], ["tiny"]):
            rows.setdefault(line.split()[0], line)
    # the final score's interval is +-0.04: to 2 significant digits, 3 decimals
    assert re.search(r" 0\.\d{3} \[0\.\d{3}, 0\.\d{3}\] ", rows["baseline"]), rows
    # the difference's interval is +-0.003: 4 decimals
    assert re.search(r" [+-]0\.\d{4} \[[+-]0\.\d{4}, [+-]0\.\d{4}\] ", rows["tiny"]), rows
    forecast = next(x for x in table.splitlines() if x.startswith("forecast: tiny"))
    assert re.search(r"observed \([+-]0\.\d{4}\) needs", forecast), forecast
    assert " )" not in table
    page = (tmp_path / "out" / "report.html").read_text()
    assert re.search(r">0\.\d{3} \[0\.\d{3}, 0\.\d{3}\]<", page)


# -------------------------------------------------------------------------------- the unit


def test_decide_on_takes_a_unit_and_hashes_as_before():
    text = config(fake(), decide=MS)
    cfg = C.loads(text)
    assert cfg.decide_on.unit == "ms" and cfg.decide_on.label == "ms"
    assert cfg.resolved()["decide_on"] == {"metric": "score", "goal": "max", "unit": "ms"}
    plain = C.loads(config(fake()))
    assert plain.resolved()["decide_on"] == {"metric": "score", "goal": "max"}
    assert plain.decide_on.unit == "" and plain.hash() == cfg.hash()
    # the stored config reads back with its unit
    again = C.loads(text.replace(MS.splitlines()[0], json.dumps(cfg.resolved()["decide_on"])))
    assert again.decide_on == cfg.decide_on


@pytest.mark.parametrize("decide,message", [
    ("{metric: score, goal: max, unit: ''}", "decide_on unit must be a short name"),
    ("{metric: score, goal: max, unit: [ms]}", "decide_on unit must be a short name"),
    ('{metric: score, goal: max, unit: "m\\ns"}', "decide_on unit must be a short name"),
    ("{metric: val_loss, unit: nats}", "val_loss is a metric plugdrop knows, shown in nats: "
                                       "leave unit out"),
    ("{metric: score, goal: max, unti: ms}", "decide_on has no setting 'unti' (did you mean "
                                             "'unit'?); it takes metric, goal and unit"),
])
def test_a_bad_unit_is_one_line(decide, message):
    with pytest.raises(ConfigError) as e:
        C.loads(config(fake(), decide=decide + "\nmargin: 0.005"))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_unit_is_named_in_the_table_and_on_the_page(tmp_path, monkeypatch, capsys):
    folder(tmp_path, monkeypatch, config(fake(), seeds="[0, 1, 2]", decide=MS))
    assert ablate() == 0
    table = capsys.readouterr().out
    header = next(x for x in table.splitlines() if x.startswith("variant") and "runs" in x)
    assert "final score (ms)" in header and "vs baseline (ms)" in header
    assert "final score minus the baseline's, in ms" in table
    assert "IQM of final score (ms)" in table
    assert any(x.split() == ["variant", "score", "(ms)", "loss"] for x in table.splitlines())
    assert "last logged value in ms" in table
    page = (tmp_path / "out" / "report.html").read_text()
    assert "decided on score (ms)" in page and "<th>final score (ms)</th>" in page
    assert "<th>vs baseline (ms)</th>" in page
    assert main(["plan", "--from", "out", "--effect", "0.01"]) == 0
    assert "An effect of 0.01 ms is " in capsys.readouterr().out
    # without a unit, none is named
    plain = tmp_path / "plain"
    plain.mkdir()
    folder(plain, monkeypatch, config(fake(), seeds="[0, 1, 2]"))
    assert ablate() == 0
    table = capsys.readouterr().out
    assert "final score  " in table and "(ms)" not in table and "vs baseline  " in table
    assert main(["plan", "--from", "out", "--effect", "0.01"]) == 0
    planned = capsys.readouterr().out
    assert "An effect of 0.01 is " in planned and "  (pooled" not in planned
