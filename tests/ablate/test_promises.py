"""The promises under bad input for the surfaces of programs (issue: the promises): what a
program's processes write after its run finished, metrics files of many lines, and the
generated bad inputs."""

from __future__ import annotations

import json
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
