"""A training step with attachments on timm models of several families and layouts."""

import copy

import pytest
import torch

import plugdrop as pd

timm = pytest.importorskip("timm")

# (model name, create kwargs, input size, selector, transform factory)
CASES = [
    ("resnet18", {}, 64, "layer3.*", lambda: pd.DropBlock(0.1, block_size=3)),
    ("resnet18d", {}, 64, "layer2.*", lambda: pd.DropBlock(0.1, block_size=3)),
    ("densenet121", {}, 64, "features.denseblock3",
     lambda: pd.DropBlock(0.1, block_size=2, shared_channels=True)),
    ("deit_tiny_distilled_patch16_224", {"img_size": 64}, 64, "blocks.*",
     lambda: pd.DropBlock(0.1, block_size=2, layout="tokens")),
    ("efficientnet_b0", {}, 64, "blocks.5.*", lambda: pd.DropBlock(0.1, block_size=3)),
    ("convnext_atto", {}, 64, "stages.2.blocks.*", lambda: pd.Dropout2d(0.1)),
    ("regnetx_002", {}, 64, "s3.*", lambda: pd.DropBlock(0.1, block_size=3, shared_channels=True)),
    ("mobilenetv3_small_050", {}, 64, "blocks.*.*", lambda: pd.GaussianNoise(0.05)),
    ("vit_tiny_patch16_224", {"img_size": 64}, 64, "blocks.*",
     lambda: pd.DropBlock(0.1, block_size=2, layout="tokens")),
    ("vit_tiny_patch16_224", {"img_size": 64}, 64, "blocks.*.mlp", lambda: pd.DropPath(0.1)),
    ("swin_tiny_patch4_window7_224", {"img_size": 112, "depths": (1, 1, 1, 1)}, 112,
     "layers.*", lambda: pd.DropBlock(0.1, block_size=2, layout="channels_last")),
]


@pytest.mark.parametrize("name,kwargs,size,selector,make", CASES,
                         ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_training_step(name, kwargs, size, selector, make):
    model = timm.create_model(name, pretrained=False, num_classes=4, **kwargs)
    x = torch.randn(2, 3, size, size)
    y = torch.tensor([0, 3])
    bare = copy.deepcopy(model)
    with torch.no_grad():
        ref_eval = model.eval()(x)
        torch.manual_seed(1)
        ref_train = bare.train()(x)
    h = pd.attach(model, selector, make())
    assert h.layers
    with torch.no_grad():
        assert torch.equal(model.eval()(x), ref_eval)  # eval: exactly the bare model
        torch.manual_seed(1)
        assert not torch.equal(model.train()(x), ref_train)  # train: the transform acts
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    h.bind(opt)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    opt.step()
    assert h.step_count == 1
    h.remove()
    assert len(pd.summary(model)) == 0


def test_gradient_clip_on_timm_params():
    model = timm.create_model("resnet18", pretrained=False, num_classes=4)
    pd.attach(model, "layer4.*", pd.ClipGradNorm(1e-3), where="params")
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    for p in model.layer4.parameters():
        assert p.grad.norm() <= 1e-3 + 1e-7


def test_default_layout_error_names_the_fix_for_vit_and_swin():
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64,
                            num_classes=4).train()
    pd.attach(vit, "blocks.0", pd.DropBlock(0.1, 2))
    with pytest.raises(ValueError, match="layout='tokens'") as e:
        vit(torch.randn(2, 3, 64, 64))
    assert "blocks.0" in str(e.value) and "(2, 17, 192)" in str(e.value)
    swin = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=112,
                             depths=(1, 1, 1, 1), num_classes=4).train()
    pd.attach(swin, "layers.0", pd.DropBlock(0.1, 2))
    with pytest.raises(ValueError, match="layout='channels_last'"):
        swin(torch.randn(2, 3, 112, 112))
