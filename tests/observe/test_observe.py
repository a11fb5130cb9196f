"""capture, trace, watch and Grad-CAM against hand computations on small models."""

import io
import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import plugdrop as pd


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 6, 3, padding=1),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 3))


def _no_hooks(model):
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_capture_outputs_inputs_and_grads_equal_the_forward():
    m = _net()
    x = torch.randn(2, 3, 8, 8)
    h0 = m[0](x)
    h1 = m[1](h0)
    h2 = m[2](h1)
    with pd.capture(m, ["0", "2"]) as out, pd.capture(m, "2", what="input") as inp:
        y = m(x)
    assert torch.equal(out["0"], h0) and torch.equal(out["2"], h2)
    assert torch.equal(inp["2"], h1)
    assert not out["0"].requires_grad
    # gradients: compare with retain_grad on a manual forward
    h2r = m[2](m[1](m[0](x)))
    h2r.retain_grad()
    m[5](m[4](m[3](h2r))).square().sum().backward()
    with pd.capture(m, "2", what="grad", to_cpu=True) as grads:
        m(x).square().sum().backward()
    assert torch.allclose(grads["2"], h2r.grad)
    assert _no_hooks(m) and len(pd.summary(m)) == 0 and torch.equal(m(x), y)


def test_capture_all_calls_of_a_shared_module():
    shared = nn.Linear(3, 3)
    m = nn.Sequential(shared, nn.ReLU(), shared)
    x = torch.randn(2, 3)
    with pd.capture(m, "0", all_calls=True) as out:
        m(x)
    assert len(out["0"]) == 2
    assert torch.equal(out["0"][0], shared(x))
    assert torch.equal(out["0"][1], shared(F.relu(shared(x))))


def test_capture_bad_what():
    with pytest.raises(ValueError, match="what must be"):
        with pd.capture(_net(), "0", what="weights"):
            pass


def test_trace_order_of_a_known_network(tmp_path):
    m = _net()
    with pd.trace(m, exclude="") as t:
        m(torch.randn(2, 3, 8, 8)).sum().backward()
    order = [(e["phase"], e["module"]) for e in t.events]
    forward = [("forward", str(i)) for i in range(6)]
    backward = [("backward", str(i)) for i in reversed(range(6))]
    assert order == forward + backward
    assert t.events[2]["type"] == "Conv2d" and t.events[2]["shapes"] == [[2, 6, 8, 8]]
    assert "backward" in str(t) and "AdaptiveAvgPool2d" in str(t)
    lines = t.write_jsonl(tmp_path / "t.jsonl").read_text().splitlines()
    assert [json.loads(line)["module"] for line in lines] == [m for _, m in order]
    assert _no_hooks(m)


def test_watch_statistics_match_direct_computation():
    m = _net().train()
    xs = [torch.randn(4, 3, 8, 8) for _ in range(3)]
    means, stds, zeros, norms = [], [], [], []
    for x in xs:
        h = m[1](m[0](x))
        h.retain_grad()
        m[5](m[4](m[3](m[2](h)))).sum().backward()
        means.append(h.mean())
        stds.append(h.std())
        zeros.append((h == 0).float().mean())
        norms.append(h.grad.norm())
    w = pd.watch(m, "1")
    for x in xs:
        m(x).sum().backward()
    d = w.as_dict()
    assert d["1/act_mean"] == pytest.approx(torch.stack(means).mean().item(), rel=1e-5)
    assert d["1/act_std"] == pytest.approx(torch.stack(stds).mean().item(), rel=1e-5)
    assert d["1/act_zero_frac"] == pytest.approx(torch.stack(zeros).mean().item(), rel=1e-5)
    assert d["1/grad_norm"] == pytest.approx(torch.stack(norms).mean().item(), rel=1e-4)
    m.eval()
    with torch.no_grad():
        m(xs[0])  # eval forwards are not counted
    assert w.as_dict(reset=True)["1/act_mean"] == pytest.approx(d["1/act_mean"])
    assert w.as_dict() == {}
    w.remove()
    assert _no_hooks(m)


def test_a_watch_continues_from_its_state_dict_exactly():
    """What a checkpoint in the middle of an epoch keeps: the running sums, so that a watch
    resumed halfway reports the means an uninterrupted one does, bit for bit."""
    m = _net().train()
    xs = [torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    whole = pd.watch(m, "1")
    for x in xs:
        m(x).sum().backward()
    want = whole.as_dict()
    whole.remove()
    first = pd.watch(m, "1")
    for x in xs[:2]:
        m(x).sum().backward()
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    first.remove()
    second = pd.watch(m, "1")
    buf.seek(0)
    second.load_state_dict(torch.load(buf, weights_only=True))
    for x in xs[2:]:
        m(x).sum().backward()
    assert second.as_dict() == want
    second.remove()
    with pytest.raises(ValueError, match="Watch.state_dict"):
        second.load_state_dict({"steps": 3})


def test_watch_measures_the_drop_fraction_next_to_the_scheduled_p():
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU()).train()
    h = pd.attach(m, "0", pd.DropBlock(pd.linear(0.0, 0.3, steps=2), 3))
    h.step(2)
    with pd.watch(m, "0") as w:
        for _ in range(20):
            m(torch.randn(16, 3, 14, 14))
        d = w.as_dict()
        assert d["0/p"] == pytest.approx(0.3)
        assert abs(d["0/drop_frac"] - 0.3) < 0.02
        assert "drop_frac" in w.table() and "0.3" in w.table()
        assert len(pd.summary(m)) == 3  # the transform and the two watch hooks
    assert len(pd.summary(m)) == 1


def test_gradcam_matches_a_manual_computation_in_eval_mode():
    m = _net().eval()
    x = torch.randn(3, 3, 8, 8)
    for p in m.parameters():
        p.grad = None
    cam = pd.gradcam(m, x, "2")
    assert all(p.grad is None for p in m.parameters())  # .grad untouched
    # by hand
    act = m[2](m[1](m[0](x)))
    logits = m[5](m[4](m[3](act)))
    cls = logits.argmax(1)
    (g,) = torch.autograd.grad(logits.gather(1, cls.view(-1, 1)).sum(), act)
    manual = F.relu((g.mean((2, 3), keepdim=True) * act).sum(1))
    manual = (manual - manual.flatten(1).min(1).values.view(-1, 1, 1))
    manual = manual / manual.flatten(1).max(1).values.view(-1, 1, 1).clamp(min=1e-12)
    assert cam.shape == (3, 8, 8) and cam.min() >= 0 and cam.max() <= 1
    assert torch.allclose(cam, manual.detach(), atol=1e-5)
    other = pd.gradcam(m, x, "2", target=(cls + 1) % 3)
    assert not torch.allclose(other, cam)
    assert _no_hooks(m)
    with pytest.raises(ValueError, match="needs one layer"):
        pd.gradcam(m, x, "*")


def test_gradcam_on_timm_and_save_overlays(tmp_path):
    timm = pytest.importorskip("timm")
    model = timm.create_model("resnet18", pretrained=False, num_classes=4).eval()
    x = torch.randn(2, 3, 64, 64)
    cam = pd.gradcam(model, x, "layer4")
    assert cam.shape == (2, 64, 64) and torch.isfinite(cam).all()
    path = pd.save_gradcam(tmp_path / "cam.png", x, cam, titles=["a", "b"])
    assert path.read_bytes()[:4] == b"\x89PNG"
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32,
                            num_classes=4).eval()
    cam = pd.gradcam(vit, torch.randn(2, 3, 32, 32), "blocks.11", layout="tokens")
    assert cam.shape == (2, 32, 32)


def test_detach_removes_observers_too():
    m = _net()
    w = pd.watch(m, "0")
    assert pd.detach(m) == 1 and _no_hooks(m)
    w.remove()


def test_layers_lists_the_tree_with_outputs_and_marks_the_selection():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Sequential(nn.ReLU(), nn.Identity()),
                          nn.Flatten(), nn.Linear(4 * 8 * 8, 2))
    model.train()
    table = pd.layers(model, torch.zeros(1, 3, 8, 8), selector="1.*")
    assert model.training and not pd.summary(model)        # mode restored, nothing left
    assert [r.name for r in table] == ["", "0", "1", "1.0", "1.1", "2", "3"]
    assert [r.name for r in table if r.picked] == ["1.0", "1.1"]
    assert table[1].output == "Tensor(1, 4, 8, 8)" and table[1].depth == 1
    assert table[3].depth == 2 and all(r.called for r in table)
    text = str(table)
    assert "* " in text and "Tensor(1, 2)" in text
    assert [r.name for r in pd.layers(model, torch.zeros(1, 3, 8, 8), max_depth=1)] == \
        ["", "0", "1", "2", "3"]
    with pytest.raises(ValueError, match="max_depth"):
        pd.layers(model, torch.zeros(1, 3, 8, 8), max_depth=-1)
    with pytest.raises(ValueError):
        pd.layers(model, torch.zeros(1, 3, 8, 8), selector="nope")


def test_observers_are_listed_by_summary_but_are_not_handles():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3)).train()
    drop = pd.attach(model, "1", pd.Dropout(0.1))
    w = pd.watch(model, ["1", "2"])
    hs = pd.handles(model)
    assert len(hs) == 1 and hs[0].transform is drop.transform
    for h in hs:
        h.step()  # a watch would have no schedule to step
    rows = pd.summary(model)
    assert {r.kind for r in rows} == {"transform", "observer"}
    assert [(r.layer, r.kind) for r in rows if r.kind == "transform"] == [("1", "transform")]
    assert {r.layer for r in rows if r.kind == "observer"} == {"1", "2"}
    assert "(observer)" in str(rows)
    w.remove()
    assert [r.kind for r in pd.summary(model)] == ["transform"]


def test_layers_shows_the_default_layout_and_residual_branches():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Flatten(2), nn.Flatten(1))
    table = pd.layers(model, torch.zeros(1, 3, 8, 8))
    assert [r.layout for r in table[1:]] == [
        "channels_first", "channels_first (B, C, L)? or sequence / tokens: pass layout", "-"]
    timm = pytest.importorskip("timm")
    vit = timm.create_model("vit_tiny_patch16_224", img_size=32, depth=1, num_classes=3)
    x = torch.zeros(1, 3, 32, 32)
    pd.residual_branches(vit, x)
    rows = {r.name: r for r in pd.layers(vit, x)}
    assert rows["blocks.0"].layout == "tokens? (pass layout)"
    assert rows["blocks.0.drop_path1"].residual and not rows["blocks.0.attn"].residual
    assert "R" in str(pd.layers(vit, x, max_depth=3))


@pytest.mark.parametrize("target,message", [
    (99, r"target 99 is out of range: the model's output \(3, 3\) has 3 classes, so a target "
         r"is a class index in 0\.\.2$"),
    (-1, r"target -1 is out of range: .* in 0\.\.2; negative indices are not taken"),
    ([0, 3, 1], r"target\[1\] = 3 is out of range: .* 3 classes, .* in 0\.\.2$"),
    (torch.tensor([-1, 5, 0]), r"target\[0\] = -1, target\[1\] = 5 are out of range: .* in "
                               r"0\.\.2; negative"),
    (torch.tensor(7), r"target 7 is out of range"),
])
def test_gradcam_refuses_a_target_out_of_range(target, message):
    m = _net().eval()
    with pytest.raises(pd.SettingError, match=message):
        pd.gradcam(m, torch.randn(3, 3, 8, 8), "2", target=target)
    assert _no_hooks(m)


@pytest.mark.parametrize("target,error,message", [
    ([0, 1], pd.ShapeError, r"targets of shape \(2,\) for 3 images: give one class per image"),
    (torch.zeros(3, 1, dtype=torch.long), pd.ShapeError, r"shape \(3, 1\) for 3 images"),
    (1.0, TypeError, "an int, a list of ints or an integer tensor, got float 1.0"),
    (True, TypeError, "got bool True"),
    ([0, 1.5, 2], TypeError, r"got \[0, 1.5, 2\]"),
    (torch.tensor([0.0, 1.0, 2.0]), TypeError, "got a torch.float32 tensor"),
])
def test_gradcam_refuses_targets_of_the_wrong_kind(target, error, message):
    with pytest.raises(error, match=message):
        pd.gradcam(_net().eval(), torch.randn(3, 3, 8, 8), "2", target=target)


def test_gradcam_takes_targets_as_int_list_tuple_or_tensor():
    m, x = _net().eval(), torch.randn(3, 3, 8, 8)
    want = pd.gradcam(m, x, "2", target=[2, 2, 2])
    for same in (2, (2, 2, 2), torch.tensor(2), torch.tensor([2, 2, 2], dtype=torch.int32)):
        assert torch.equal(pd.gradcam(m, x, "2", target=same), want)


def test_save_gradcam_refuses_heatmaps_of_other_images(tmp_path):
    x = torch.randn(3, 3, 8, 8)
    cam = pd.gradcam(_net().eval(), x, "2")
    with pytest.raises(pd.ShapeError, match=r"images \(2, 3, 8, 8\) and heatmaps \(3, 8, 8\): "
                                            r"2 images but 3 heatmaps"):
        pd.save_gradcam(tmp_path / "a.png", x[:2], cam)
    with pytest.raises(pd.ShapeError, match=r"images \(3, 3, 8, 8\) and heatmaps \(3, 4, 4\): "
                                            r"the heatmaps are not the images' size \(8, 8\)"):
        pd.save_gradcam(tmp_path / "a.png", x, cam[:, :4, :4])
    with pytest.raises(pd.ShapeError, match=r"needs images \(B, C, H, W\) and heatmaps "
                                            r"\(B, H, W\), got images \(3, 8, 8\)"):
        pd.save_gradcam(tmp_path / "a.png", x[0], cam)
    with pytest.raises(pd.ShapeError, match="2 titles for 3 images"):
        pd.save_gradcam(tmp_path / "a.png", x, cam, titles=["a", "b"])
    assert not list(tmp_path.iterdir())  # nothing written


def test_layers_names_the_model_and_the_input_when_the_model_fails():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
    with pytest.raises(pd.PlugdropError, match=r"layers\(\) could not run Sequential on the "
                                               r"input \(1, 3, 10, 10\): RuntimeError: .*"
                                               r"give an input it takes") as info:
        pd.layers(model, torch.zeros(1, 3, 10, 10))
    assert isinstance(info.value.__cause__, RuntimeError)
    assert _no_hooks(model) and model.training  # nothing left behind
    assert len(pd.layers(model, torch.zeros(1, 3, 8, 8))) == 4


def test_save_gradcam_writes_into_a_file_object():
    """What a caller that writes files its own way (the runner's one writer) uses."""
    import io

    buf = io.BytesIO()
    got = pd.save_gradcam(buf, torch.rand(2, 3, 8, 8), torch.rand(2, 8, 8), titles=["a", "b"])
    assert got is buf and buf.getvalue().startswith(b"\x89PNG\r\n\x1a\n")
