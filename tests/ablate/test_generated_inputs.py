"""Generated bad inputs (the promise: a mistake in the input is exit 2 with one line naming the
value and its place, a valid input runs; never a traceback). Hypothesis builds configs from the
grammar of the settings (an ablation's and a search's), lines of a program's metrics file and
``plugdrop plan`` arguments, mutates them, and the tests assert the promise on each. Examples
per run (derandomized, so CI sees the same ones; ``PLUGDROP_GENERATED=N`` tries N times as many,
drawn afresh): 300 configs through the loader, 60 through
``plugdrop ablate`` with a program that runs (about 40% of them train), 300 metrics files, 30 ``plan`` command lines;
and the newest surfaces: 150 receipts, 200 ``attach_to`` values, 120 metrics sources of each
kind (CSV, JSON, printed lines, TensorBoard, a missing path, a folder, a named pipe), 30
``plugdrop report`` judging arguments."""

from __future__ import annotations

import json
import math
import os
import sys
import warnings

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plugdrop.ablate import config
from plugdrop.ablate.errors import ConfigError
from plugdrop.ablate.progress import Progress
from plugdrop.ablate.runs.records import last_value, logged_names, parse_records, position
from plugdrop.cli import main

#: ``PLUGDROP_GENERATED=10`` tries ten times the examples, and other ones (a seed of its own):
#: the on-demand setting, ``PLUGDROP_GENERATED=10 ./dev test tests/ablate/test_generated_inputs.py``
SCALE = int(os.environ.get("PLUGDROP_GENERATED", "1") or 1)


def examples(n: int) -> settings:
    """Hypothesis's settings of these tests: ``n`` examples (times :data:`SCALE`), the same on
    every run of one scale."""
    return settings(max_examples=n * SCALE, deadline=None, derandomize=SCALE == 1,
                    database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])

# ------------------------------------------------------------------ the grammar of a config

junk = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                 st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(
                     st.text(max_size=5), st.integers(0, 3), max_size=2))
number = st.one_of(st.floats(-2, 2), st.integers(-5, 10**20), st.sampled_from(
    [math.inf, -math.inf, math.nan, 0, 1, 0.5, 1e-300, 1e300]))
names = st.sampled_from(["score", "val_acc", "val_nll", "eval_top1", "loss", "", "epoch",
                         "step", "val-acc", "x y"])
schedule = st.fixed_dictionaries({"schedule": st.sampled_from(["linear", "cosine", "lineer",
                                                               "warmup"]),
                                  "start": number, "end": number},
                                 optional={"steps": st.one_of(st.integers(-2, 10**6), junk)})
attachment = st.fixed_dictionaries(
    {"layers": st.one_of(st.sampled_from(["layer1.*", "residual:", "**", "", "layer[1"]), junk),
     "transform": st.one_of(st.sampled_from(["DropBlock", "Dropout", "DropPath", "Dropout2d",
                                             "GaussianNoise", "DropBlok"]), junk)},
    optional={"p": st.one_of(number, schedule, st.fixed_dictionaries(
        {"grid": st.lists(number, max_size=3)})), "block_size": st.one_of(
        st.integers(-1, 9), junk), "where": st.sampled_from(["output", "input", "grad", "x"])})
variants = st.dictionaries(st.one_of(st.sampled_from(["baseline", "a", "b[p=1]", "c d", ""]),
                                     st.text(max_size=6)),
                           st.one_of(st.lists(attachment, max_size=2), junk),
                           min_size=0, max_size=3)
seeds = st.one_of(st.lists(st.integers(-3, 10**20), max_size=5), st.integers(-2, 8),
                  st.fixed_dictionaries({}, optional={k: st.one_of(st.integers(-2, 10**7), junk)
                                                      for k in ("min", "max", "step", "first",
                                                                "mix")}), junk)
decide_on = st.one_of(names, st.fixed_dictionaries(
    {"metric": st.one_of(names, junk)}, optional={"goal": st.one_of(
        st.sampled_from(["max", "min", "maximize"]), junk), "unit": junk}),
    st.lists(names, max_size=2), junk)
program = st.one_of(st.lists(st.one_of(st.sampled_from(
    ["python", "train.py", "{seed}", "{run_dir}", "{sede}", "{", "-m", "--x"]), junk),
    max_size=4), st.sampled_from(["python train.py --seed {seed}", "'unclosed", ""]), junk)
search = st.fixed_dictionaries({}, optional={
    "budget": st.one_of(st.integers(-1, 500), junk),
    "space": st.one_of(st.lists(st.fixed_dictionaries(
        {"layers": st.one_of(st.fixed_dictionaries({"choice": st.lists(st.sampled_from(
            ["layer1.*", "layer2.*"]), max_size=2)}), junk), "transform": st.sampled_from(
            ["DropBlock", "Dropout"])},
        optional={"p": st.one_of(st.fixed_dictionaries({"range": st.lists(number, max_size=3)},
                                                       optional={"log": junk}), number)}),
        max_size=2), junk),
    "sampler": st.one_of(st.sampled_from(["tpe", "random", "qmc", "tpee"]),
                         st.fixed_dictionaries({"name": st.sampled_from(["tpe", "random"])},
                                               optional={"n_startup_trials": junk,
                                                         "multivariate": junk}), junk),
    "seed": st.one_of(st.integers(-1, 10**20), junk), "parallel": st.one_of(
        st.integers(-1, 4), junk)})
SETTINGS = {"program": program, "decide_on": decide_on, "margin": st.one_of(number, junk),
            "alpha": st.one_of(number, junk), "seeds": seeds, "variants": variants,
            "run_timeout": st.one_of(st.sampled_from(["2h", "30min", "90s", "5steps", "x"]),
                                     junk),
            "metrics_from": st.one_of(st.fixed_dictionaries({}, optional={
                k: st.one_of(st.sampled_from(["{run_dir}/s.csv", "(?P<acc>[0-9.]+)", "{x}",
                                              "[", ""]), junk)
                for k in ("csv", "json", "tensorboard", "stdout", "xml")}), junk),
            "resume_args": st.one_of(st.lists(st.sampled_from(
                ["--resume", "{run_dir}/last.pt", "{oops}"]), max_size=3), junk),
            "attach_to": st.one_of(st.sampled_from(["timm", "timm.create_model", "x!",
                                                    "mypkg.build"]), junk),
            "receipt": junk, "spending": st.one_of(st.sampled_from(
                ["obf", "pocock", "hsd(-4)", "hsd(x)", "first(0.2)+hsd(-3)"]), junk),
            "passing": st.one_of(st.sampled_from(["holm", "bonferroni", "hlm"]), junk),
            "epochs": junk, "search": search, "typo_setting": junk}
#: settings drawn one time in ten: each makes a config wrong wherever it is (a setting of
#: plugdrop's own loop beside program:, an unknown key) or belongs to another command
RARE = {"epochs", "typo_setting", "search"}


def mostly(valid: st.SearchStrategy, wrong: st.SearchStrategy) -> st.SearchStrategy:
    """``valid`` three times in four, else ``wrong``: deep enough into the checks."""
    return st.integers(0, 3).flatmap(lambda k: wrong if k == 0 else valid)


for _key, _valid in {
        "margin": st.floats(0, 2), "alpha": st.floats(0.001, 0.2),
        "seeds": st.one_of(st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True),
                           st.fixed_dictionaries({"min": st.integers(2, 3),
                                                  "max": st.integers(3, 4)})),
        "decide_on": st.fixed_dictionaries({"metric": st.sampled_from(["score", "loss"]),
                                            "goal": st.sampled_from(["max", "min"])}),
        "receipt": st.booleans(), "run_timeout": st.sampled_from(["2h", "30min"]),
        "passing": st.sampled_from(["holm", "bonferroni"]),
        "spending": st.sampled_from(["obf", "pocock", "hsd(-4)"])}.items():
    SETTINGS[_key] = mostly(_valid, SETTINGS[_key])


@st.composite
def config_texts(draw: st.DrawFn) -> str:
    """A config as YAML text: settings drawn from the grammar (most of the time a program, a
    decision and variants, so that the checks past the first are reached), sometimes mutated
    as text (a character deleted, inserted or a line repeated)."""
    keys = draw(st.lists(st.sampled_from(sorted(set(SETTINGS) - RARE)), max_size=4,
                         unique=True))
    if draw(st.integers(0, 9)) == 0:  # a setting that is wrong wherever it is
        keys.append(draw(st.sampled_from(sorted(RARE))))
    base = {"program": ["python", "train.py", "--seed", "{seed}"],
            "decide_on": {"metric": "score", "goal": "max"}, "margin": 0.01,
            "variants": {"baseline": [], "a": [{"layers": "layer1.*", "transform": "Dropout",
                                                "p": 0.1}]}}
    doc = dict(base) if draw(st.integers(0, 4)) else {}
    for k in keys:
        doc[k] = draw(SETTINGS[k])
    try:
        text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
    except (yaml.YAMLError, ValueError):
        text = json.dumps(doc, default=str)
    if draw(st.integers(0, 3)) == 0 and text:
        i = draw(st.integers(0, len(text) - 1))
        how = draw(st.sampled_from(["delete", "insert", "repeat"]))
        if how == "delete":
            text = text[:i] + text[i + 1:]
        elif how == "insert":
            text = text[:i] + draw(st.sampled_from([":", "{", "-", " ", "\t", "'", "é",
                                                     "\x00"])) + text[i:]
        else:
            lines = text.splitlines(keepends=True)
            j = i % len(lines)
            text = "".join(lines[:j + 1] + lines[j:])
    return text


def _one_line(message: str) -> None:
    assert message.strip() and "\n" not in message.strip(), message
    assert "Traceback" not in message, message


@examples(300)
@given(text=config_texts())
def test_a_generated_config_loads_or_is_one_line(text):
    """The loader (an ablation's, and a search's when the config has ``search:``) returns a
    checked config or raises :class:`ConfigError` with one line; nothing else escapes."""
    from plugdrop.ablate.search import loads_search

    for load in (config.loads, loads_search):
        try:
            load(text, "c.yaml")
        except ConfigError as e:
            _one_line(str(e))


PROGRAM = ("import json, os\nopen(os.environ['PLUGDROP_METRICS'], 'a').write(json.dumps("
           "{'step': 1, 'score': 0.5 + len(open(os.environ['PLUGDROP_SPEC']).read()) / 1e4, "
           "'loss': 1}) + '\\n')\nopen(os.environ['PLUGDROP_RECEIPT'], 'w').write(json.dumps("
           "{'attachments': [{'label': 'x', 'layers': ['a'], 'calls': 1}]}))\n")


@examples(60)
@given(text=config_texts())
def test_a_generated_config_runs_or_is_one_line(text, tmp_path_factory, capsys):
    """``plugdrop ablate`` on a generated config whose program is an instant one: exit 0 or 1
    (runs trained; some may fail), or 2 with exactly one line; never a traceback. A config
    of more than 8 runs is cut to its first seed (the test's time)."""
    home = tmp_path_factory.mktemp("gen")
    (home / "p.py").write_text(PROGRAM)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        doc = None
    if isinstance(doc, dict):
        doc["program"] = [sys.executable, "p.py"]
        doc.pop("search", None)
        doc["plots"] = False
        if isinstance(doc.get("seeds"), (list, dict)) and not isinstance(doc.get("variants"),
                                                                          str):
            doc["seeds"] = [0, 1] if isinstance(doc["seeds"], list) else doc["seeds"]
            if isinstance(doc["seeds"], dict):
                doc["seeds"] = {k: v for k, v in doc["seeds"].items()
                                if k not in ("max",)} | {"max": 3}
        text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)
    (home / "cfg.yaml").write_text(text)
    cwd = os.getcwd()
    os.chdir(home)
    try:
        capsys.readouterr()
        rc = main(["ablate", "cfg.yaml", "--out", "out"])
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert rc in (0, 1, 2), (rc, err)
    if rc == 2:
        said = [x for x in err.splitlines() if x.startswith("plugdrop ablate:")]
        assert len(said) >= 1 and all("\n" not in x for x in said), err


# ------------------------------------------------------------------ a program's metrics lines

values = st.one_of(number, st.text(max_size=5), st.none(), st.booleans(),
                   st.integers(-10**400, 10**400), st.lists(number, max_size=2))
records = st.dictionaries(st.one_of(st.sampled_from(["epoch", "step", "score", "loss", ""]),
                                    st.text(max_size=4)), values, max_size=5)


@st.composite
def metrics_lines(draw: st.DrawFn) -> list[str]:
    out = []
    for rec in draw(st.lists(records, max_size=12)):
        line = json.dumps(rec, default=str)
        kind = draw(st.integers(0, 7))
        if kind == 0:
            line = line[:draw(st.integers(0, len(line)))]  # a torn line
        elif kind == 1:
            line = draw(st.text(max_size=20))
        out.append(line)
    return out


@examples(300)
@given(lines=metrics_lines())
def test_a_generated_metrics_file_reads_as_records_or_warnings(lines):
    """Any lines a program writes read as records with whole-number positions (the rest are
    warnings), and what the driver does with them (the progress line, the names, the last
    value) never raises."""
    recs, warnings = parse_records(lines)
    assert all(isinstance(w, str) and "\n" not in w for w in warnings)
    progress = Progress(1, enabled=True, tty=False)
    for rec in recs:
        assert position(rec) is not None
        progress.logged(rec)
    for name in logged_names(recs) + ["score"]:
        last_value(recs, name)


# ------------------------------------------------------------------ plugdrop plan

plan_args = st.lists(st.one_of(
    st.tuples(st.just("--seeds"), st.one_of(st.sampled_from(["3..12", "2..2", "0..3", "5..4",
                                                             "3..", "a..b", "3..100"]),
                                             st.text(max_size=6))),
    st.tuples(st.just("--effects"), st.one_of(st.sampled_from(["1,0", "nan,0", "1e308,0", ",",
                                                               "1,,0", "inf"]),
                                              st.text(max_size=6))),
    st.tuples(st.sampled_from(["--alpha", "--margin", "--step", "--seed", "--noise",
                               "--spending", "--passing", "--design"]),
              st.one_of(st.sampled_from(["0", "-1", "0.05", "1e-300", "1e300", "nan", "t3",
                                         "obf", "x", "99999999999999999999"]),
                        st.text(max_size=6)))), max_size=4)


@examples(30)
@given(pairs=plan_args)
def test_generated_plan_arguments_plan_or_are_one_line(pairs, capsys):
    argv = ["plan", "--reps", "20"] + [x for pair in pairs for x in pair]
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:  # a raw warning is a raw message
        warnings.simplefilter("always")
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse's own usage line (an option without its value)
            rc = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], (
        argv, [str(w.message) for w in caught])
    assert rc in (0, 2), (argv, rc, err)
    if rc == 2:
        assert err.strip(), argv


@pytest.mark.parametrize("big", [10**400, -10**400])
def test_the_progress_line_shows_any_number(big, capsys):
    Progress(1, enabled=True, tty=False).logged({"step": 1, "score": big})
    assert "step 1" in capsys.readouterr().out


# ------------------------------------------------------------------ the newest surfaces (58)

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=12)
attachment_receipts = st.fixed_dictionaries({}, optional={
    "label": st.one_of(st.sampled_from(["Dropout@a", "x"]), json_values),
    "layers": st.one_of(st.lists(st.sampled_from(["a", "b.0"]), max_size=2), json_values),
    "calls": st.one_of(st.integers(-3, 10**20), st.sampled_from([math.nan, math.inf, 2.5, 3.0,
                                                                 -0.0, 1e400]), json_values)})
receipt_docs = st.one_of(json_values, st.fixed_dictionaries({}, optional={
    "variant": st.one_of(st.sampled_from(["v", "w"]), json_values),
    "run": st.one_of(st.sampled_from(["v__s0", "v__s1"]), json_values),
    "error": st.one_of(st.text(max_size=8), json_values),
    "attachments": st.one_of(st.lists(attachment_receipts, max_size=3), json_values),
    "steps": json_values}))


@examples(150)
@given(doc=receipt_docs)
def test_a_generated_receipt_is_judged_in_one_line_or_trusted(doc):
    """Whatever a program writes as its receipt (read back through JSON: NaN, 1e400 as
    infinity, negative or fractional counts, another run's), the judge says one line or
    trusts it, and a trusted receipt's counts are whole numbers >= 0."""
    from plugdrop.ablate.programs.judge import receipt_problem
    from plugdrop.ablate.results import receipts

    doc = json.loads(json.dumps(doc))  # as the file reads back
    why = receipts.check(doc, "v__s0", "v")
    if why is None:
        if "error" not in doc:
            assert receipts.calls(doc) >= 0
    else:
        _one_line(why)
    line = receipt_problem(doc, "v", "v__s0")
    if line is not None:
        _one_line(line)
    else:
        assert why is None and receipts.calls(doc) > 0


attach_to_values = st.one_of(
    st.sampled_from(["timm.create_model", "Net", "__main__.Net", "mypkg.models.Net", "torch",
                     "torch.nn.Module.to", "a..b", ".x", "x.", "1abc.d", "é.f", "", " "]),
    st.lists(st.sampled_from(["timm.create_model", "Net", "x!"]), max_size=3),
    st.fixed_dictionaries({}, optional={
        "factory": st.one_of(st.sampled_from(["timm.create_model", "Net", "x y"]), json_values),
        "steps": st.one_of(st.integers(-2, 10**20), json_values),
        "stpes": json_values}),
    json_values)


@examples(200)
@given(value=attach_to_values, program=st.sampled_from([["python", "train.py"],
                                                       ["bash", "train.sh"], ["train.py"]]))
def test_a_generated_attach_to_loads_or_is_one_line(value, program):
    """Any ``attach_to`` value (names of functions, classes, methods, malformed ones, the
    mapping with its steps) beside a program: the config loads or says one line."""
    doc = {"program": program, "decide_on": {"metric": "score", "goal": "max"},
           "margin": 0.1, "attach_to": value,
           "variants": {"baseline": [], "a": [{"layers": "x", "transform": "Dropout",
                                               "p": 0.1}]}}
    try:
        config.loads(json.dumps(doc, allow_nan=False), "c.yaml")
    except ConfigError as e:
        _one_line(str(e))
    except ValueError:  # a value JSON cannot write (NaN): not a config a user can write
        pass


cells = st.one_of(st.sampled_from(["", "0.5", "nan", "inf", "1e400", "-1", "3", "x", '"',
                                   "\x00", "é", "a" * 200_000]), st.text(max_size=6))
csv_texts = st.lists(st.lists(cells, min_size=1, max_size=4), max_size=5).map(
    lambda rows: "\n".join(",".join(r) for r in [["epoch", "score", "loss"], *rows]) + "\n")
json_texts = st.one_of(st.lists(records, max_size=4).map(
    lambda recs: json.dumps(recs, default=str)),
    st.lists(records, max_size=4).map(
        lambda recs: "\n".join(json.dumps(r, default=str) for r in recs)),
    st.dictionaries(st.sampled_from(["log_history", "x"]), st.lists(records, max_size=3),
                    max_size=2).map(lambda d: json.dumps(d, default=str)),
    st.text(max_size=30))
printed = st.lists(st.one_of(st.sampled_from(["epoch 1: score 0.5", "score=nan", "step 3 score 1e400",
                                              "epoch -1: score 2", "a" * 30]),
                             st.text(max_size=20)), max_size=6)
patterns = st.sampled_from([r"epoch (?P<epoch>\d+): score (?P<score>\S+)",
                            r"score[ =](?P<score>[^ ]+)", r"step (?P<step>-?\d+) score (?P<score>\S+)",
                            r"(?P<score>\d*)(?P<epoch>\d*)"])


@examples(120)
@given(kind=st.sampled_from(["csv", "json", "stdout", "tensorboard", "missing", "folder",
                             "pipe"]), csv_text=csv_texts, json_text=json_texts,
       lines=printed, pattern=patterns, raw=st.binary(max_size=64))
def test_a_generated_metrics_source_reads_as_records_or_one_line(
        tmp_path_factory, kind, csv_text, json_text, lines, pattern, raw):
    """A source of each kind with any content (a CSV with huge or odd cells, JSON of any
    shape, printed lines under a pattern, event files that are not, a path that is missing,
    a folder or a named pipe): records with whole positions, or one line that names this
    run's path; it never blocks or raises."""
    from plugdrop.ablate.config import MetricsFrom
    from plugdrop.ablate.programs.sources import Source

    home = tmp_path_factory.mktemp("src")
    logs = home / "logs"
    logs.mkdir()
    path = home / "metrics"
    if kind == "csv":
        path.write_text(csv_text)
    elif kind == "json":
        path.write_text(json_text)
    elif kind == "stdout":
        (logs / "attempt-1.stdout").write_text("\n".join(lines) + "\n")
        path = None
    elif kind == "tensorboard":
        path.mkdir()
        (path / "events.out.tfevents.1.x").write_bytes(raw)
    elif kind == "folder":
        path.mkdir()
    elif kind == "pipe":
        os.mkfifo(path)
    source_kind = {"missing": "csv", "folder": "json", "pipe": "csv"}.get(kind, kind)
    if source_kind == "tensorboard":
        pytest.importorskip("tensorboard")
    where = pattern if source_kind == "stdout" else "{run_dir}/metrics"
    got, problem = Source(MetricsFrom(source_kind, where), path, logs).read()
    for rec in got:
        assert position(rec) is not None
    if problem is not None:
        _one_line(problem)
        assert got == [] and "{run_dir}" not in problem
        if path is not None:
            assert str(path) in problem


report_items = st.lists(st.one_of(
    st.tuples(st.just("--decide-on"), st.sampled_from(["score", "loss", "scor", "val_acc",
                                                       "test_accc", "", "x y"])),
    st.tuples(st.just("--goal"), st.sampled_from(["max", "min"])),
    st.tuples(st.just("--set"), st.sampled_from([
        "margin=0.01", "margin=-1", "margin=nan", "alpha=0.1", "alpha=2", "spending=pocock",
        "passing=holm", "metrics_from={csv: x.csv}", "metrics_from=null", "epochs=3",
        "seeds=[0, 1]", "decide_on={metric: loss, goal: min}", "decide_on.goal=min",
        "margin", "=1", "typo=1"]))), max_size=3)


@pytest.fixture(scope="module")
def judged_folder(tmp_path_factory):
    """An ablation of the fake program (3 runs, finished), to report under generated
    arguments."""
    from _programs import PROGRAMS, fake
    from _programs import config as make_config

    home = tmp_path_factory.mktemp("judged")
    for f in PROGRAMS.iterdir():
        if f.is_file():
            (home / f.name).write_bytes(f.read_bytes())
    (home / "cfg.yaml").write_text(make_config(fake()))
    cwd = os.getcwd()
    os.chdir(home)
    try:
        assert main(["ablate", "cfg.yaml", "--out", "out"]) == 0
    finally:
        os.chdir(cwd)
    return home / "out"


@examples(30)
@given(pairs=report_items)
def test_generated_report_arguments_report_or_refuse_in_one_line(pairs, judged_folder, capsys):
    """``plugdrop report`` under any judging arguments: it reports (exit 0), or refuses in
    one line (exit 2) and leaves every file of the folder as it was."""
    def stamps() -> dict:
        return {p.name: p.stat().st_mtime_ns for p in judged_folder.iterdir() if p.is_file()}

    argv = ["report", str(judged_folder), "--no-plots"] + [x for pair in pairs for x in pair]
    before = stamps()
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's own usage line
        rc = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert rc in (0, 2), (argv, rc, err)
    if rc == 2:
        _one_line(err.strip().splitlines()[-1])
        assert stamps() == before, argv
