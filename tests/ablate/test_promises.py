"""The promises under bad input for the surfaces of programs (issue: the promises): what a
program's processes write after its run finished, metrics files of many lines, and the
generated bad inputs."""

from __future__ import annotations

import json
import math
import re

from _programs import ablate, fake, folder, run_dir
from _programs import config as make_config

from plugdrop.ablate.runs.records import parse_records, read_records
from plugdrop.cli import main


def test_a_finished_runs_value_is_sealed(tmp_path, monkeypatch, capsys):
    folder(tmp_path, monkeypatch, make_config(fake()))
    assert ablate() == 0
    out = tmp_path / "out"
    before = json.loads((out / "results.json").read_text())["summary"]
    metrics = run_dir(out, "good__s0") / "metrics.jsonl"
    with open(metrics, "a") as f:  # a child the program left behind logs on
        f.write(json.dumps({"epoch": 4, "score": 9.0}) + "\n")
    capsys.readouterr()
    assert main(["report", "out", "--no-plots"]) == 0
    shown = capsys.readouterr().out
    after = json.loads((out / "results.json").read_text())["summary"]
    assert [s.get("decided") for s in after] == [s.get("decided") for s in before]
    assert "bytes were appended after its run was recorded finished" in shown
    assert "9.0" not in json.dumps(after)


def test_many_lines_parse_at_once_as_they_do_one_by_one(tmp_path):
    lines = [json.dumps({"step": i, "loss": 1 / (i + 1)}) for i in range(2000)]
    lines[7] = json.dumps({"step": 3, "acc": 0.5})  # a position again: merged
    at_once, _ = parse_records(lines)
    broken = lines[:100] + ["{not json"] + lines[100:]
    one_by_one, warnings = parse_records(broken)
    assert at_once == one_by_one and len(warnings) == 1 and "line 101" in warnings[0]
    assert next(r for r in at_once if r["step"] == 3) == {"step": 3, "loss": 0.25, "acc": 0.5}
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(lines) + "\n")
    size = path.stat().st_size
    path.write_text("\n".join(lines) + "\n" + json.dumps({"step": 5000, "loss": 0}) + "\n")
    said: list[str] = []
    assert read_records(path, said, sealed=size) == at_once and len(said) == 1


def test_seeds_beyond_what_torch_takes_or_too_many_are_one_line():
    import pytest

    from plugdrop.ablate import config
    from plugdrop.ablate.errors import ConfigError

    base = "program: [x]\ndecide_on: {metric: a, goal: max}\nmargin: 0.1\nvariants: {b: []}\n"
    cases = {
        "seeds: [18446744073709551616]\n": "each in [-2**63, 2**63)",
        "seeds: {min: 3, max: 5, first: 9223372036854775805}\n": "go beyond 2**63",
        "seeds: {min: 3, max: 200000}\n": "at most 100,000 seeds per variant",
        f"seeds: [{', '.join(map(str, range(100_001)))}]\n": "100,001 seeds; at most 100,000",
    }
    for text, message in cases.items():
        with pytest.raises(ConfigError, match=re.escape(message)):
            config.loads(text + base, "c.yaml")


def test_a_config_file_too_large_to_be_one_is_refused_at_once(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    big = "seeds: [" + ", ".join(map(str, range(700_000))) + "]\nvariants: {b: []}\n"
    (tmp_path / "big.yaml").write_text(big)
    assert main(["ablate", "big.yaml", "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert "bytes is no YAML file of the config (at most 4 MB)" in err and err.count("\n") == 1


def test_run_log_without_its_metrics_folder_is_one_line(tmp_path, monkeypatch):
    import pytest

    import plugdrop as pd

    env = {"PLUGDROP_SEED": "0", "PLUGDROP_VARIANT": "b", "PLUGDROP_SPEC": str(tmp_path / "s"),
           "PLUGDROP_RUN_DIR": str(tmp_path), "PLUGDROP_RESUME": "0",
           "PLUGDROP_METRICS": str(tmp_path / "gone" / "metrics.jsonl")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    run = pd.current_run()
    assert run is not None
    with pytest.raises(pd.PlugdropError, match="cannot append to PLUGDROP_METRICS=.*gone.*No "
                                              "such file or directory.*unset PLUGDROP_SEED"):
        run.log(epoch=1, acc=0.5)


def test_a_callback_added_to_what_is_not_a_trainer_is_one_line():
    import pytest

    pytest.importorskip("transformers")
    import plugdrop as pd
    from plugdrop.integrations.transformers import Regularize

    cb = Regularize([{"layers": "x", "transform": "Dropout", "p": 0.1}])
    with pytest.raises(pd.SettingError, match="add_to\\(\\) takes a Hugging Face Trainer .*got "
                                              "dict"):
        cb.add_to({})


def test_seeds_given_as_one_number_is_one_line_but_a_stored_config_keeps_its_meaning():
    import pytest

    from plugdrop.ablate import config
    from plugdrop.ablate.config.stored import FORMAT
    from plugdrop.ablate.errors import ConfigError

    text = ("program: [x]\ndecide_on: {metric: a, goal: max}\nmargin: 0.1\nseeds: 3\n"
            "variants: {b: []}\n")
    with pytest.raises(ConfigError, match=re.escape("c.yaml:4:1: seeds: 3 is one seed, the "
                                                    "seed 3, not 3 seeds")):
        config.loads(text, "c.yaml")
    # a folder an earlier version wrote with seeds: 3 reads back as it trained: the seed 3
    cfg = config.restore({"format": FORMAT, "source": "c.yaml", "text": text, "overrides": [],
                          "cwd": None}, "stored")
    assert cfg.seed_list == (3,)
    with pytest.raises(ConfigError):  # and only there
        config.loads(text, "c.yaml")


def test_a_config_nested_too_deep_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep.yaml").write_text("program: " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp_path / "blocks.yaml").write_text("variants:\n" + "".join(
        "  " * i + f"k{i}:\n" for i in range(1, 300)))
    for name, where in (("deep.yaml", "deep.yaml:1:110"), ("blocks.yaml", "blocks.yaml:102:1")):
        assert main(["ablate", name, "--out", "out"]) == 2
        err = capsys.readouterr().err
        assert f"{where}: nested more than 100 levels deep" in err and err.count("\n") == 1


def test_a_program_that_logs_each_step_keeps_the_reports_files_small(tmp_path, monkeypatch,
                                                                      capsys):
    """A run of 5,000 records: results.json and results.csv keep 2,000 of them, evenly spaced
    with the last, and say how many there were; the decision reads the last value."""
    script = ("import json, os\nwith open(os.environ['PLUGDROP_METRICS'], 'a') as f:\n"
              "    for i in range(5000):\n"
              "        f.write(json.dumps({'step': i, 'score': 0.5 + i * 1e-5}) + '\\n')\n")
    folder(tmp_path, monkeypatch, make_config(json.dumps(["python", "many.py"]),
                                              variants="  baseline: []\n"))
    (tmp_path / "many.py").write_text(script)
    assert ablate() == 0
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    (run,) = doc["runs"]
    assert run["records"] == 5000 and len(run["metrics"]) == 2000
    assert run["metrics"][0]["step"] == 0 and run["metrics"][-1]["step"] == 4999
    rows = (tmp_path / "out" / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 2000
    assert doc["runs"][0]["done"]["value"] == 0.5 + 4999 * 1e-5


# ---------------------------------------------------------------- the newest surfaces (issue 58)


def _within(seconds: float, fn, *args):
    """``fn(*args)`` in a thread, which must end within ``seconds`` (a read that blocks, or a
    pattern that never ends, fails the test instead of hanging the suite)."""
    import threading

    got: list = []

    def call() -> None:
        try:
            got.append((fn(*args), None))
        except Exception as e:  # raised here, in the test's thread
            got.append((None, e))

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn.__name__} did not end within {seconds}s"
    value, error = got[0]
    if error is not None:
        raise error
    return value


def test_a_metrics_source_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path):
    import os

    from plugdrop.ablate.config import MetricsFrom
    from plugdrop.ablate.programs.sources import Source

    os.mkfifo(tmp_path / "pipe.csv")
    (tmp_path / "folder.json").mkdir()
    for kind, name, said in (("csv", "pipe.csv", "is a named pipe (FIFO), not a regular file"),
                             ("json", "folder.json", "is a folder, not a regular file")):
        src = Source(MetricsFrom(kind, "{run_dir}/" + name), tmp_path / name, tmp_path)
        records, problem = _within(5, src.read)
        assert records == [] and said in problem and str(tmp_path / name) in problem
        assert "{run_dir}" not in problem


def test_a_csv_with_a_very_large_cell_is_read():
    from plugdrop.ablate.programs.sources import csv_records

    text = "epoch,note,score\n1," + "x" * 300_000 + ",0.5\n2,,0.75\n"
    assert [(r["epoch"], r["score"]) for r in csv_records(text)] == [(1, 0.5), (2, 0.75)]


def test_a_printed_lines_pattern_that_backtracks_is_stopped_in_one_line(tmp_path):
    import time

    from plugdrop.ablate.config import MetricsFrom
    from plugdrop.ablate.programs import sources

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "attempt-1.stdout").write_text("score 0.5 z\n")
    (logs / "attempt-2.stdout").write_text("ok\n" + "a" * 40 + "\n")
    # the conditional group makes every split of the a's a way to try (regex and re alike)
    src = sources.Source(MetricsFrom("stdout", r"(?P<score>[0-9.]+)? ?(?:(a)|a)+(?(2)z|y)"),
                         None, logs)
    start = time.monotonic()
    records, problem = _within(10, src.read)
    assert time.monotonic() - start < sources.LINE_S + 3
    assert records == [] and "ran longer than 0.5s on line 2 of" in problem
    assert str(logs / "attempt-2.stdout") in problem and "backtracks" in problem


def test_a_source_problem_reaches_the_runs_line_with_its_cause_and_path(tmp_path):
    import pytest

    from plugdrop.ablate import config, runs
    from plugdrop.ablate.programs.external import ExternalProgram
    from plugdrop.ablate.programs.protocol import RunFailed

    cfg = config.loads("program: [x]\ndecide_on: {metric: score, goal: max}\nmargin: 0.1\n"
                       "metrics_from: {csv: '{run_dir}/summary.csv'}\nvariants: {b: []}\n",
                       str(tmp_path / "c.yaml"))
    program = ExternalProgram(cfg)
    rd = runs.RunDir(tmp_path / "out", "b", 0)
    (rd.path / "work").mkdir(parents=True)
    import os

    os.mkfifo(rd.path / "work" / "summary.csv")
    said = _within(5, program._collect, rd)
    assert said is not None and str(rd.path / "work" / "summary.csv") in said
    with pytest.raises(RunFailed) as e:
        program.judge.judge(rd, 1, None, rd.path / "o", rd.path / "e", said)
    line = str(e.value)
    assert "named pipe (FIFO)" in line and "{run_dir}" not in line and "\n" not in line


def test_receipts_are_checked_like_metric_lines():
    from plugdrop.ablate.programs.judge import receipt_problem
    from plugdrop.ablate.results import receipts

    def receipt(calls, **extra):
        return {"variant": "v", "run": "v__s0", **extra,
                "attachments": [{"label": "Dropout@x", "layers": ["x"], "calls": calls}]}

    assert receipts.check(receipt(3), "v__s0", "v") is None
    assert receipts.check(receipt(3.0), "v__s0", "v") is None
    for calls, said in ((math.nan, "NaN"), (math.inf, "Infinity"), (-2, "-2"), ("3", '"3"'),
                        (True, "true"), (2.5, "2.5")):
        assert f"says its hooks ran {said} times" in receipts.check(receipt(calls), "v__s0", "v")
        line = receipt_problem(receipt(calls), "v", "v__s0")
        assert line.startswith("its receipt (attached.json) is not to be trusted")
    assert "of run \"w__s1\", not of 'v__s0'" in receipts.check(receipt(3, run="w__s1"),
                                                                  "v__s0", "v")
    assert "of variant \"w\"" in receipts.check(receipt(3, variant="w"), "v__s0", "v")
    assert "not a JSON object" in receipts.check([1], "v__s0", "v")
    # a receipt a program in another language writes: no variant, no run
    assert receipts.check({"attachments": [{"label": "x", "layers": [], "calls": 1}]},
                          "v__s0", "v") is None
    assert "hooks never ran" in receipt_problem(receipt(0), "v", "v__s0")


def test_a_receipt_of_nan_calls_fails_its_run_in_one_line_and_the_report_is_written(
        tmp_path, monkeypatch, capsys):
    script = ("import json, os\nwith open(os.environ['PLUGDROP_METRICS'], 'a') as f:\n"
              "    f.write(json.dumps({'step': 1, 'score': 0.5}) + '\\n')\n"
              "if os.environ['PLUGDROP_VARIANT'] != 'baseline':\n"
              "    open(os.environ['PLUGDROP_RECEIPT'], 'w').write('{\"attachments\": [{\"label\":"
              " \"x\", \"layers\": [\"a\"], \"calls\": NaN}]}')\n")
    folder(tmp_path, monkeypatch, make_config(json.dumps(["python", "nan.py"]),
                                              variants="  baseline: []\n  good: [{layers: a, "
                                                       "transform: Dropout, p: 0.1}]\n"))
    (tmp_path / "nan.py").write_text(script)
    assert ablate() == 2  # the first run of a variant without its receipt stops the study
    err = capsys.readouterr().err
    assert "says its hooks ran NaN times" in err and "Traceback" not in err
    assert "its program's folder kept as work.before-N" in err  # it trains again, as it will
    assert main(["report", "out", "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "says its hooks ran NaN times" in out and (tmp_path / "out" / "report.html").exists()


def test_a_receipt_is_written_at_the_first_optimizer_steps(tmp_path, monkeypatch):
    """A program killed after a few steps leaves what they did: the receipt is rewritten
    after steps 1, 2, 4, ... (not only at exit and every 5 s)."""
    import torch

    import plugdrop as pd
    from plugdrop import _attach, _receipt

    for name, value in (("_TRACKED", []), ("_BEFORE", {}), ("_WRITTEN", [-math.inf]),
                        ("_STEPS", [0]), ("_STATE", {"exit": True, "read": True})):
        monkeypatch.setattr(_receipt, name, value)
    monkeypatch.setenv("PLUGDROP_RECEIPT", str(tmp_path / "attached.json"))
    monkeypatch.setenv("PLUGDROP_VARIANT", "v")
    monkeypatch.setenv("PLUGDROP_RUN_ID", "v__s0")
    hook = _attach.after_optimizer_steps(_receipt._stepped)  # what track() registers once
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.0))
    group = pd.attach_all(model, [{"layers": "0", "transform": "Dropout", "p": 0.1}])
    _receipt.track(group, "test")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    try:
        for _ in range(3):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            seen.append(json.loads((tmp_path / "attached.json").read_text()))
    finally:
        hook.remove()
        group.remove()
    assert [r["attachments"][0]["calls"] for r in seen] == [1, 2, 2]  # steps 1, 2; 3 waits
    assert seen[0]["run"] == "v__s0" and seen[0]["variant"] == "v"


def test_a_report_that_would_report_nothing_it_says_is_refused_and_writes_nothing(
        tmp_path, monkeypatch, capsys):
    folder(tmp_path, monkeypatch, make_config(fake()))
    assert ablate() == 0
    out = tmp_path / "out"
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    cases = [(["--decide-on", "scor", "--goal", "max"],
              "--decide-on scor: no run of out logged it; they logged loss, score (did you "
              "mean 'score'?); nothing was written"),
             (["--decide-on", "scor"], "(did you mean 'score'?); nothing was written"),
             (["--decide-on", "loss"], "--decide-on loss: a metric of the program's own needs "
                                       "its goal: add --goal max"),
             (["--set", "metrics_from={csv: x.csv}"], "--set metrics_from: a report reads the "
                                                      "metrics the runs of out hold"),
             (["--set", "spending=pocock"], "--set spending: out is a fixed design")]
    for args, said in cases:
        assert main(["report", "out", "--no-plots", *args]) == 2, args
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, (args, err)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.is_file()} == before
    # one it takes: judged on loss, lower better; the note says when and after how many runs
    assert main(["report", "out", "--no-plots", "--decide-on", "loss", "--goal", "min"]) == 0
    shown = capsys.readouterr().out
    assert re.search(r"the judging changed after 3 runs had ended \(decide_on .* -> .*, "
                     r"\d{4}-\d\d-\d\dT[\d:+]+, by this report", shown)
    changes = json.loads((out / "results.json").read_text())["judging_changes"]
    assert changes[-1]["runs_ended"] == 3


def test_a_rejudged_run_keeps_its_wall_time_and_the_header_counts_what_trains(
        tmp_path, monkeypatch, capsys):
    folder(tmp_path, monkeypatch, make_config(fake(), decide="{metric: scor, goal: max}\n"
                                              "margin: 0.005"))
    assert ablate() == 2  # the first run completes without scor: the study stops
    err = capsys.readouterr().err
    assert "(did you mean 'score'?)" in err
    first = json.loads((run_dir(tmp_path / "out", "baseline__s0") / "failed.json").read_text())
    # judged again by a report: its wall time shown, not "-"
    assert main(["report", "out", "--no-plots", "--decide-on", "score", "--goal", "max"]) == 0
    runs = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    assert runs[0]["done"]["wall_time"] == first["seconds"] is not None
    (tmp_path / "cfg.yaml").write_text(make_config(fake()))
    assert ablate("--resume") == 0
    out = capsys.readouterr().out
    assert "2 runs to train, 1 to judge again (trained before)" in out
    done = json.loads((run_dir(tmp_path / "out", "baseline__s0") / "done.json").read_text())
    assert done["wall_time"] == first["seconds"] is not None


def test_a_receipt_false_config_does_not_say_no_run_shows_it_attached(tmp_path, monkeypatch,
                                                                       capsys):
    folder(tmp_path, monkeypatch, make_config(fake(), extra="receipt: false\n"))
    import shutil

    shutil.copy(tmp_path / "fake.py", tmp_path / "quiet.py")  # leaves no receipt
    text = (tmp_path / "quiet.py").read_text().replace(
        'path = os.environ.get("PLUGDROP_RECEIPT")', "path = None")
    (tmp_path / "quiet.py").write_text(text)
    (tmp_path / "cfg.yaml").write_text(make_config(fake().replace("fake.py", "quiet.py"),
                                                   extra="receipt: false\n"))
    assert ablate() == 0
    shown = capsys.readouterr().out
    assert "runs show it attached" not in shown
    assert "receipt: false" in (tmp_path / "out" / "report.html").read_text()


def test_a_search_whose_space_cannot_produce_a_runnable_candidate_stops_in_one_line(tmp_path):
    import sys
    import time
    from pathlib import Path

    import pytest

    sys.path.insert(0, str(Path(__file__).parent / "search"))
    from _search_helpers import config as search_config

    from plugdrop.ablate.errors import ConfigError
    from plugdrop.ablate.search import loads_search
    from plugdrop.ablate.study import search
    from plugdrop.ablate.study.strategy import Context
    from plugdrop.ablate.train import Dist

    class Unrunnable:  # what plugdrop's trainer says of a selector that matches nothing
        def __init__(self, cfg, data=None):
            self.cfg = cfg

        def prepare(self, d):
            raise ConfigError("search.yaml:11:7: selector 'layer9.*' matched no module")

    space = ("    - {layers: {choice: ['layer9.*', 'layer8.*']}, transform: DropBlock, p: 0.1, "
             "block_size: 3}\n")
    sc = loads_search(search_config(space=space, budget=20, seeds="{min: 2, max: 3}"),
                      "search.yaml")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search, "program_of", Unrunnable)
        for attempt in ("first", "--resume"):
            s = search.Search(sc, tmp_path)
            s.open(Context(d=Dist(), program=Unrunnable(sc.base), read=lambda: []))
            start = time.monotonic()
            with pytest.raises(ConfigError) as e:
                _within(20, s.next_round)
            assert time.monotonic() - start < 20
            line = str(e.value)
            assert "search.space: the first 3 candidates cannot run, so no further one is " \
                   "proposed; the last: search.yaml:11:7: selector 'layer9.*'" in line, attempt
            assert "\n" not in line


def test_still_open_from_before_each_ends_in_one_line(capsys):
    import pytest
    import torch

    import plugdrop as pd
    import plugdrop.functional as F
    from plugdrop.ablate.data.sets import held_out
    from plugdrop.ablate.decide.simulate import seeds_needed
    from plugdrop.ablate.errors import ConfigError

    assert seeds_needed(1e-300, 0.05) is None and seeds_needed(1e300, 0.05) == 2
    with pytest.raises(ConfigError, match=r"data: digits has 1,797 images, of which "
                                          r"val_fraction 0.0001 holds out 0.18: none would "
                                          r"validate; give val_fraction >= 0.01"):
        held_out(1797, 0.0001, "digits")
    assert held_out(1797, 0.01, "digits") == 18
    x = torch.randn(1, 2, 8, 8)
    for p in (1.0, torch.tensor(1.0), torch.tensor(-0.5, dtype=torch.float64)):
        with pytest.raises(pd.SettingError, match=r"p must be a probability in \[0, 1\)"):
            F.drop_block(x, p, 3)
    assert F.drop_block(x, torch.tensor(0.1), 3).shape == x.shape
    with pytest.raises(TypeError, match="p must be a real number, got a torch.bool tensor"):
        F.dropout(x, torch.tensor(True))
    with pytest.raises(SystemExit):
        main(["ablate", "x.yaml", "--seeds", "{min: 2, max: 3}"])
    err = capsys.readouterr().err
    assert "'{min: 2, max: 3}' is not an integer: give the items as separate arguments, or " \
           "an adaptive design as --seeds-min N --seeds-max N" in err


def test_run_log_refuses_an_integer_beyond_a_float(tmp_path, monkeypatch):
    import pytest

    import plugdrop as pd

    env = {"PLUGDROP_SEED": "0", "PLUGDROP_VARIANT": "b", "PLUGDROP_SPEC": str(tmp_path / "s"),
           "PLUGDROP_RUN_DIR": str(tmp_path), "PLUGDROP_RESUME": "0",
           "PLUGDROP_METRICS": str(tmp_path / "metrics.jsonl")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    run = pd.current_run()
    with pytest.raises(pd.PlugdropError, match=r"log\(score=...\): an integer of 401 digits, "
                                               r"beyond what a float holds"):
        run.log(step=1, score=10**400)
    run.log(step=1, score=10**300)  # within a float's range: kept as written
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["score"] == 10**300


def test_files_a_program_may_replace_by_a_named_pipe_are_never_waited_on(tmp_path):
    """The contract's metrics file and the receipt sit where the program writes: a named pipe
    in their place is said, in the run's line and in the report's warnings, not read."""
    import os

    import pytest

    from plugdrop.ablate import config, runs
    from plugdrop.ablate.programs.judge import Judge
    from plugdrop.ablate.programs.protocol import RunFailed
    from plugdrop.ablate.results import load_run

    cfg = config.loads("program: [x]\ndecide_on: {metric: score, goal: max}\nmargin: 0.1\n"
                       "variants: {b: [], v: [{layers: a, transform: Dropout, p: 0.1}]}\n",
                       str(tmp_path / "c.yaml"))
    rd = runs.RunDir(tmp_path / "out", "v", 0)
    rd.path.mkdir(parents=True)
    os.mkfifo(rd.metrics)
    os.mkfifo(rd.path / "attached.json")
    with pytest.raises(RunFailed, match=r"its metrics file \(PLUGDROP_METRICS, .*\) is a named "
                                        r"pipe \(FIFO\), not a regular file"):
        _within(5, Judge(cfg).judge, rd, 1, None, rd.path / "o", rd.path / "e")
    said: list[str] = []
    run = _within(5, load_run, tmp_path / "out", "v", 0, None, True, said)
    assert run.attached is None and run.metrics == []
    assert any("attached.json: is a named pipe (FIFO)" in w for w in said), said
    assert any("metrics.jsonl: is a named pipe (FIFO)" in w for w in said), said


def test_a_pattern_slow_on_every_line_is_stopped_over_the_whole_read(monkeypatch):
    import pytest

    from plugdrop.ablate.programs import sources

    monkeypatch.setattr(sources, "ALL_LINES_S", 0.0)  # as if each line took almost LINE_S
    with pytest.raises(sources.SourceError, match=r"took more than 0s to match 63 lines, up "
                                                  r"to line 63, and was stopped"):
        sources.stdout_records([f"score {i}" for i in range(200)], r"score (?P<score>\d+)")
    monkeypatch.setattr(sources, "ALL_LINES_S", 20.0)
    assert len(sources.stdout_records([f"score {i}" for i in range(200)],
                                      r"score (?P<score>\d+)")) == 200
