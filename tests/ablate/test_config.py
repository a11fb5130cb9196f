"""Config parsing: defaults, grids, --set overrides, and every config mistake as one line that
names the place (file:line:column or the command-line option)."""

from __future__ import annotations

import re

import pytest
from _runner_helpers import GOOD, write

from plugdrop.ablate import config as C
from plugdrop.ablate.errors import ConfigError
from plugdrop.cli import main


def load(tmp_path, text, sets=()):
    return C.load(write(tmp_path, text), C.parse_overrides(list(sets)))


def test_defaults_and_schedules(tmp_path):
    cfg = load(tmp_path, GOOD)
    assert cfg.model == "tinynet:make" and cfg.epochs == 1 and cfg.seeds == (0, 1)
    assert (cfg.optimizer, cfg.lr, cfg.momentum, cfg.weight_decay) == ("sgd", 0.05, 0.9, 5e-4)
    assert (cfg.lr_schedule, cfg.amp, cfg.grad_accum, cfg.ema) == ("cosine", "off", 1, None)
    assert cfg.baseline == "baseline" and cfg.variant_names == ["baseline", "dropblock", "ramp"]
    ramp = cfg.variant("ramp").attachments
    assert repr(ramp[0].build(steps=40)) == \
        "DropBlock(p=linear(0, 0.2, steps=40), block_size=2)"
    assert ramp[2].where == "params"
    with pytest.raises(Exception):
        cfg.lr = 1.0  # frozen


def test_transforms_and_schedules_come_from_the_library():
    import plugdrop as pd

    names = C.transform_names()
    assert {"DropBlock", "Dropout2d", "ManifoldMixup", "ClipGradNorm"} <= set(names)
    assert "Transform" not in names and all(n in pd.__all__ for n in names)
    assert set(C.schedule_names()) == {"linear", "cosine", "piecewise", "warmup", "by_depth"}


def test_depth_scaled_settings_times_a_ramp(tmp_path):
    import plugdrop as pd

    text = GOOD.replace("  ramp:\n", "  depth:\n    - {layers: \"layer1.*\", transform: DropPath, "
                        "p: {schedule: by_depth, start: 0.0, end: 0.2, times: {schedule: linear, "
                        "start: 0.5, end: 1.0}}}\n  ramp:\n", 1)
    cfg = load(tmp_path, text)
    (att,) = cfg.variant("depth").attachments
    model = __import__("tinynet").make()
    h = att.attach(model.train(), steps=10)
    def values():
        return [r.values["p"] for r in pd.summary(model) if r.kind == "transform"]

    depth = [0.0, 0.2 / 3, 0.4 / 3, 0.2]  # layer1's 4 modules, timm's linspace rule
    assert values() == pytest.approx([0.5 * v for v in depth])  # the ramp starts at 0.5
    h.step(10)
    assert values() == pytest.approx(depth)


def test_scientific_notation_is_a_float(tmp_path):
    cfg = load(tmp_path, GOOD.replace("batch_size: 128", "batch_size: 128\nlr: 1e-3\n"
                                      "weight_decay: 5e-4"))
    assert cfg.lr == 1e-3 and cfg.weight_decay == 5e-4
    cfg = load(tmp_path, GOOD, ["lr=2e-2"])
    assert cfg.lr == 0.02


def test_nested_overrides(tmp_path):
    cfg = load(tmp_path, GOOD, ["variants.dropblock.0.p=0.2", "epochs=3", "seeds=[4, 5]",
                                "model_kwargs={width: 4}"])
    assert cfg.variant("dropblock").attachments[0].kwargs["p"] == 0.2
    assert cfg.epochs == 3 and cfg.seeds == (4, 5) and cfg.model_kwargs == {"width": 4}
    cfg = load(tmp_path, GOOD, ["variants.new=[]"])
    assert "new" in cfg.variant_names


def test_grid_expansion_and_names(tmp_path):
    text = GOOD.replace("p: 0.1, block_size: 3", "p: {grid: [0.05, 0.1]}, "
                                                 "block_size: {grid: [3, 5]}")
    cfg = load(tmp_path, text)
    assert cfg.variant_names == ["baseline", "dropblock[p=0.05,block_size=3]",
                                 "dropblock[p=0.05,block_size=5]",
                                 "dropblock[p=0.1,block_size=3]",
                                 "dropblock[p=0.1,block_size=5]", "ramp"]
    v = cfg.variant("dropblock[p=0.1,block_size=5]")
    assert v.attachments[0].kwargs == {"p": 0.1, "block_size": 5}
    assert dict(v.grid) == {"p": 0.1, "block_size": 5}
    assert len(cfg.runs()) == 6 * 2


def test_list_prints_runs(tmp_path, capsys):
    text = GOOD.replace("p: 0.1, block_size: 3", "p: {grid: [0.05, 0.1]}, block_size: 3")
    assert main(["ablate", str(write(tmp_path, text)), "--list", "--seeds", "7"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "baseline  seed=7", "dropblock[p=0.05]  seed=7", "dropblock[p=0.1]  seed=7",
        "ramp  seed=7"]


def test_hash_ignores_where_results_go(tmp_path):
    a = load(tmp_path, GOOD)
    assert load(tmp_path, GOOD, ["out=elsewhere", "device=cpu"]).hash() == a.hash()
    assert load(tmp_path, GOOD, ["lr=0.1"]).hash() != a.hash()


# (edit of GOOD, expected location (line or option), message fragment)
ERRORS = [
    (("epochs: 1", "epoch: 1"), 4, "unknown setting 'epoch' (did you mean 'epochs'?)"),
    (("epochs: 1", "epochs: 0"), 4, "epochs must be an integer >= 1"),
    (("transform: DropBlock, p: 0.1", "transform: DropBlok, p: 0.1"), 10,
     "unknown transform 'DropBlok' (did you mean 'DropBlock'?)"),
    (("p: 0.1, block_size: 3", "p: 0.1, blok_size: 3"), 10,
     "DropBlock has no setting 'blok_size' (did you mean 'block_size'?)"),
    (("p: 0.1, block_size: 3", "p: 1.5, block_size: 3"), 10, "p must be a probability"),
    (("schedule: linear", "schedule: linar"), 13, "unknown schedule 'linar'"),
    (("seeds: [0, 1]", "seeds: [zero]"), 6, "seeds must be a list of integers"),
    (("seeds: [0, 1]", "seeds: [true]"), 6, "seeds must be a list of integers"),
    (("seeds: [0, 1]", "seeds: [1, 1]"), 6, "1 is listed twice"),
    (("where: params", "where: grads"), 15, "where must be output, input or params"),
    (("epochs: 1", "epochs: 1\ndevice: gpu"), 5, "device must be auto, cpu, cuda or cuda:N, "
                                               "got 'gpu' (did you mean 'cuda'?)"),
    (("epochs: 1", "epochs: 1\nlabel_smoothing: 1.5"), 5, "label_smoothing must be a number "
                                                         "in [0, 1)"),
    (("epochs: 1", "epochs: 1\ngradcam: {images: 0}"), 5, "gradcam images must be an integer "
                                                         ">= 1"),
    (("epochs: 1", "epochs: 1\namp: fp8"), 5, "amp must be off, bf16 or fp16"),
    (("epochs: 1", "epochs: 1\noptimizer: adamx_w"), 5, "a timm optimizer name"),
    (("epochs: 1", "epochs: 1\nema: 1.5"), 5, "ema must be true, false or a decay"),
    (("epochs: 1", "epochs: 1\nepochs: 2"), 5, "duplicate key 'epochs'"),
    (("  baseline: []", "  db/l2: []"), 8, "variant name 'db/l2'"),
    (("{schedule: linear, start: 0.0, end: 0.2}", "{schedule: piecewise, points: [0, 0.1]}"),
     13, "piecewise() takes a mapping"),
    (("{schedule: linear, start: 0.0, end: 0.2}", "{schedule: linear, start: 0.0, ends: 0.2}"),
     13, "the linear schedule has no setting 'ends' (did you mean 'end'?)"),
    (("transform: DropBlock, p: 0.1, block_size: 3",
      "transform: DropBlock, p: 0.1, block_size: 3, where: params"), 10,
     "where: params takes a gradient transform"),
    (("transform: DropBlock, p: 0.1, block_size: 3",
      "transform: ManifoldMixup, where: input"), 10, "ManifoldMixup mixes module outputs"),
    (("p: 0.1, block_size: 3", "p: {grid: []}, block_size: 3"), 10, "a grid is {grid: [value"),
    (("batch_size: 128", "batch_size: 128\nwatch: 3"), 6, "watch must be auto, false, or a "
                                                        "selector"),
    (("plots: false", "plots: maybe"), 16, "plots must be true or false, got 'maybe'"),
    (("plots: false", "plots:"), 16, "plots must be true or false, got None"),
]


@pytest.mark.parametrize("edit,line,message", ERRORS, ids=[e[2][:30] for e in ERRORS])
def test_config_errors_name_the_place(tmp_path, edit, line, message):
    old, new = edit
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(ConfigError, match=re.escape(message)) as e:
        C.load(path)
    text = str(e.value)
    assert text.startswith(f"{path}:{line}:"), text
    assert "\n" not in text


SET_ERRORS = [
    ("out=", "--set out: out must be a non-empty folder path"),
    ("variants", "--set variants: --set takes KEY=VALUE"),
    ("epochs=[1", "--set epochs: '[1' is not valid YAML"),
    ("epoch=3", "--set epoch: unknown setting 'epoch' (did you mean 'epochs'?)"),
    ("variants.dropblok.0.p=0.2", "--set variants.dropblok.0.p: no setting "
                                  "'variants.dropblok' (did you mean 'dropblock'?)"),
    ("variants.dropblock.3.p=0.2", "--set variants.dropblock.3.p: variants.dropblock is a "
                                   "list of 1"),
    ("variants.dropblock.0.p=2", "--set variants.dropblock.0.p: bad DropBlock settings"),
    ("seeds=[true]", "--set seeds: seeds must be a list of integers"),
]


@pytest.mark.parametrize("item,message", SET_ERRORS, ids=[s[0] for s in SET_ERRORS])
def test_override_errors_name_the_option(tmp_path, item, message):
    with pytest.raises(ConfigError) as e:
        load(tmp_path, GOOD, [item])
    assert str(e.value).startswith(message), str(e.value)
    assert "command line:0:0" not in str(e.value)


def test_flag_errors_name_the_flag(tmp_path, capsys):
    path = write(tmp_path, GOOD)
    assert main(["ablate", str(path), "--epochs", "0", "--list"]) == 2
    assert capsys.readouterr().err.startswith("plugdrop ablate: --epochs: epochs must be")
    (tmp_path / "afile").write_text("x")
    assert main(["ablate", str(path), "--out", str(tmp_path / "afile")]) == 2
    assert "is a file; give a folder" in capsys.readouterr().err


def test_structural_errors(tmp_path):
    with pytest.raises(ConfigError, match="needs 'model:'"):
        load(tmp_path, "variants: {a: []}\n")
    with pytest.raises(ConfigError, match="needs 'variants:'"):
        load(tmp_path, "model: resnet18\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load(tmp_path, "model: [unclosed\n")
    with pytest.raises(ConfigError, match="empty"):
        load(tmp_path, "")
    with pytest.raises(ConfigError, match="cannot read"):
        C.load(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="attachment without 'layers'"):
        load(tmp_path, "model: m\nvariants:\n  a:\n    - {transform: Dropout}\n")
