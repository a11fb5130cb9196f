"""plugdrop ablate and plugdrop layers: config parsing and its errors, a one-epoch ablation end
to end, the layers command, and the DDP path with two processes."""

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from plugdrop import _ablate_config as C
from plugdrop.cli import main

TESTS = Path(__file__).parent

GOOD = """\
model: tinynet:make
data: digits
image_size: 16
epochs: 1
batch_size: 128
seeds: [0, 1]
variants:
  baseline: []
  dropblock:
    - {layers: "layer1.*", transform: DropBlock, p: 0.1, block_size: 3}
  ramp:
    - {layers: "layer1.0", transform: DropBlock, block_size: 2,
       p: {schedule: linear, start: 0.0, end: 0.2}}
    - {layers: "layer2.*", transform: Dropout2d, p: {schedule: cosine, start: 0.0, end: 0.1}}
    - {layers: fc, transform: ClipGradNorm, max_norm: 1.0, where: params}
"""


def _write(tmp_path, text, name="cfg.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_parse_fills_defaults_and_builds_schedules(tmp_path):
    cfg = C.load(_write(tmp_path, GOOD))
    assert cfg.model == "tinynet:make" and cfg.epochs == 1 and cfg.seeds == [0, 1]
    assert cfg.optimizer == "sgd" and cfg.lr == 0.05 and cfg.baseline == "baseline"
    ramp = cfg.variants["ramp"]
    t = ramp[0].build(total_steps=40)
    assert repr(t) == "DropBlock(p=linear(0, 0.2, steps=40), block_size=2)"
    assert ramp[2].where == "params"
    assert cfg.resolved()["variants"]["dropblock"][0]["block_size"] == 3


def test_overrides(tmp_path):
    cfg = C.load(_write(tmp_path, GOOD), {"epochs": 3, "seeds": [5], "image_size": 8})
    assert cfg.epochs == 3 and cfg.seeds == [5] and cfg.image_size == 8
    with pytest.raises(C.ConfigError, match="command line: unknown setting 'epoch'"):
        C.load(_write(tmp_path, GOOD), {"epoch": 3})


@pytest.mark.parametrize("edit,line,message", [
    (("epochs: 1", "epoch: 1"), 4, "unknown setting 'epoch' (did you mean 'epochs'?)"),
    (("epochs: 1", "epochs: 0"), 4, "epochs must be an integer >= 1"),
    (("transform: DropBlock, p: 0.1", "transform: DropBlok, p: 0.1"), 10,
     "unknown transform 'DropBlok' (did you mean 'DropBlock'?)"),
    (("p: 0.1, block_size: 3", "p: 0.1, blok_size: 3"), 10,
     "DropBlock has no setting 'blok_size' (did you mean 'block_size'?)"),
    (("p: 0.1, block_size: 3", "p: 1.5, block_size: 3"), 10, "p must be a probability in [0, 1)"),
    (("schedule: linear", "schedule: linar"), 13, "unknown schedule 'linar'"),
    (("seeds: [0, 1]", "seeds: [zero]"), 6, "seeds must be a list of integers"),
    (("where: params", "where: grads"), 15, "where must be output, input or params"),
])
def test_config_errors_name_the_place(tmp_path, edit, line, message):
    old, new = edit
    assert old in GOOD
    path = _write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(C.ConfigError, match=re.escape(message)) as e:
        C.load(path)
    assert str(e.value).startswith(f"{path}:{line}:")


def test_structural_errors(tmp_path):
    with pytest.raises(C.ConfigError, match="needs 'model:'"):
        C.load(_write(tmp_path, "variants: {a: []}\n"))
    with pytest.raises(C.ConfigError, match="needs 'variants:'"):
        C.load(_write(tmp_path, "model: resnet18\n"))
    with pytest.raises(C.ConfigError, match="not valid YAML"):
        C.load(_write(tmp_path, "model: [unclosed\n"))
    with pytest.raises(C.ConfigError, match="empty"):
        C.load(_write(tmp_path, ""))
    with pytest.raises(C.ConfigError, match="cannot read"):
        C.load(tmp_path / "missing.yaml")
    with pytest.raises(C.ConfigError, match="attachment without 'layers'"):
        C.load(_write(tmp_path, "model: m\nvariants:\n  a:\n    - {transform: Dropout}\n"))


def test_selector_matching_nothing_fails_before_training(tmp_path, capsys):
    path = _write(tmp_path, GOOD.replace('layers: "layer1.*"', 'layers: "layer9.*"'))
    assert main(["ablate", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:10:" in err and "'layer9.*' matched no module" in err
    assert not (tmp_path / "out").exists()


def test_bad_model_and_data(tmp_path, capsys):
    path = _write(tmp_path, GOOD.replace("tinynet:make", "resnet18x"))
    assert main(["ablate", str(path)]) == 2
    assert "is not a timm model" in capsys.readouterr().err
    path = _write(tmp_path, GOOD.replace("data: digits", "data: /no/such/dir"))
    assert main(["ablate", str(path)]) == 2
    assert "neither 'digits' nor a directory" in capsys.readouterr().err


def test_one_epoch_ablation_end_to_end(tmp_path, capsys):
    out = tmp_path / "out"
    path = _write(tmp_path, GOOD)
    assert main(["ablate", str(path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for v in ("baseline", "dropblock", "ramp"):
        assert v in printed
    assert "best val acc" in printed and "time vs baseline" in printed
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == 3 * 2 * 1
    assert {r["variant"] for r in rows} == {"baseline", "dropblock", "ramp"}
    assert all(0.0 <= float(r["val_acc"]) <= 1.0 and float(r["epoch_time"]) > 0 for r in rows)
    data = json.loads((out / "results.json").read_text())
    assert data["config"]["model"] == "tinynet:make" and "torch" in data["versions"]
    assert data["data"]["name"] == "digits" and data["data"]["train"] + data["data"]["val"] == 1797
    assert [s["variant"] for s in data["summary"]] == ["baseline", "dropblock", "ramp"]
    ramp = [r for r in data["records"] if r["variant"] == "ramp"][0]
    assert ramp["values"]["DropBlock@layer1.0:p"] == pytest.approx(0.2)  # ramp reached its end
    for png in ("val_acc.png", "final_acc.png", "drop_frac.png", "gradcam_baseline.png",
                "gradcam_dropblock.png", "gradcam_ramp.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # watched per epoch: the layers any variant regularizes, in every variant (comparable)
    base = [r for r in data["records"] if r["variant"] == "baseline"][0]["watch"]
    drop = [r for r in data["records"] if r["variant"] == "dropblock"][0]["watch"]
    assert "layer1.0/act_std" in base and "layer1.0/drop_frac" not in base
    assert abs(drop["layer1.0/drop_frac"] - 0.1) < 0.03 and drop["layer1.0/p"] == 0.1


def test_image_folder_data(tmp_path, capsys):
    from PIL import Image

    for split in ("train", "val"):
        for k, color in enumerate([(255, 0, 0), (0, 0, 255)]):
            d = tmp_path / "imgs" / split / f"class{k}"
            d.mkdir(parents=True)
            for i in range(6):
                Image.new("RGB", (20, 20), tuple(c // (i + 1) for c in color)).save(d / f"{i}.png")
    cfg = GOOD.replace("data: digits", f"data: {tmp_path / 'imgs'}").replace("seeds: [0, 1]",
                                                                          "seeds: [0]")
    out = tmp_path / "out"
    assert main(["ablate", str(_write(tmp_path, cfg)), "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    assert data["data"]["classes"] == ["class0", "class1"] and data["data"]["train"] == 12


def test_layers_command(capsys):
    assert main(["layers", "tinynet:make", "--input-size", "3", "16", "16",
                 "--match", "layer1.*"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "picked by 'layer1.*' (4)" in out[0]
    conv = next(line for line in out if "layer1.0" in line)
    assert conv.startswith("*") and "Conv2d" in conv and "Tensor(1, 8, 16, 16)" in conv
    fc = next(line for line in out if line.strip().startswith("fc"))
    assert not fc.startswith("*") and "Tensor(1, 10)" in fc


def test_layers_command_on_timm(capsys):
    assert main(["layers", "resnet18", "--input-size", "3", "64", "64", "--match", "layer3.*",
                 "--depth", "2"]) == 0
    out = capsys.readouterr().out
    assert "* " in out and "layer3.0" in out and "Tensor(1, 256, 4, 4)" in out
    assert "layer3.0.conv1" not in out  # depth 2


def test_ddp_two_processes(tmp_path):
    out = tmp_path / "out"
    cfg = GOOD.replace("seeds: [0, 1]", "seeds: [0]")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "plugdrop", "ablate", str(_write(tmp_path, cfg)), "--out", str(out),
         "--device", "cpu"],
        capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "x 2 processes" in proc.stdout
    assert proc.stdout.count("best val acc") == 1  # reported once, by rank 0
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == 3  # written once: 3 variants x 1 seed x 1 epoch
    data = json.loads((out / "results.json").read_text())
    assert data["data"]["world_size"] == 2
