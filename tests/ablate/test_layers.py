"""plugdrop layers: the module tree with output shapes, --model-kwargs, and its input errors."""

from __future__ import annotations

import pytest

from plugdrop.cli import main


def test_layers_command(capsys):
    assert main(["layers", "tinynet:make", "--input-size", "3", "16", "16",
                 "--match", "layer1.*"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "picked by 'layer1.*' (4)" in out[0]
    conv = next(line for line in out if "layer1.0" in line)
    assert conv.startswith("*") and "Conv2d" in conv and "Tensor(1, 8, 16, 16)" in conv
    fc = next(line for line in out if line.strip().startswith("fc"))
    assert not fc.startswith("*") and "Tensor(1, 10)" in fc


def test_layers_model_kwargs_and_depth(capsys):
    assert main(["layers", "tinynet:make", "--input-size", "3", "16", "16", "--depth", "1",
                 "--model-kwargs", "{width: 4, num_classes: 3}"]) == 0
    out = capsys.readouterr().out
    assert "Tensor(1, 3)" in out and "layer1.0" not in out


def test_layers_vit_needs_img_size(capsys):
    assert main(["layers", "vit_tiny_patch16_224", "--input-size", "3", "64", "64",
                 "--model-kwargs", "{img_size: 64}", "--depth", "1"]) == 0
    assert "blocks" in capsys.readouterr().out


@pytest.mark.parametrize("args,message", [
    (["--input-size", "3", "0", "0"], "--input-size 3 0 0: every size must be >= 1"),
    (["--depth", "-1"], "--depth -1: give a depth >= 0"),
    (["--model-kwargs", "[1"], "--model-kwargs '[1' is not valid YAML"),
    (["--model-kwargs", "{widht: 3}"], "bad --model-kwargs"),
    (["--match", "layr9"], "matched no module"),
])
def test_layers_errors(capsys, args, message):
    assert main(["layers", "tinynet:make", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("plugdrop layers: ") and message in err and err.count("\n") == 1


def test_layers_suggests_timm_names(capsys):
    assert main(["layers", "resnet_18"]) == 2
    assert "did you mean resnet18" in capsys.readouterr().err


def test_layers_marks_residual_branches(capsys):
    assert main(["layers", "resnet10t", "--input-size", "3", "32", "32", "--residual",
                 "--depth", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "R = residual branch" in out[0]
    marked = [line.split()[1] for line in out[1:] if line[:2].strip() == "R"]
    assert marked and all(name.startswith("layer") for name in marked)


@pytest.mark.parametrize("depth,counted", [
    ("2", "0 shown, 8 deeper than --depth 2"), ("3", "8"), (None, "8")])
def test_layers_counts_what_it_lists(capsys, depth, counted):
    args = ["layers", "resnet18", "--input-size", "3", "32", "32", "--residual",
            "--match", "residual:", *(["--depth", depth] if depth else [])]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    picked = [line for line in out[1:] if line.startswith("*")]
    residual = [line for line in out[1:] if line[1:2] == "R"]
    assert f"* = picked by 'residual:' ({counted})" in out[0]
    assert f"R = residual branch ({counted}: select them with 'residual:')" in out[0]
    assert len(picked) == len(residual) == int(counted.split()[0])
