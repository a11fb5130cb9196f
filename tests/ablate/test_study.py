"""The study driver (``plugdrop.ablate.study``): a strategy is one file and the driver does the
rest (a strategy written here, in the test, runs through it with resume); the listeners hear
every event once and in order; the report is not rebuilt per run while runs end; an ablation
and a search refuse each other's folders; the search and the ablation share one set of
checks; the printed table, the page and the plots stay readable with many variants; a
program starts with ``vfork`` through ``setpriv`` and fails to start as without it."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _programs import ablate, config, fake, folder

from plugdrop.ablate import runs
from plugdrop.ablate.config import load
from plugdrop.ablate.programs import process
from plugdrop.ablate.report import markup
from plugdrop.ablate.report.shown import MOST, pick, rest_line
from plugdrop.ablate.results import Run
from plugdrop.ablate.study import (Listener, Outcome, Round, Strategy, StudyInfo, run_study,
                                   strategy_of)
from plugdrop.ablate.study.listeners import ReportWriter
from plugdrop.ablate.train import Dist
from plugdrop.cli import main

GOOD = """\
  baseline: []
  good:
    - {layers: "layer1.*", transform: Dropout, p: 0.1}
"""


class Recorder(Listener):
    """Every event, as ``(event, detail)``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_study_start(self, study: StudyInfo) -> None:
        self.events.append(("study_start", study.command))

    def on_round_start(self, study: StudyInfo, round: Round) -> None:
        self.events.append(("round_start", sorted(rd.id for rd in round.runs)))

    def on_run_end(self, study: StudyInfo, run: runs.RunDir, state: str,
                   detail: str | None) -> None:
        self.events.append(("run_end", (run.id, str(state))))

    def on_decision(self, study: StudyInfo, decisions: Any) -> None:
        self.events.append(("decision", [(d["variant"], d["verdict"]) for d in decisions]))

    def on_round_end(self, study: StudyInfo, round: Round) -> None:
        self.events.append(("round_end", len(round.runs)))

    def on_study_end(self, study: StudyInfo, outcome: Outcome) -> None:
        self.events.append(("study_end", (sorted(outcome.finished), outcome.stopped)))


def _events(rec: Recorder, kind: str) -> list[Any]:
    return [d for k, d in rec.events if k == kind]


@pytest.mark.slow
def test_the_listeners_hear_each_run_once_and_every_round_in_order(tmp_path, monkeypatch):
    cfg_path = folder(tmp_path, monkeypatch, config(fake(), seeds="{min: 3, max: 4}",
                                                   variants=GOOD))
    cfg = load(cfg_path)
    rec = Recorder()
    outcome = run_study(strategy_of(cfg, tmp_path / "out"), resume=False, d=Dist(),
                        listeners=[rec])
    kinds = [k for k, _ in rec.events]
    assert kinds[0] == "study_start" and kinds[-1] == "study_end"
    ended = [rid for rid, _ in _events(rec, "run_end")]
    assert sorted(ended) == sorted(outcome.finished) and len(set(ended)) == len(ended)
    # each round: its start, each of its runs' ends, its end; the decisions between rounds
    starts = [i for i, k in enumerate(kinds) if k == "round_start"]
    assert len(starts) == outcome.rounds >= 1
    for i in starts:
        j = kinds.index("round_end", i)
        assert {d[0] for k, d in rec.events[i:j] if k == "run_end"} == set(
            rec.events[i][1])
    assert kinds[-2] == "decision" and _events(rec, "decision")[-1]  # decided at the end
    # the default listeners were replaced: nothing wrote the report or the decisions
    assert not (tmp_path / "out" / "results.json").exists()
    assert not (tmp_path / "out" / "decisions.jsonl").exists()


class OneSeedAtATime(Strategy):
    """A kind of study written in one file: the variants' seeds one round each, until the
    first seed on which a variant beats the baseline (a test double of a new strategy)."""

    name = "one-seed-at-a-time"

    def __init__(self, cfg: Any, out: Path) -> None:
        super().__init__(cfg, out)
        self.values: dict[tuple[str, int], float | None] = {}
        self.seed = 0

    def open(self, ctx: Any) -> None:
        for run in ctx.ended_before():
            self.ended(run)

    def ended(self, run: Run) -> None:
        self.values[run.variant, run.seed] = run.final("score")

    def next_round(self) -> Round | None:
        seeds = self.cfg.seed_list
        for s in seeds:
            pairs = [(v, s) for v in self.cfg.variant_names]
            if any(p not in self.values for p in pairs):
                todo = tuple(runs.RunDir(self.out, v, s) for v, s in pairs
                             if (v, s) not in self.values)
                return Round(todo, self.cfg, f"seed {s}")
            if self.values["good", s] > self.values["baseline", s]:  # type: ignore[operator]
                return None
        return None


@pytest.mark.slow
def test_a_new_kind_of_study_is_one_strategy_and_resumes(tmp_path, monkeypatch):
    cfg_path = folder(tmp_path, monkeypatch, config(fake(), seeds="[0, 1, 2]", variants=GOOD))
    cfg = load(cfg_path)
    out = tmp_path / "out"
    first = run_study(OneSeedAtATime(cfg, out), resume=False, d=Dist())
    # fake.py scores a Dropout's p on top: good beats the baseline on seed 0, one round
    assert first.rounds == 1 and sorted(first.finished) == ["baseline__s0", "good__s0"]
    manifest = json.loads((out / "ablation.json").read_text())
    assert manifest["strategy"] == {"name": "one-seed-at-a-time"}
    again = run_study(OneSeedAtATime(cfg, out), resume=True, d=Dist())
    assert again.rounds == 0 and again.finished == []  # what ended before is read, not redone
    assert (out / "report.html").exists()  # the default listeners wrote the report


def test_the_report_is_not_rebuilt_for_every_run(tmp_path, monkeypatch):
    """While runs end the report waits ``every`` seconds between rebuilds, and longer when a
    rebuild is slow (``share``); the end always rebuilds."""
    from plugdrop.ablate.study.listeners import report as module

    calls: list[bool] = []

    def write(folder: Path, plots: bool, cfg: Any) -> Any:
        calls.append(plots)
        return None

    monkeypatch.setattr(module, "write_report", write)
    now = [100.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    (tmp_path / "ablation.json").write_text("{}")
    info = StudyInfo("ablate", tmp_path, tmp_path, load(_cfg(tmp_path)), Dist(),
                     strategy=None)
    w = ReportWriter(every=5.0, share=0.05, plots_every=60.0)
    w.on_study_start(info)
    rd = runs.RunDir(tmp_path, "baseline", 0)
    for _ in range(50):  # 50 runs in 4.9 s
        now[0] += 0.098
        w.on_run_end(info, rd, runs.FINISHED, None)
    assert calls == []
    now[0] += 0.2
    w.on_run_end(info, rd, runs.FINISHED, None)
    assert calls == [False]  # plots wait a minute
    outcome = Outcome()
    w.on_study_end(info, outcome)
    assert calls == [False, True]


def _cfg(tmp_path: Path) -> Path:
    p = tmp_path / "cfg.yaml"
    p.write_text(config(fake(), variants=GOOD, plots=True))
    return p


@pytest.mark.slow
def test_an_ablation_and_a_search_refuse_each_others_folders(tmp_path, monkeypatch, capsys):
    pytest.importorskip("optuna", reason="plugdrop search needs Optuna")
    folder(tmp_path, monkeypatch, config(fake(), variants=GOOD))
    search = tmp_path / "search.yaml"
    search.write_text(config(fake(), seeds="{min: 2, max: 2}", variants="  baseline: []\n")
                      + "search:\n  budget: 12\n  space:\n    - {layers: \"layer1.*\", "
                        "transform: Dropout, p: {range: [0.01, 0.2]}}\n")
    assert main(["search", str(search), "--out", "found"]) in (0, 1)
    capsys.readouterr()
    assert main(["ablate", "cfg.yaml", "--out", "found", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "holds a plugdrop search" in err and err.count("\n") == 1, err
    assert ablate() == 0
    capsys.readouterr()
    assert main(["search", str(search), "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert "holds a plugdrop ablate's runs" in err and err.count("\n") == 1, err


def test_the_search_makes_the_ablations_checks(tmp_path, monkeypatch, capsys):
    pytest.importorskip("optuna", reason="plugdrop search needs Optuna")
    folder(tmp_path, monkeypatch, config(fake(), seeds="{min: 2, max: 2}",
                                         variants="  baseline: []\n")
           + "search:\n  budget: 12\n  space:\n    - {layers: \"layer1.*\", transform: Dropout, "
             "p: {range: [0.01, 0.2]}}\n")
    assert main(["search", "cfg.yaml", "--out", "s", "--launcher", "processes",
                 "--nproc-per-run", "2"]) == 2
    err = capsys.readouterr().err
    assert "--nproc-per-run 2: with program:, the program starts its own processes" in err
    assert not (tmp_path / "s").exists()


def test_a_lock_names_the_command_that_holds_it(tmp_path):
    held = runs.Lock(tmp_path, command="search")
    held.acquire()
    try:
        with pytest.raises(Exception, match=r"another plugdrop search is writing into this "
                                            r"folder \(pid \d+\)"):
            runs.Lock(tmp_path).acquire()
    finally:
        held.release()


# -------------------------------------------------------------------- output that scales

def _summaries(n: int, decided: int) -> list[Any]:
    """``n`` variant summaries: the baseline, then variants whose difference grows with
    their index; the last ``decided`` of them better."""
    from types import SimpleNamespace

    rule = SimpleNamespace(higher_is_better=True)
    out = [SimpleNamespace(variant="baseline", is_baseline=True, verdict="baseline",
                           versus=lambda: None, rule=rule)]
    for i in range(1, n):
        verdict = "better" if i > n - 1 - decided else "no clear difference"
        out.append(SimpleNamespace(variant=f"v{i:03d}", is_baseline=False, verdict=verdict,
                                   versus=lambda i=i: (float(i % 37) - 18.0, None, None),
                                   rule=rule))
    return out


def test_a_table_of_many_variants_shows_the_decided_the_best_and_the_worst():
    summary = _summaries(200, decided=5)
    shown, rest = pick(summary)  # type: ignore[arg-type]
    names = [s.variant for s in shown]
    assert len(shown) == MOST and len(rest) == 200 - MOST
    assert names[0] == "baseline" and all(s.verdict == "better" for s in summary[-5:]
                                          if s in shown)
    assert {s.variant for s in summary[-5:]} <= set(names)
    best = max(summary[1:], key=lambda s: s.versus()[0])
    worst = min(summary[1:], key=lambda s: s.versus()[0])
    assert best.variant in names and worst.variant in names
    assert names == [s.variant for s in summary if s.variant in names]  # config order
    line = rest_line(rest)  # type: ignore[arg-type]
    assert line is not None and f"{200 - MOST} more variants (no clear difference: " \
        f"{200 - MOST})" in line
    assert pick(summary[:MOST]) == (summary[:MOST], [])  # type: ignore[arg-type]
    many = _summaries(100, decided=60)  # every decided variant is shown, past MOST
    shown, _ = pick(many)  # type: ignore[arg-type]
    assert len(shown) == 61


def test_a_long_table_on_the_page_folds_its_rows():
    rows = [f"<tr><td>{i}</td></tr>" for i in range(70)]
    page = markup.table(["n"], rows, what="variants")
    assert page.count("<tr><td>") == 70 and "<details><summary>20 more variants</summary>" \
        in page
    assert "<details>" not in markup.table(["n"], rows[:10])


@pytest.mark.slow
def test_an_ablation_of_many_variants_prints_a_table_one_variant_per_row(
        tmp_path, monkeypatch, capsys):
    variants = "  baseline: []\n" + "".join(
        f"  v{i:02d}: [{{layers: \"layer1.*\", transform: Dropout, p: {0.001 * i:.3f}}}]\n"
        for i in range(1, 45))
    folder(tmp_path, monkeypatch, config(fake("--epochs", "1"), variants=variants))
    assert ablate() == 0
    table = capsys.readouterr().out
    lines = table.splitlines()
    assert max(len(x) for x in lines) < 200, max(lines, key=len)
    assert "... and 15 more variants" in table
    page = (tmp_path / "out" / "report.html").read_text()
    assert "more variants</summary>" in page and page.count("<td>v") >= 44


# ------------------------------------------------------------------- starting a program

def _start(tmp_path: Path, argv: list[str]) -> subprocess.Popen:
    out = os.open(tmp_path / "out.log", os.O_WRONLY | os.O_CREAT)
    try:
        return process.start(argv, str(tmp_path), dict(os.environ), out, out)
    finally:
        os.close(out)


@pytest.mark.parametrize("setpriv", ["1", "0"])
def test_a_program_fails_to_start_as_it_would_without_setpriv(tmp_path, monkeypatch, setpriv):
    monkeypatch.setenv("PLUGDROP_SETPRIV", setpriv)
    process._setpriv.cache_clear()
    try:
        with pytest.raises(FileNotFoundError):
            _start(tmp_path, ["./missing.sh"])
        with pytest.raises(FileNotFoundError):
            _start(tmp_path, ["no-such-program-anywhere"])
        script = tmp_path / "plain.sh"
        script.write_text("echo no shebang\n")
        with pytest.raises(PermissionError):
            _start(tmp_path, ["./plain.sh"])
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        with pytest.raises(OSError) as caught:
            _start(tmp_path, ["./plain.sh"])
        assert caught.value.errno == errno.ENOEXEC
        p = _start(tmp_path, [sys.executable, "-c", "import sys; print(sys.argv[0])"])
        assert p.wait() == 0 and (tmp_path / "out.log").read_text().strip() == "-c"
    finally:
        process._setpriv.cache_clear()


@pytest.mark.parametrize("setpriv", ["1", "0"])
def test_a_program_dies_with_the_driver_either_way(tmp_path, monkeypatch, setpriv):
    """Through ``setpriv`` (started with ``vfork``) or without it (``preexec_fn``), the program
    is sent SIGKILL when the process that started it dies (``PR_SET_PDEATHSIG``)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the death signal is Linux's")
    monkeypatch.setenv("PLUGDROP_SETPRIV", setpriv)
    process._setpriv.cache_clear()
    try:
        if setpriv == "1" and process._setpriv() is None:
            pytest.skip("no setpriv with --pdeathsig here (util-linux >= 2.33)")
        code = ("import ctypes; x = ctypes.c_int(); "
                "ctypes.CDLL(None).prctl(2, ctypes.byref(x)); print(x.value)")  # GET_PDEATHSIG
        p = _start(tmp_path, [sys.executable, "-c", code])
        assert p.wait() == 0
        assert (tmp_path / "out.log").read_text().strip() == "9"  # SIGKILL
    finally:
        process._setpriv.cache_clear()


def test_an_ended_run_is_read_again_only_when_its_files_change(tmp_path):
    """The driver and the report read an ended run once and remember it; a file of it that
    changes afterwards (a program's child that logs after the run ended) is read again."""
    from plugdrop.ablate.results import load_run

    rd = runs.RunDir(tmp_path, "good", 3)
    rd.path.mkdir(parents=True)
    (rd.path / "run.json").write_text(json.dumps({"variant": "good", "seed": 3}))
    (rd.path / "metrics.jsonl").write_text('{"step": 1, "score": 0.5}\n')
    (rd.path / "done.json").write_text("{}")
    first = load_run(tmp_path, "good", 3, None, True, [])
    assert first.status == runs.FINISHED and first.final("score") == 0.5
    again = load_run(tmp_path, "good", 3, None, True, [])
    assert again is not first and again.final("score") == 0.5
    with open(rd.path / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "score": 0.75}\n')
    assert load_run(tmp_path, "good", 3, None, True, []).final("score") == 0.75
    (rd.path / "done.json").unlink()
    assert load_run(tmp_path, "good", 3, None, True, []).status == runs.INCOMPLETE


# ----------------------------------------------------------- configs in other encodings

@pytest.mark.parametrize("make,says", [
    (lambda t: b"# caf\xe9\n" + t.encode(), "byte 0xe9 at offset 5 is not UTF-8 (a file saved "
                                            "as Latin-1 or another encoding?)"),
    (lambda t: t.encode("utf-16"), "saved as UTF-16; save it as UTF-8"),
    (lambda t: b"\x7fELF\x02\x01\x00\x00" + t.encode(), "holds a NUL byte at offset 6"),
])
def test_a_config_that_is_not_utf8_is_one_line(tmp_path, monkeypatch, capsys, make, says):
    folder(tmp_path, monkeypatch, "")
    (tmp_path / "cfg.yaml").write_bytes(make(config(fake(), variants=GOOD)))
    for command in (["ablate", "cfg.yaml"], ["search", "cfg.yaml", "--out", "s"]):
        if command[0] == "search":
            pytest.importorskip("optuna", reason="plugdrop search needs Optuna")
        assert main(command) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1 and "cfg.yaml" in err, err


def test_a_config_with_a_byte_order_mark_reads_as_without(tmp_path, monkeypatch):
    folder(tmp_path, monkeypatch, "")
    text = config(fake(), variants=GOOD)
    (tmp_path / "cfg.yaml").write_bytes(b"\xef\xbb\xbf" + text.encode())
    (tmp_path / "plain.yaml").write_text(text)
    assert load(tmp_path / "cfg.yaml").hash() == load(tmp_path / "plain.yaml").hash()


def test_a_search_block_given_to_ablate_names_plugdrop_search(tmp_path, monkeypatch, capsys):
    folder(tmp_path, monkeypatch, config(fake(), variants=GOOD)
           + "search:\n  budget: 12\n  space: []\n")
    assert ablate() == 2
    err = capsys.readouterr().err
    assert "search: is the block of plugdrop search: run plugdrop search CONFIG" in err
    assert err.count("\n") == 1


def test_a_script_without_its_interpreter_is_one_line_before_any_run(tmp_path, monkeypatch,
                                                                    capsys):
    folder(tmp_path, monkeypatch, config("./train.sh", variants=GOOD))
    script = tmp_path / "train.sh"
    script.write_text("echo '{\"step\": 1, \"score\": 0.5}' >> \"$PLUGDROP_METRICS\"\n")
    script.chmod(0o755)
    assert ablate() == 2
    err = capsys.readouterr().err
    assert ("program: ./train.sh is neither a program nor a script that names its interpreter"
            in err and "#!/usr/bin/env bash" in err and err.count("\n") == 1), err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_number_beyond_a_floats_range_is_an_infinity_not_a_traceback(tmp_path, monkeypatch,
                                                                        capsys):
    """A program that logs an integer too large for a float: in the progress line, as the
    decision metric (the run diverged: one line) and as another metric (the report is
    written); ``plugdrop report`` rebuilds it."""
    folder(tmp_path, monkeypatch, config("./huge.sh", variants=GOOD))
    script = tmp_path / "huge.sh"
    big = "9" * 400
    script.write_text("#!/bin/sh\nif [ \"$PLUGDROP_VARIANT\" = good ]; then\n"
                      f"  echo '{{\"step\": 1, \"score\": {big}}}' >> \"$PLUGDROP_METRICS\"\n"
                      "else\n"
                      f"  echo '{{\"step\": 1, \"score\": 0.5, \"grad\": {big}}}' >> "
                      "\"$PLUGDROP_METRICS\"\nfi\n")
    script.chmod(0o755)
    assert ablate() == 1
    captured = capsys.readouterr()
    assert "score 1.000e+400" in captured.out
    assert "Traceback" not in captured.err
    fail = json.loads((tmp_path / "out" / "runs" / "good__s0" / "failed.json").read_text())
    assert "the run diverged: the last score it logged is inf" in fail["error"]
    assert (tmp_path / "out" / "report.html").exists()
    assert main(["report", "out"]) == 0


@pytest.mark.parametrize("margin", [".inf", "-.inf", ".nan", "-0.5", "wide"])
def test_a_margin_that_is_not_a_finite_number_is_one_line(tmp_path, monkeypatch, margin):
    from plugdrop.ablate.errors import ConfigError

    folder(tmp_path, monkeypatch, config(fake(), variants=GOOD,
                                         decide=f"{{metric: score, goal: max}}\nmargin: {margin}"))
    with pytest.raises(ConfigError, match=r"cfg.yaml:\d+:\d+: margin must be auto or a finite "
                                          r"number >= 0 \(an infinite margin calls every "
                                          r"variant equivalent\)"):
        load(tmp_path / "cfg.yaml")


def test_a_metric_logged_as_text_is_said_so(tmp_path, monkeypatch, capsys):
    folder(tmp_path, monkeypatch, config("./text.sh", variants="  baseline: []\n"))
    script = tmp_path / "text.sh"
    script.write_text("#!/bin/sh\necho '{\"step\": 1, \"score\": \"0.73\"}' >> "
                      "\"$PLUGDROP_METRICS\"\n")
    script.chmod(0o755)
    assert ablate() == 1
    fail = json.loads((tmp_path / "out" / "runs" / "baseline__s0" / "failed.json").read_text())
    assert fail["error"] == ('the program logged score as "0.73", not a number; log it as one '
                             '(score: 0.73, not "0.73")')


def test_a_decision_metric_logged_before_the_last_record_is_said_so(tmp_path, monkeypatch,
                                                                     capsys):
    folder(tmp_path, monkeypatch, config("./early.sh", variants="  baseline: []\n"))
    script = tmp_path / "early.sh"
    script.write_text("#!/bin/sh\nm=\"$PLUGDROP_METRICS\"\n"
                      "echo '{\"epoch\": 1, \"score\": 0.7, \"loss\": 0.3}' >> \"$m\"\n"
                      "echo '{\"epoch\": 2, \"loss\": 0.2}' >> \"$m\"\n"
                      "echo '{\"epoch\": 3, \"loss\": 0.1}' >> \"$m\"\n")
    script.chmod(0o755)
    assert ablate() == 0
    table = capsys.readouterr().out
    assert ("its last score was logged at epoch 1, its last record is at epoch 3: its final "
            "value is that earlier one") in table


def test_decide_on_given_as_a_list_is_one_line_with_the_mapping(tmp_path, monkeypatch):
    from plugdrop.ablate.errors import ConfigError

    folder(tmp_path, monkeypatch, config(fake(), variants=GOOD, decide="[score, max]"))
    with pytest.raises(ConfigError, match=r"cfg.yaml:2:\d+: decide_on must be .* got "
                                          r"\['score', 'max'\] \(written \{metric: score, "
                                          r"goal: max\}, not as a list\?\)"):
        load(tmp_path / "cfg.yaml")


def test_one_folded_row_is_one_variant():
    assert "<summary>1 more variant</summary>" in markup.table(
        ["n"], ["<tr><td>1</td></tr>"] * 51, what="variants")
    assert rest_line(_summaries(2, decided=0)[1:]).startswith(  # type: ignore[arg-type]
        "... and 1 more variant (no clear difference: 1)")
