"""plugdrop layers on models that fail: a model's own error on the given input, and models
that would download weights, are one line (exit status 2, no traceback) naming the model and
the fix; torchvision factories build offline."""

from __future__ import annotations

import pytest
import torch

from plugdrop.cli import main


def _one_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.startswith("plugdrop layers: ") and captured.err.count("\n") == 1, \
        captured.err
    assert "Traceback" not in captured.err and not captured.out
    return captured.err


def test_a_vit_at_another_size_says_how_to_build_it_for_that_size(capsys):
    pytest.importorskip("timm")
    assert main(["layers", "vit_tiny_patch16_224", "--input-size", "3", "64", "64"]) == 2
    err = _one_line(capsys)
    assert "model 'vit_tiny_patch16_224' fails on the input (1, 3, 64, 64)" in err
    assert "AssertionError: Input height (64) doesn't match model (224)" in err
    assert "--model-kwargs '{img_size: 64}'" in err and "--input-size 3 224 224" in err
    # the fix keeps the other model kwargs, and works
    args = ["layers", "vit_tiny_patch16_224", "--input-size", "3", "64", "96", "--depth", "1"]
    assert main([*args, "--model-kwargs", "{depth: 1}"]) == 2
    err = _one_line(capsys)
    fix = "{depth: 1, img_size: [64, 96]}"
    assert f"--model-kwargs '{fix}'" in err
    assert main([*args, "--model-kwargs", fix]) == 0
    assert "blocks" in capsys.readouterr().out


def test_a_model_given_other_channels_says_how_many_it_takes(capsys):
    assert main(["layers", "tinynet:make", "--input-size", "1", "16", "16"]) == 2
    err = _one_line(capsys)
    assert "model 'tinynet:make' fails on the input (1, 1, 16, 16) (--input-size 1 16 16)" in err
    assert "RuntimeError" in err and "it takes 3 input channels: --input-size 3 16 16" in err


@pytest.mark.slow
def test_a_torchvision_detection_model_builds_offline(capsys, monkeypatch):
    pytest.importorskip("torchvision")

    def no_download(*args, **kwargs):
        raise AssertionError(f"plugdrop layers asked for weights: {args}")

    # its backbone's weights download by default: weights_backbone=None is passed
    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", no_download)
    name = "torchvision.models.detection:fasterrcnn_mobilenet_v3_large_fpn"
    assert main(["layers", name, "--input-size", "3", "64", "64", "--depth", "1"]) == 0
    captured = capsys.readouterr()
    assert "FasterRCNN" in captured.out and "backbone" in captured.out and not captured.err


def test_a_download_asked_for_is_refused_in_one_line(capsys, monkeypatch, tmp_path):
    pytest.importorskip("torchvision")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))  # no weights cached
    before = torch.hub.download_url_to_file
    assert main(["layers", "torchvision.models:resnet18", "--model-kwargs",
                 "{weights: DEFAULT}"]) == 2
    err = _one_line(capsys)  # torch's "Downloading: ..." line is not shown either
    assert "model 'torchvision.models:resnet18' tried to download while being built " \
           "(https://download.pytorch.org/models/resnet18" in err
    assert "plugdrop layers never downloads; --model-kwargs asks for weights (weights)" in err
    assert torch.hub.download_url_to_file is before and not list(tmp_path.rglob("*.pth"))


def test_a_failed_download_is_one_line(capsys, monkeypatch, tmp_path):
    (tmp_path / "fetching.py").write_text(
        "import urllib.error\n"
        "def make():\n"
        "    raise urllib.error.URLError('[Errno -2] Name or service not known')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["layers", "fetching:make"]) == 2
    err = _one_line(capsys)
    assert "model 'fetching:make' tried to download while being built (URLError: <urlopen " \
           "error [Errno -2] Name or service not known>)" in err
    assert "never downloads; build it without pretrained weights" in err


def test_a_model_that_cannot_be_built_is_one_line(capsys, monkeypatch, tmp_path):
    (tmp_path / "strict.py").write_text(
        "def make(size=3):\n"
        "    assert size > 0, f'size must be positive, got {size}'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["layers", "strict:make", "--model-kwargs", "{size: -1}"]) == 2
    err = _one_line(capsys)
    assert "model 'strict:make' could not be built with --model-kwargs '{size: -1}': " \
           "AssertionError: size must be positive, got -1" in err


def test_a_torchvision_name_without_its_module_is_named_in_full(capsys):
    pytest.importorskip("timm")
    pytest.importorskip("torchvision")
    assert main(["layers", "fasterrcnn_mobilenet_v3_large_fpn"]) == 2
    assert "a torchvision one: plugdrop layers torchvision.models.detection:" \
           "fasterrcnn_mobilenet_v3_large_fpn" in _one_line(capsys)



def test_a_factory_that_builds_no_module_is_one_line(capsys):
    """``plugdrop layers os:getcwd``: the factory returns a string, not a model."""
    assert main(["layers", "os:getcwd"]) == 2
    assert _one_line(capsys) == ("plugdrop layers: model 'os:getcwd': the factory returned "
                                 "str, not a torch.nn.Module; give a function that builds the "
                                 "model\n")
