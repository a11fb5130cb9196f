"""``plugdrop plan`` (issue 34): the text tables, the ``--json`` document of the issue's schema,
``--from`` an ablation folder, and one line (exit status 2) for every bad argument. Its figures
come from ``simulate.plan``, whose decisions ``test_sequential.py`` holds to the runner's and
whose statistics ``test_simulate.py`` proves."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from _folders import VALUES, adaptive_folder

from plugdrop.ablate.decide import simulate
from plugdrop.cli import main


def test_the_text_gives_each_variant_and_the_fixed_design(capsys):
    assert main(["plan", "--seeds", "3..8", "--effects", "2,0", "--reps", "2000"]) == 0
    out = capsys.readouterr().out
    assert "2000 simulated ablations of 2 variant(s)" in out and "seeds 3..8" in out
    assert "adaptive design: first(0.21)+hsd(-3.25), Holm (graphical, Maurer-Bretz)" in out
    assert "fixed design: 8 seeds, paired t-tests, Holm over the variants" in out
    head = "effect (sd)  better  worse  equivalent  inconclusive  dropped  mean seeds"
    assert out.count(head) == 2 and out.count("false verdicts: ") == 2
    oc = simulate.plan((2.0, 0.0), (3, 8), reps=2000)
    assert f"+2.00        {oc.variants[0].better:.3f}" in out


def test_json_has_the_issue_schema_and_the_planners_figures(capsys):
    args = ["plan", "--seeds", "3..12", "--step", "2", "--effects", "1,0,0", "--reps", "1500",
            "--noise", "t3", "--spending", "obf", "--passing", "bonferroni", "--alpha", "0.1",
            "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == ["variants", "false_verdict_rate", "fixed", "reps"]
    assert doc["reps"] == 1500 and list(doc["fixed"]) == ["variants", "false_verdict_rate"]
    keys = ["effect", "better", "worse", "equivalent", "inconclusive", "mean_seeds"]
    assert all(list(v) == keys for v in doc["variants"] + doc["fixed"]["variants"])
    assert [v["effect"] for v in doc["variants"]] == [1.0, 0.0, 0.0]
    want = simulate.plan((1.0, 0.0, 0.0), (3, 12), 2, 0.1, "t3", 1500, "obf", passing=False)
    assert doc == json.loads(json.dumps(want.as_json()))


def test_twenty_thousand_ablations_take_seconds(capsys):
    """The issue asks for a minute on 2 cores; the planner is vectorised over ablations."""
    start = time.perf_counter()
    assert main(["plan", "--seeds", "3..12", "--effects", "1,0,0,0", "--json"]) == 0
    assert time.perf_counter() - start < 60
    doc = json.loads(capsys.readouterr().out)
    assert doc["reps"] == 20000 and doc["variants"][0]["better"] > 0.5


def test_from_a_folder_the_spread_it_has_seen(tmp_path, capsys):
    out = tmp_path / "abl"
    adaptive_folder(out)
    assert main(["plan", "--from", str(out), "--effect", "1.5", "--reps", "1000",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    base = np.array([VALUES["baseline"][s] for s in range(5)])
    ss, df = 0.0, 0
    for v in ("good", "grid[p=0.1]", "grid[p=0.2]", "noisy"):  # the pairs of finished runs
        d = 100 * (np.array([VALUES[v][s] for s in range(5)]) - base)
        ss, df = ss + ((d - d.mean()) ** 2).sum(), df + len(d) - 1
    assert doc["sd"] == pytest.approx(math.sqrt(ss / df)) and doc["pairs"] == 20
    assert (doc["metric"], doc["unit"], doc["variants"]) == ("val_acc", "pp", 4)
    assert doc["effect_sd"] == pytest.approx(1.5 / doc["sd"])
    assert doc["seeds_fixed"] == simulate.seeds_needed(doc["effect_sd"], 0.05 / 4, 0.8)
    assert doc["seeds_adaptive"] >= doc["seeds_fixed"] - 1
    assert main(["plan", "--from", str(out), "--effect", "1.5", "--reps", "1000"]) == 0
    text = capsys.readouterr().out
    assert f"a fixed design needs about {doc['seeds_fixed']} seeds" in text
    assert f"max: {doc['seeds_adaptive']}}}" in text


@pytest.mark.parametrize("args,message", [
    (["--seeds", "3-12"], "--seeds must be MIN..MAX with 2 <= MIN <= MAX <= 100 (e.g. 3..12)"),
    (["--seeds", "1..5"], "--seeds must be MIN..MAX"),
    (["--step", "0"], "--step must be a whole number >= 1, got '0'"),
    (["--effects", "1,x"], "--effects must be numbers separated by commas"),
    (["--alpha", "0.7"], "--alpha must be a number in [1e-9, 0.5), got '0.7'"),
    (["--alpha", "1e-300"], "--alpha must be a number in [1e-9, 0.5), got '1e-300'"),
    (["--effects", "1e308,0"], "--effects 1e+308: an effect is at most 1000 sd"),
    (["--margin", "1e300"], "--margin must be a number in [0, 1000] (in sd)"),
    (["--noise", "skew"], "--noise must be normal | t3 | skewed, got 'skew' (did you mean "
                          "'skewed'?)"),
    (["--reps", "lots"], "--reps must be a whole number >= 1, got 'lots'"),
    (["--spending", "pocok"], "--spending must be obf, pocock, hsd(GAMMA) or "
                              "first(SHARE)+hsd(GAMMA), got 'pocok' (did you mean 'pocock'?)"),
    (["--spending", "first(2)+hsd(-3)"], "--spending 'first(2)+hsd(-3)': the first look's "
                                         "share must lie in (0, 1)"),
    (["--passing", "hochberg"], "--passing must be holm | bonferroni, got 'hochberg'"),
    (["--margin", "-1"], "--margin must be a number in [0, 1000] (in sd), got '-1'"),
    (["--design", "old"], "--design must be exact | legacy, got 'old'"),
    (["--effect", "0.5"], "--effect needs --from OUT"),
    (["--from", "nowhere"], "--from needs --effect X"),
    (["--from", "nowhere", "--effect", "0.5"], "nowhere: not a folder"),
    (["--from", "HERE", "--effect", "0"], "--effect must be a number other than 0"),
])
def test_bad_arguments_are_one_line(args, message, tmp_path, capsys):
    args = [str(tmp_path) if a == "HERE" else a for a in args]
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("plugdrop plan: ") and err.count("\n") == 1, err
    assert message in err, err


def test_a_folder_without_pairs_is_one_line(tmp_path, capsys):
    out = tmp_path / "abl"
    adaptive_folder(out, {"baseline": {0: 0.9}, "good": {0: 0.95}})
    assert main(["plan", "--from", str(out), "--effect", "1"]) == 2
    err = capsys.readouterr().err
    assert "no variant has 2 seeds finished together with the baseline" in err
    assert err.count("\n") == 1
