"""The ``search:`` block and the config around it: every mistake is one line naming
``file:line:column`` (exit status 2, before any run), the space's dimensions and their names,
and ``plugdrop search`` without Optuna."""

from __future__ import annotations

import sys

import pytest
from _search_helpers import config

from plugdrop.ablate.errors import ConfigError
from plugdrop.ablate.search import loads_search
from plugdrop.cli import main

pytest.importorskip("optuna")

ONE = '    - {{layers: "layer3.*", transform: DropBlock, {}}}\n'

MISTAKES = [
    (config(space=ONE.format("p: {range: [0.3, 0.1]}")), "11:54",
     "search.space.0.p: the range's low end must lie below its high end"),
    (config(space=ONE.format("p: {range: [0, 0.3], log: true}")), "11:54",
     "needs a low end above 0"),
    (config(space=ONE.format("p: {range: [0.1, 0.3], lg: true}")), "11:73",
     "not 'lg' (did you mean 'log'?)"),
    (config(space=ONE.format("p: {grid: [0.1, 0.3]}")), "11:50", "not a grid"),
    (config(space=ONE.format("p: 0.1")), "10:3", "nothing to search"),
    (config(space=ONE.format("p: {choice: []}")), "11:54", "at least one value"),
    (config(space=ONE.format("p: 0.1, block_size: {range: [2.5, 7], int: true}")), "11:71",
     "int: true needs whole ends"),
    (config(space='    - {layers: "layer3.*", transform: DropBlok, p: {range: [0.1, 0.3]}}\n'),
     "11:28", "unknown transform 'DropBlok' (did you mean 'DropBlock'?)"),
    (config(space=ONE.format("p: {choice: [0.1, 1.5]}")), "11:50",
     "p must be a probability in [0, 1), got 1.5"),
    (config(space=ONE.format("p: 0.1, block_sise: {choice: [3, 5]}")), "11:58",
     "no setting 'block_sise' (did you mean 'block_size'?)"),
    (config(extra="  sampler: tpee\n"), "10:3", "'tpee' is no sampler"),
    (config(extra="  sampler: {name: tpe, n_startup: 3}\n"), "10:3",
     "unexpected keyword argument 'n_startup'"),
    # values Optuna takes without a word, found before any run (type, range, a late check)
    (config(extra="  sampler: {name: tpe, n_startup_trials: x}\n"), "10:3",
     "option n_startup_trials takes int, got 'x'"),
    (config(extra="  sampler: {name: tpe, n_startup_trials: -5}\n"), "10:3",
     "option n_startup_trials must be >= 0, got -5"),
    (config(extra="  sampler: {name: tpe, n_ei_candidates: 0}\n"), "10:3",
     "option n_ei_candidates must be >= 1, got 0"),
    (config(extra="  sampler: {name: tpe, multivariate: 3}\n"), "10:3",
     "option multivariate takes bool or null, got 3"),
    (config(extra="  sampler: {name: qmc, qmc_type: foo}\n"), "10:3",
     "The `qmc_type='foo'` is invalid"),
    (config(budget=10), "8:3", "search.budget 10 is too small"),
    (config(extra="  budgett: 3\n"), "10:3", "unknown key 'budgett' (did you mean 'budget'?)"),
    (config(extra="  parallel: 0\n"), "10:3", "search.parallel: a whole number of at least 1"),
    (config().replace("  baseline: []\n", "  baseline: []\n  other: []\n"), "5:1",
     "variants hold the baseline only"),
    (config(seeds="[0]"), "4:1", "at least 2 seeds"),
]


@pytest.mark.parametrize("text,where,what", MISTAKES)
def test_a_mistake_is_one_line_with_its_place(text, where, what):
    with pytest.raises(ConfigError) as e:
        loads_search(text, "search.yaml")
    msg = str(e.value)
    assert msg.startswith(f"search.yaml:{where}: "), msg
    assert what in msg and "\n" not in msg


def test_the_cli_says_a_mistake_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "search.yaml").write_text(config(space=ONE.format("p: {range: [0.3, 0.1]}")))
    assert main(["search", "search.yaml", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("plugdrop search: search.yaml:11:54: ")
    assert not (tmp_path / "out").exists()  # nothing written before the config is right


def test_no_search_block(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(config().split("search:")[0])
    assert main(["search", "s.yaml", "--out", "out"]) == 2
    assert "no search: block" in capsys.readouterr().err


def test_without_optuna_one_line_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "search.yaml").write_text(config())
    monkeypatch.setitem(sys.modules, "optuna", None)
    assert main(["search", "search.yaml", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["plugdrop search: plugdrop search needs Optuna: pip install "
                   "'plugdrop[search]'"]


def test_the_dimensions_are_named_by_their_keys():
    sc = loads_search(config(), "search.yaml")
    assert [d.name for d in sc.spec.dimensions] == ["layers", "p", "block_size"]
    two = config(space='    - {layers: "layer3.*", transform: DropBlock, p: {range: [0.01, 0.3]}}\n'
                       '    - {layers: {choice: [["fc"], ["fc", "layer4"]]}, transform: Dropout,'
                       ' p: {schedule: linear, start: 0, end: {range: [0.1, 0.5], log: true}}}\n')
    sc = loads_search(two, "search.yaml")
    assert [d.name for d in sc.spec.dimensions] == ["0.p", "1.layers", "1.p.end"]
    atts = sc.spec.attachments({"0.p": 0.2, "1.layers": '["fc", "layer4"]', "1.p.end": 0.3})
    assert atts[1]["layers"] == ["fc", "layer4"] and atts[1]["p"]["end"] == 0.3
    assert atts[0]["p"] == 0.2 and atts[0]["transform"] == "DropBlock"


def test_the_seeds_of_the_search_and_of_the_confirmation():
    sc = loads_search(config(seeds="{min: 3, max: 6, first: 10}"), "search.yaml")
    assert sc.search_seeds == tuple(range(10, 16))
    assert sc.confirm_seeds == tuple(range(16, 22))
    fixed = loads_search(config(seeds="[4, 7, 9]", budget=20), "search.yaml")
    assert fixed.search_seeds == (4, 7, 9) and fixed.confirm_seeds == (10, 11, 12)
    assert (fixed.seeds_min, fixed.seeds_max) == (3, 3)


def test_the_example_search_loads():
    """``examples/search.yaml``, the docs' ready search: where, with what and how much."""
    from pathlib import Path

    from plugdrop.ablate.search import load_search

    sc = load_search(Path(__file__).resolve().parents[3] / "examples" / "search.yaml")
    assert [d.name for d in sc.spec.dimensions] == ["0.layers", "0.p", "0.block_size", "1.p"]
    assert sc.spec.budget == 60 and sc.spec.parallel == 2


@pytest.mark.parametrize("verdict,said", [
    ("better", "better than the baseline"), ("equivalent", "equivalent to the baseline"),
    ("inconclusive", "inconclusive against the baseline")])
def test_the_confirmation_is_said_in_words_for_every_verdict(verdict, said):
    """Before: "inconclusive than the baseline" in the summary, the page and best.yaml."""
    from plugdrop.ablate.search.report import summary_line
    from plugdrop.ablate.search.results import best_yaml

    doc = {"candidates": [{}, {}], "runs": 12,
           "best": {"candidate": "c001", "estimate": {"mean": 0.01, "n": 3},
                    "attachments": [{"layers": "layer3.*", "transform": "Dropout", "p": 0.1}]},
           "confirmation": {"complete": True, "n": 3, "verdict": verdict, "seeds": [3, 4, 5],
                            "interval": {"mean": 0.01, "low": -0.001, "high": 0.02}}}
    assert f"confirmed on 3 fresh seeds: {said} (+0.01" in summary_line(doc)
    assert f"confirmed {said} on seeds [3, 4, 5]" in best_yaml(doc).decode()


def test_a_sampler_whose_package_is_missing_is_one_line_before_any_run():
    try:
        import cmaes  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("cmaes is installed here: its sampler needs nothing more")
    with pytest.raises(ConfigError, match=r"search.yaml:10:3: search.sampler: cmaes needs a "
                                          r"package that is not installed: .*cmaes"):
        loads_search(config(extra="  sampler: cmaes\n"), "search.yaml")
