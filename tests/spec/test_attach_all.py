"""pd.attach_all: attachments written as data (YAML file or text, Python mappings) -> one group
handle, with the runner's parser and its file:line:column messages."""

import io
import re
import textwrap
import warnings

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from conftest import Net

SPEC = textwrap.dedent("""\
    - layers: "layer1.*.conv"
      transform: DropBlock
      block_size: 3
      p: {schedule: linear, start: 0.0, end: 0.2}
    - {layers: "layer2.*.conv", transform: Dropout2d, p: 0.1}
    - {layers: "", transform: ClipGradNorm, max_norm: 1.0, where: params}
    """)

DATA = [
    {"layers": "layer1.*.conv", "transform": "DropBlock", "block_size": 3,
     "p": {"schedule": "linear", "start": 0.0, "end": 0.2}},
    {"layers": "layer2.*.conv", "transform": "Dropout2d", "p": 0.1},
    {"layers": "", "transform": "ClipGradNorm", "max_norm": 1.0, "where": "params"},
]


def _by_hand(model, steps):
    return [pd.attach(model, "layer1.*.conv", pd.DropBlock(pd.linear(0.0, 0.2, steps=steps),
                                                           block_size=3)),
            pd.attach(model, "layer2.*.conv", pd.Dropout2d(0.1)),
            pd.attach(model, "", pd.ClipGradNorm(1.0), where="params")]


def _train_step(model, seed, opt=None):
    torch.manual_seed(seed)
    x = torch.randn(4, 3, 8, 8)
    out = model(x)
    out.square().mean().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    if opt is not None:
        opt.step()
    model.zero_grad()
    return out.detach(), grads


@pytest.mark.parametrize("form", ["text", "file", "data", "parsed"])
def test_every_form_attaches_what_pd_attach_would(tmp_path, form):
    path = tmp_path / "reg.yaml"
    path.write_text(SPEC)
    spec = {"text": SPEC, "file": str(path), "data": DATA, "parsed": pd.parse_spec(SPEC)}[form]
    a, b = Net().train(), Net().train()
    b.load_state_dict(a.state_dict())
    group = pd.attach_all(a, spec, steps=100)
    hand = _by_hand(b, 100)
    assert [repr(h.transform) for h in group] == [repr(h.transform) for h in hand]
    assert [h.layers for h in group] == [h.layers for h in hand]
    group.step(40)
    for h in hand:
        h.step(40)
    (ya, ga), (yb, gb) = _train_step(a, 3), _train_step(b, 3)
    assert torch.equal(ya, yb)
    assert all(torch.equal(x, y) for x, y in zip(ga, gb))
    assert group.values()["DropBlock@layer1.*.conv/p"] == pytest.approx(0.08)


def test_a_path_object_and_a_single_mapping(tmp_path):
    path = tmp_path / "one.yml"
    path.write_text("{layers: 'layer1.*', transform: DropPath, p: 0.1}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pd.NotResidualWarning)
        assert [s.transform for s in pd.parse_spec(path)] == ["DropPath"]
    assert [s.transform for s in pd.parse_spec(DATA[1])] == ["Dropout2d"]


def test_the_runner_reads_a_variant_with_the_same_parser(tmp_path):
    from plugdrop.ablate.config import loads

    cfg_text = "model: resnet18\nvariants:\n  base: []\n  reg:\n" + textwrap.indent(SPEC, "    ")
    cfg = loads(cfg_text, "cfg.yaml")
    runner = cfg.variant("reg").attachments
    assert all(type(a) is pd.AttachmentSpec for a in runner)
    assert [a.describe() for a in runner] == [s.describe() for s in pd.parse_spec(SPEC)]
    assert [repr(a.build(50)) for a in runner] == [repr(s.build(50)) for s in pd.parse_spec(SPEC)]


@pytest.mark.parametrize("text, where, says", [
    ("- {layers: 'layer1.*', transform: DropBlok, p: 0.1}", "<spec>:1:24",
     "unknown transform 'DropBlok' (did you mean 'DropBlock'?)"),
    ("- layers: 'layer1.*'\n  transform: DropBlock\n  blok_size: 3", "<spec>:3:3",
     "DropBlock has no setting 'blok_size' (did you mean 'block_size'?)"),
    ("- layers: 'layer1.*'\n  transform: DropBlock\n  p: {schedule: linear, stop: 0.1}",
     "<spec>:3:25", "the linear schedule has no setting 'stop'"),
    ("- layers: 'layer1.*'\n  transform: DropBlock\n  p: {schedule: linnear, end: 0.1}",
     "<spec>:3:3", "unknown schedule 'linnear' (did you mean 'linear'?)"),
    ("- layers: 'layer1.*'\n  transform: DropBlock\n  p: 1.5", "<spec>:3:3",
     "bad DropBlock settings: p must be a probability in [0, 1)"),
    ("- {layers: 'layer1.*', transform: DropBlock, where: outside}", "<spec>:1:46",
     "where must be output, input or params"),
    ("- {transform: DropBlock}", "<spec>:1:3", "attachment without 'layers'"),
    ("- [layers, DropBlock]", "<spec>:1:3", "each attachment is a mapping"),
    ("layers: [x", "<spec>:1:11", "not valid YAML"),
    ("- {layers: a, transform: DropPath, p: 0.1}\n- {layers: a, transform: DropPath, layers: b}",
     "<spec>:2:36", "duplicate key 'layers' (first at <spec>:2:4)"),
    ("- {layers: '', transform: DropBlock, p: 0.1, where: params}", "<spec>:1:3",
     "where: params takes a gradient transform"),
    ("- {layers: a, transform: ManifoldMixup}\n- {layers: b, transform: ManifoldMixup}",
     "<spec>:2:3", "the spec has 2 ManifoldMixup attachments; use one with a list of layers"),
    ("42", "<spec>", "the spec must be a list of attachments"),
])
def test_mistakes_name_their_place(text, where, says):
    with pytest.raises(pd.SpecError) as e:
        pd.attach_all(Net(), text, steps=10)
    assert str(e.value).startswith(where + ": ") and says in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


def test_mistakes_in_python_data_and_files_name_their_place(tmp_path):
    with pytest.raises(pd.SpecError, match=r"^spec\[1\]\.p: bad Dropout2d settings"):
        pd.parse_spec([DATA[0], {**DATA[1], "p": -1}])
    with pytest.raises(pd.SpecError, match=r"^reg\[0\]\.transform: unknown transform 'X'"):
        pd.parse_spec([{"layers": "a", "transform": "X"}], source="reg")
    path = tmp_path / "reg.yaml"
    path.write_text("- layers: a\n  transform: DropPath\n  p: {schedule: cosine, end: 2}\n")
    with pytest.raises(pd.SpecError, match=rf"^{path}:3:3: bad cosine schedule .* missing .* 'start'"):
        pd.parse_spec(str(path))
    with pytest.raises(pd.SpecError, match=r"no such file; give the path of a YAML file"):
        pd.parse_spec(str(tmp_path / "missing.yaml"))
    with pytest.raises(pd.SpecError, match=r"is a folder"):
        pd.parse_spec(tmp_path)


def test_a_schedule_without_steps_needs_attach_alls_steps():
    text = "- {layers: 'layer1.*.conv', transform: DropBlock, p: {schedule: linear, start: 0, end: 0.1}}"
    with pytest.raises(pd.SpecError, match=r"^<spec>:1:3: p: the linear schedule needs "
                                           r"'steps:'.*pass steps= to attach_all"):
        pd.attach_all(Net(), text)
    g = pd.attach_all(Net(), text.replace("end: 0.1", "end: 0.1, steps: 10"))
    g.step(5)
    assert g.values() == {"DropBlock@layer1.*.conv/p": pytest.approx(0.05)}
    with pytest.raises(pd.SettingError, match="steps="):
        pd.attach_all(Net(), text, steps=0)


def test_all_or_nothing_and_attach_errors_name_the_attachment():
    model = Net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    bad = DATA[:2] + [{"layers": "layer9.*", "transform": "Dropout2d", "p": 0.1}]
    with pytest.raises(pd.SelectorError, match=r"^spec\[2\]: selector 'layer9\.\*' matched no"):
        pd.attach_all(model, bad, steps=10)
    assert len(pd.summary(model)) == 0 and pd.handles(model) == []
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_bind_steps_every_schedule_with_the_optimizer():
    model = Net().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    group = pd.attach_all(model, SPEC, steps=10).bind(opt)
    for i in range(4):
        _train_step(model, i, opt)
    assert [h.step_count for h in group] == [4, 4, 4] and group.step_count == 4
    assert group.calls["DropBlock@layer1.*.conv"] == 4 * 2
    group.unbind()
    _train_step(model, 9, opt)
    assert group.step_count == 4


def test_state_dict_resumes_the_ramp_through_a_safe_load():
    a = pd.attach_all(Net(), SPEC, steps=100)
    a.step(37)
    buf = io.BytesIO()
    torch.save({"plugdrop": a.state_dict()}, buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)["plugdrop"]
    b = pd.attach_all(Net(), SPEC, steps=100)
    b.load_state_dict(state)
    assert b.values() == a.values() and b.step_count == 37
    other = pd.attach_all(Net(), DATA[:2], steps=100)
    with pytest.raises(pd.SettingError, match=r"saved state is of other attachments"):
        other.load_state_dict(state)
    with pytest.raises(pd.SettingError, match=r"expects the mapping"):
        b.load_state_dict({"step": 3})


def test_remove_and_context_manager_restore_the_model_exactly():
    model = Net().train()
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8)
    ref = model(x)
    with pd.attach_all(model, SPEC, steps=10) as group:
        assert group.attached and len(group.summary()) == 5
        assert not torch.equal(model(x), ref)
    assert not group.attached and len(pd.summary(model)) == 0
    assert torch.equal(model(x), ref)
    group.remove()  # idempotent


def test_summary_shows_only_the_groups_rows_and_labels_are_unique():
    model = Net()
    mine = pd.attach_all(model, [DATA[1], {**DATA[1], "p": 0.2, "layers": "layer1.*.conv"}])
    pd.attach(model, "stem", pd.Dropout2d(0.3))
    assert {r.layer for r in mine.summary()} == {"layer2.0.conv", "layer2.1.conv",
                                                  "layer1.0.conv", "layer1.1.conv"}
    twice = pd.attach_all(model, [DATA[0], {**DATA[0], "where": "input"}], steps=5)
    assert twice.labels == ["DropBlock@layer1.*.conv", "DropBlock@layer1.*.conv#2"]
    assert "AttachmentGroup([DropBlock@layer1.*.conv" in repr(twice)


def test_mixing_transforms_give_their_loss():
    model = Net().train()
    group = pd.attach_all(model, "- {layers: 'layer1', transform: ManifoldMixup, alpha: 1.0, prob: 1.0}")
    assert group.mixes
    torch.manual_seed(0)
    x, y = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 3])
    logits = model(x)
    loss = group.loss(nn.functional.cross_entropy, logits, y)
    assert torch.allclose(loss, pd.mixed_loss(list(group), nn.functional.cross_entropy, logits, y))
    assert group[0].lam is not None


def test_wrong_types_are_type_errors():
    with pytest.raises(TypeError, match="needs a torch.nn.Module"):
        pd.attach_all("model", DATA)


def test_values_average_a_per_layer_setting_over_its_layers():
    group = pd.attach_all(Net(), [{"layers": "layer*.*.conv", "transform": "Dropout2d",
                                   "p": {"schedule": "by_depth", "start": 0.0, "end": 0.3}}])
    per_layer = [group[0].transform.values(layer)["p"] for layer in group[0].layers]
    assert per_layer == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert group.values() == {"Dropout2d@layer*.*.conv/p": pytest.approx(0.15)}


def test_example_input_finds_the_residual_branches_for_residual_selectors():
    model = Net()
    x = torch.randn(2, 3, 8, 8)
    group = pd.attach_all(model, "- {layers: 'residual:layer2.*', transform: DropPath, p: 0.1}",
                          example_input=x)
    assert group[0].layers == [n for n in pd.residual_branches(Net(), x)
                               if n.startswith("layer2.")]
    assert group[0].layers  # Net's blocks are x + act(bn(conv(x)))


def test_bind_goes_through_an_optimizer_wrapper():
    class Wrapper:  # as Accelerate's AcceleratedOptimizer and Lightning's LightningOptimizer
        def __init__(self, optimizer):
            self.optimizer = optimizer

    model = Net().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    group = pd.attach_all(model, DATA[:2], steps=10).bind(Wrapper(opt))
    _train_step(model, 0, opt)
    assert group.step_count == 1
    with pytest.raises(TypeError, match="bind\\(\\) takes a torch.optim.Optimizer"):
        group.bind(Wrapper("not an optimizer"))


@pytest.mark.parametrize("spec, says", [
    ("", "the spec must be a list of attachments"),
    ("[]", None),
    ([{"layers": "layer1.*", "transform": None}], "unknown transform None"),
    ([{"layers": 3, "transform": "Dropout"}], "layers must be a selector"),
    ([{"layers": "layer1.*", "transform": "Dropout", "p": "0.1"}], "bad Dropout settings"),
])
def test_empty_and_wrongly_typed_values(spec, says):
    if says is None:
        assert len(pd.attach_all(Net(), spec)) == 0
        return
    with pytest.raises(pd.SpecError, match=re.escape(says)):
        pd.attach_all(Net(), spec)


class _Parent(nn.Module):
    """A model that holds the regularized network as a child, as a LightningModule does."""

    def __init__(self):
        super().__init__()
        self.net = Net()


def test_summary_of_a_parent_shows_each_layers_own_value():
    parent = _Parent()
    group = pd.attach_all(parent.net, [{"layers": "layer*.*.conv", "transform": "Dropout2d",
                                        "p": {"schedule": "by_depth", "start": 0.0,
                                              "end": 0.3}}])
    own = {f"net.{layer}": group[0].transform.values(layer)["p"] for layer in group[0].layers}
    assert list(own.values()) == pytest.approx([0.0, 0.1, 0.2, 0.3])
    rows = pd.summary(parent)
    assert {r.layer: r.values["p"] for r in rows} == pytest.approx(own)
    assert [r.values for r in group.summary()] == [r.values for r in rows]


WARM = {"layers": "layer1.*.conv", "transform": "DropBlock", "block_size": 3,
        "p": {"schedule": "cosine", "start": 0.05, "end": 0.15, "warmup": 2}}


def test_a_warmup_fits_inside_the_trainings_steps():
    group = pd.attach_all(Net(), [WARM], steps=12)
    values = []
    for _ in range(13):
        values.append(group.values()["DropBlock@layer1.*.conv/p"])
        group.step()
    # 0 -> 0.05 over the 2 warm-up steps, then the half-cosine to 0.15 at step 12, not 14
    assert values[:3] == pytest.approx([0.0, 0.025, 0.05])
    assert values[7] == pytest.approx(0.1) and values[12] == pytest.approx(0.15)
    assert repr(group[0].transform) == ("DropBlock(p=warmup(cosine(0.05, 0.15, steps=10), "
                                        "steps=2, start=0), block_size=3)")


def test_a_schedule_with_its_own_steps_keeps_its_warmup_in_front():
    group = pd.attach_all(Net(), [{**WARM, "p": {**WARM["p"], "steps": 12}}], steps=100)
    assert repr(group[0].transform) == (
        "DropBlock(p=warmup(cosine(0.05, 0.15, steps=12), steps=2, start=0), block_size=3)")


def test_a_warmup_schedule_leaves_the_rest_of_the_training_to_what_it_warms_up():
    spec = [{"layers": "layer1.*.conv", "transform": "Dropout2d",
             "p": {"schedule": "warmup", "steps": 4,
                   "value": {"schedule": "linear", "start": 0.1, "end": 0.2}}}]
    group = pd.attach_all(Net(), spec, steps=12)
    assert repr(group[0].transform) == (
        "Dropout2d(p=warmup(linear(0.1, 0.2, steps=8), steps=4, start=0))")
    group.step(12)
    assert group.values()["Dropout2d@layer1.*.conv/p"] == pytest.approx(0.2)


def test_a_warmup_as_long_as_the_training_says_so():
    with pytest.raises(pd.SpecError, match=r"^spec\[0\]: p: the cosine schedule's warmup of 12 "
                                           r"steps leaves none of the training's 12 steps"):
        pd.attach_all(Net(), [{**WARM, "p": {**WARM["p"], "warmup": 12}}], steps=12)
    # a long warm-up is checked against the training's length, not against a guess of it
    long = pd.parse_spec([{**WARM, "p": {**WARM["p"], "warmup": 5000}}])
    assert pd.attach_all(Net(), long, steps=20_000)[0].transform.p == 0.0


@pytest.mark.parametrize("text, where, says", [
    ("- {layer: 'layer1.*', transform: DropBlock}", "<spec>:1:4",
     "an attachment has no key 'layer' (did you mean 'layers'?)"),
    ("- layers: 'layer1.*'\n  transfrom: DropBlock\n  p: 0.1", "<spec>:2:3",
     "an attachment has no key 'transfrom' (did you mean 'transform'?)"),
])
def test_a_misspelled_attachment_key_gets_a_suggestion(text, where, says):
    with pytest.raises(pd.SpecError) as e:
        pd.attach_all(Net(), text, steps=10)
    assert str(e.value).startswith(where + ": ") and says in str(e.value), str(e.value)
