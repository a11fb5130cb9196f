"""plugdrop.ablate.model: model names and factories, model_kwargs, fine-tuning from a local
checkpoint (.pth and .safetensors), cache-only ``pretrained: true``."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import save_file

import _gen
from plugdrop.ablate.errors import ConfigError
from plugdrop.ablate.model import build_model, model_names


def one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def backbone_equal(model: torch.nn.Module, sd: dict[str, torch.Tensor], head: str) -> bool:
    own = model.state_dict()
    keys = [k for k in sd if not k.startswith(head + ".")]
    return bool(keys) and all(torch.equal(own[k], sd[k]) for k in keys)


@pytest.fixture(scope="module")
def r10_1000() -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return timm.create_model("resnet10t", num_classes=1000).state_dict()


@pytest.fixture(scope="module")
def r10_5() -> dict[str, torch.Tensor]:
    torch.manual_seed(2)
    return timm.create_model("resnet10t", num_classes=5).state_dict()


# ----------------------------------------------------------------------------- names, kwargs

def test_timm_model_random_init():
    model = build_model("resnet10t", num_classes=3, model_kwargs={"drop_rate": 0.3})
    assert model.fc.out_features == 3 and model.drop_rate == 0.3
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 3)


def test_factory_model():
    model = build_model("_gen:tiny_net", num_classes=4, model_kwargs={"width": 6})
    assert model[-1].out_features == 4 and model[0].out_channels == 6
    tv = build_model("torchvision.models:resnet18", num_classes=3)
    assert tv.fc.out_features == 3


def test_a_torchvision_factory_never_downloads(monkeypatch):
    """A detector's backbone weights download by default: the runner asks for none (any
    download here would fail: there is no network, and it is refused below)."""
    import torch.hub

    def refuse(url, *args, **kwargs):
        raise AssertionError(f"tried to download {url}")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", refuse)
    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)
    det = build_model("torchvision.models.detection:fasterrcnn_mobilenet_v3_large_fpn",
                      num_classes=3)
    assert det.roi_heads.box_predictor.cls_score.out_features == 3


def test_model_names():
    assert "resnet18" in model_names("resnet1")
    assert all(n.startswith("resnet1") for n in model_names("resnet1"))


@pytest.mark.parametrize("name, kwargs, match", [
    ("resnet_18", None, "did you mean 'resnet18'"),
    ("torchvision.models.resnet18", None, "torchvision.models:resnet18"),
    ("torchvision.models:resnet_18", None, "did you mean 'resnet18'"),
    ("no_such_package_xyz:make", None, "cannot import no_such_package_xyz"),
    ("resnet18.nosuchtag", None, "no weights tag 'nosuchtag'"),
    ("resnet10t", {"drop_rat": 0.1}, "model_kwargs: resnet10t has no argument 'drop_rat'"),
    ("_gen:tiny_net", {"widht": 3}, "no argument 'widht'; did you mean 'width'"),
    ("resnet10t", {"num_classes": 4}, "num_classes is set by the runner"),
    ("resnet10t", [1], "expected a mapping"),
])
def test_model_errors(name, kwargs, match):
    with pytest.raises(ConfigError, match=match) as err:
        build_model(name, num_classes=3, model_kwargs=kwargs)
    one_line(err)


# ----------------------------------------------------------------------------- fine-tuning

@pytest.mark.parametrize("wrap", [None, "state_dict", "model"])
def test_finetune_pth_resets_head(tmp_path, r10_1000, wrap):
    path = tmp_path / "r10.pth"
    torch.save(r10_1000 if wrap is None else {wrap: r10_1000, "epoch": 3}, path)
    model = build_model("resnet10t", num_classes=3, pretrained=str(path))
    assert model.fc.out_features == 3
    assert backbone_equal(model, r10_1000, "fc")
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 3)


def test_finetune_safetensors_keeps_matching_head(tmp_path, r10_5):
    path = tmp_path / "r10.safetensors"
    save_file(r10_5, str(path))
    model = build_model("resnet10t", num_classes=5, pretrained=path)
    assert torch.equal(model.fc.weight, r10_5["fc.weight"])
    assert torch.equal(model.fc.bias, r10_5["fc.bias"])
    assert backbone_equal(model, r10_5, "fc")
    other = build_model("resnet10t", num_classes=3, pretrained=path)
    assert other.fc.out_features == 3 and backbone_equal(other, r10_5, "fc")


def test_finetune_factory(tmp_path):
    torch.manual_seed(3)
    src = _gen.tiny_net(num_classes=5, width=4).state_dict()
    path = tmp_path / "tiny.pth"
    torch.save({"state_dict": src}, path)
    model = build_model("_gen:tiny_net", num_classes=3, pretrained=str(path))
    assert model[-1].out_features == 3 and backbone_equal(model, src, "5")
    kept = build_model("_gen:tiny_net", num_classes=5, pretrained=str(path))
    assert torch.equal(kept[-1].weight, src["5.weight"])
    with pytest.raises(ConfigError, match=r"0.weight \(4, 3, 3, 3\) in the file vs \(8, 3, 3, 3\)"):
        build_model("_gen:tiny_net", num_classes=3, model_kwargs={"width": 8}, pretrained=str(path))
    with pytest.raises(ConfigError, match="pretrained: true is for timm models"):
        build_model("_gen:tiny_net", num_classes=3, pretrained=True)


def test_checkpoint_errors(tmp_path, r10_5):
    with pytest.raises(ConfigError, match="does not exist") as err:
        build_model("resnet10t", num_classes=3, pretrained=str(tmp_path / "missing.pth"))
    assert "missing.pth" in one_line(err)
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="cannot read") as err:
        build_model("resnet10t", num_classes=3, pretrained=str(junk))
    assert str(junk) in one_line(err)
    bad_st = tmp_path / "junk.safetensors"
    bad_st.write_bytes(b"\x00" * 16)
    with pytest.raises(ConfigError, match="cannot read"):
        build_model("resnet10t", num_classes=3, pretrained=str(bad_st))
    other = tmp_path / "r10.pth"
    torch.save(r10_5, other)
    with pytest.raises(ConfigError, match="does not fit model resnet14t") as err:
        build_model("resnet14t", num_classes=3, pretrained=str(other))
    assert str(other) in one_line(err) and "missing keys" in str(err.value)
    with pytest.raises(ConfigError, match="directory"):
        build_model("resnet10t", num_classes=3, pretrained=str(tmp_path))


# ----------------------------------------------------------------------------- pretrained: true

@pytest.fixture
def hub_dir(tmp_path, monkeypatch):
    old = torch.hub.get_dir()
    torch.hub.set_dir(str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))  # an empty HF cache
    yield tmp_path / "hub"
    torch.hub.set_dir(old)


def test_pretrained_true_without_cache(hub_dir):
    with pytest.raises(ConfigError, match="pretrained: /path/to/weights") as err:
        build_model("resnet10t", num_classes=3, pretrained=True)
    assert "nothing is downloaded" in one_line(err)


def test_pretrained_true_from_cache(hub_dir, r10_1000):
    from urllib.parse import urlparse

    url = timm.models.get_pretrained_cfg("resnet10t").url
    cached = hub_dir / "checkpoints" / Path(urlparse(url).path).name
    cached.parent.mkdir(parents=True)
    torch.save(r10_1000, cached)
    model = build_model("resnet10t", num_classes=3, pretrained=True)
    assert model.fc.out_features == 3 and backbone_equal(model, r10_1000, "fc")
