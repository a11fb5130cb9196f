"""plugdrop.integrations.lightning.Regularize with a real Lightning Trainer on CPU: one
callback attaches, steps per optimizer step (gradient accumulation respected), logs the values
each step used, takes everything off when fitting ends (the model saved whole loads without
plugdrop), serves a second fit on another module, and a fit killed in the middle of the ramp
resumes from ``last.ckpt`` with the same scheduled values, or, when the spec changed in
substance, at the trainer's step with a warning that says what changed."""

import csv
import warnings

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from conftest import Net
from no_plugdrop import load_without_plugdrop

L = pytest.importorskip("lightning.pytorch")
from plugdrop.integrations.lightning import Regularize, ResumeWarning  # noqa: E402

#: every test trains through the framework's own loop
pytestmark = pytest.mark.slow

SPEC = """\
- {layers: "layer1.*.conv", transform: DropBlock, block_size: 3,
   p: {schedule: linear, start: 0.0, end: 0.3}}
- {layers: "layer2.*.conv", transform: Dropout2d, p: {schedule: cosine, start: 0.2, end: 0.0}}
"""
# the same attachments written otherwise: a resumed fit reads them as the same
REFORMATTED = """\
- layers: layer1.*.conv
  transform: DropBlock
  p: {end: 0.3, start: 0, schedule: linear}
  block_size: 3
- layers: [layer2.*.conv]
  transform: Dropout2d
  p: {schedule: cosine, start: 0.2, end: 0}
  where: output
"""
P1, P2 = "DropBlock@layer1.*.conv/p", "Dropout2d@layer2.*.conv/p"


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = Net()

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Record(L.Callback):
    """What each training batch saw at its start, by (epoch, batch): the trainer's step, the
    group's step count and values, the module's attachments; and optionally a crash."""

    def __init__(self, crash_after=None):
        self.seen = {}
        self.crash_after = crash_after

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        reg = next(c for c in trainer.callbacks if isinstance(c, Regularize))
        self.seen[(trainer.current_epoch, batch_idx)] = (
            trainer.global_step, reg.group.step_count, reg.group.values(),
            reg.group.model is pl_module.net, pd.summary(pl_module))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.crash_after is not None and trainer.global_step >= self.crash_after:
            raise KeyboardInterrupt  # what a kill looks like to Lightning

    def by_step(self):
        return {s: v for s, _, v, _, _ in self.seen.values()}


def _loader(n=48, batch=4, dataset=None):
    g = torch.Generator().manual_seed(0)
    if dataset is None:
        dataset = torch.utils.data.TensorDataset(torch.randn(n, 3, 8, 8, generator=g),
                                                 torch.randint(0, 5, (n,), generator=g))
    return torch.utils.data.DataLoader(dataset, batch_size=batch)


def _trainer(tmp_path, callbacks, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kw.setdefault("max_epochs", 1)
        kw.setdefault("logger", L.loggers.CSVLogger(tmp_path))
        return L.Trainer(default_root_dir=tmp_path, accelerator="cpu", devices=1,
                         log_every_n_steps=1, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=callbacks, **kw)


def _fit(trainer, module, loader=None, **kw):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        warnings.filterwarnings("ignore", ".*KeyboardInterrupt.*")
        warnings.filterwarnings("ignore", ".*callbacks used to create the checkpoint.*")
        warnings.filterwarnings("ignore", ".*dataloader is not resumable.*")
        trainer.fit(module, _loader() if loader is None else loader, **kw)


def _rows(tmp_path):
    with open(tmp_path / "lightning_logs/version_0/metrics.csv") as f:
        return list(csv.DictReader(f))


def test_one_callback_ramps_over_the_fit_and_logs_the_values_in_use(tmp_path):
    reg, rec = Regularize(SPEC, module="net", watch="layer1.*.conv"), Record()
    module = Module()
    trainer = _trainer(tmp_path, [reg, rec], accumulate_grad_batches=2)
    _fit(trainer, module, _loader(n=96))
    # 24 batches, 2 per optimizer step: 12 steps, the ramp's length
    assert trainer.global_step == 12 and reg.group.step_count == 12
    steps = [s for s, *_ in rec.seen.values()]
    assert steps == [i // 2 for i in range(24)]
    p = [v[P1] for _, _, v, _, _ in rec.seen.values()]
    assert p[0] == 0.0 and p[-1] == pytest.approx(0.3 * 11 / 12)
    # every CSV row has the values its step's forward used, at its step (LearningRateMonitor's
    # rule): the row of step 0 has 0.0, no row has the 0.3 that no forward used
    used = rec.by_step()
    rows = [r for r in _rows(tmp_path) if r.get(f"plugdrop/{P1}")]
    assert [int(r["step"]) for r in rows] == list(range(12))
    for r in rows:
        s = int(r["step"])
        assert float(r[f"plugdrop/{P1}"]) == pytest.approx(used[s][P1])
        assert float(r[f"plugdrop/{P2}"]) == pytest.approx(used[s][P2])
        assert float(r["plugdrop/watch/layer1.0.conv/p"]) == pytest.approx(used[s][P1])
        assert r["plugdrop/watch/layer1.1.conv/grad_norm"] and r[
            "plugdrop/watch/layer1.0.conv/drop_frac"]
    # taken off when fitting ends, its counts kept
    assert reg.group.calls["DropBlock@layer1.*.conv"] == 24 * 2  # 2 layers, every batch
    assert not reg.group.attached and len(pd.summary(module)) == 0


DEPTH = """\
- {layers: "layer*.*.conv", transform: Dropout2d, p: {schedule: by_depth, start: 0.0, end: 0.3}}
- {layers: stem, transform: DropBlock, block_size: 3,
   p: {schedule: cosine, start: 0.0, end: 0.15, warmup: 2}}
"""


@pytest.fixture(scope="module")
def two_fits(tmp_path_factory):
    """One callback given two fits: 12 steps on one module, then 4 on another."""
    tmp = tmp_path_factory.mktemp("two")
    reg, first, second = Regularize(DEPTH, module="net"), Module(), Module()
    rec1, rec2 = Record(), Record()
    _fit(_trainer(tmp / "1", [reg, rec1], logger=False), first)
    after_first = reg.group.step_count, reg.group.values()
    _fit(_trainer(tmp / "2", [reg, rec2], logger=False, max_steps=4), second)
    return reg, (first, rec1, after_first), (second, rec2)


def test_a_warmup_ends_with_the_fit(two_fits):
    reg, (_, _, (steps, values)), _ = two_fits
    # cosine 0 -> 0.15 with warmup: 2 over a 12-step fit: the warm-up is inside the 12 steps
    assert steps == 12 and values["DropBlock@stem/p"] == pytest.approx(0.15)
    assert reg.group.step_count == 4 and reg.group.values()["DropBlock@stem/p"] == pytest.approx(
        0.15)


def test_one_callback_serves_a_second_fit_on_another_module(two_fits):
    reg, (first, _, _), (second, rec2) = two_fits
    seen = list(rec2.seen.values())
    assert [n for _, n, *_ in seen] == [0, 1, 2, 3]  # that fit's own steps
    assert all(on for *_, on, _ in seen) and all(len(rows) == 5 for *_, rows in seen)
    assert reg.group.model is second.net and reg.group.calls["DropBlock@stem"] == 4
    assert len(pd.summary(first)) == 0


def test_summary_of_the_lightning_module_shows_each_layers_own_value(two_fits):
    _, (_, rec1, _), (_, rec2) = two_fits
    for *_, rows in (*rec1.seen.values(), *rec2.seen.values()):
        depth = {r.layer: r.values["p"] for r in rows if r.transform.startswith("Dropout2d")}
        assert depth == pytest.approx({"net.layer1.0.conv": 0.0, "net.layer1.1.conv": 0.1,
                                       "net.layer2.0.conv": 0.2, "net.layer2.1.conv": 0.3})


def test_the_network_saved_whole_after_fitting_loads_without_plugdrop(two_fits, tmp_path):
    _, (first, _, _), (second, _) = two_fits
    assert len(pd.summary(second)) == 0  # taken off when fitting ended
    torch.save(first.net, tmp_path / "net.pt")
    assert load_without_plugdrop(tmp_path / "net.pt", "{'x': torch.randn(2, 3, 8, 8)}") == (
        "Net (2, 5)")


@pytest.fixture(scope="module")
def ramp(tmp_path_factory):
    """An uninterrupted fit of 12 steps, and one killed at step 7 whose ``last.ckpt`` is at
    step 5."""
    tmp = tmp_path_factory.mktemp("ramp")
    whole = Record()
    _fit(_trainer(tmp / "a", [Regularize(SPEC, module="net"), whole], logger=False), Module())
    ckpt = L.callbacks.ModelCheckpoint(dirpath=tmp / "ck", every_n_train_steps=5,
                                       save_last=True, save_top_k=-1)
    killed, module = Record(crash_after=7), Module()
    t1 = _trainer(tmp / "b", [Regularize(SPEC, module="net"), killed, ckpt], logger=False)
    with pytest.raises((SystemExit, KeyboardInterrupt)):  # Lightning exits after a Ctrl-C
        _fit(t1, module)
    assert t1.global_step == 7
    return whole.by_step(), tmp / "ck" / "last.ckpt", module


def test_a_killed_fit_takes_its_attachments_off(ramp):
    assert len(pd.summary(ramp[2])) == 0


def _without_state(path, tmp_path):
    """The checkpoint of a fit that had no Regularize callback."""
    ckpt = torch.load(path, weights_only=True)
    ckpt["callbacks"] = {k: v for k, v in ckpt["callbacks"].items()
                         if not k.startswith("Regularize")}
    torch.save(ckpt, tmp_path / "bare.ckpt")
    return tmp_path / "bare.ckpt"


def _legacy(path, tmp_path):
    """The checkpoint as earlier versions saved it: the state under a key holding the spec."""
    ckpt = torch.load(path, weights_only=True)
    key = next(k for k in ckpt["callbacks"] if k.startswith("Regularize"))
    state = ckpt["callbacks"].pop(key)
    spec = [s.describe() for s in pd.parse_spec(SPEC)]
    ckpt["callbacks"]["Regularize" + repr({"spec": spec, "module": "net"})] = {
        "attachments": state["attachments"]}
    torch.save(ckpt, tmp_path / "legacy.ckpt")
    return tmp_path / "legacy.ckpt"


@pytest.mark.parametrize("spec, changed", [
    (SPEC, None), (REFORMATTED, None), ("legacy", None),
    (SPEC.replace("end: 0.3", "end: 0.2"),
     ("linear(0, 0.3, steps=12)", "linear(0, 0.2, steps=12)")),
    (SPEC.replace("end: 0.3", "end: 0.3, steps: 20"),
     ("linear(0, 0.3, steps=12)", "linear(0, 0.3, steps=20)")),
    ("no-state", ("holds no state of this callback",)),
], ids=["same", "reformatted", "legacy-checkpoint", "end-changed", "steps-added",
        "checkpoint-without-its-state"])
def test_a_fit_resumed_from_last_ckpt(ramp, tmp_path, spec, changed):
    whole, last, _ = ramp
    state = torch.load(last, weights_only=True)["callbacks"]
    assert [v["attachments"] for k, v in state.items() if k.startswith("Regularize")] == [
        [{"label": "DropBlock@layer1.*.conv", "step": 5},
         {"label": "Dropout2d@layer2.*.conv", "step": 5}]]
    if spec == "legacy":
        spec, last = SPEC, _legacy(last, tmp_path)
    elif spec == "no-state":
        spec, last = SPEC, _without_state(last, tmp_path)
    reg, again = Regularize(spec, module="net"), Record()
    t2 = _trainer(tmp_path, [reg, again], logger=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(t2, Module(), ckpt_path=last)
    resumed = [str(w.message) for w in caught if issubclass(w.category, ResumeWarning)]
    assert t2.global_step == 12 and reg.group.step_count == 12
    seen = sorted((s, n, v) for s, n, v, _, _ in again.seen.values())
    assert [s for s, _, _ in seen][0] == 5 and all(s == n for s, n, _ in seen)
    if changed is None:
        assert resumed == []
        # (a list of one selector labels its attachment with the list: compare in order)
        assert all(list(whole[s].values()) == list(v.values()) for s, _, v in seen)
        return
    assert len(resumed) == 1 and all(text in resumed[0] for text in changed), resumed
    assert "DropBlock@layer1.*.conv" in resumed[0] and "step 5" in resumed[0]  # never from 0
    fresh = pd.attach_all(Net(), spec, steps=12)
    fresh.step(5)
    assert seen[0][2] == pytest.approx(fresh.values())


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for _ in range(8):
            yield torch.randn(3, 8, 8, generator=g), torch.tensor(1)


def test_keeping_the_attachments_and_mistakes(tmp_path):
    module = Module()
    reg = Regularize(SPEC, module="net", remove_at_end=False, log=False)
    _fit(_trainer(tmp_path, [reg], max_steps=2, logger=False), module)
    assert reg.group.attached and len(pd.summary(module)) == 4
    with pytest.raises(pd.SpecError, match=r"^<spec>:1:24: unknown transform 'DropBlok'"):
        Regularize("- {layers: 'layer1.*', transform: DropBlok}")
    with pytest.raises(TypeError, match=r"module= names a submodule by its dotted name"):
        Regularize(SPEC, module=3)
    with pytest.raises(pd.SettingError, match=r"steps= takes a whole number of steps >= 1"):
        Regularize(SPEC, steps="100")
    with pytest.raises(pd.SpecError, match=r"the spec must be a list of attachments"):
        Regularize("")
    with pytest.raises(pd.SettingError, match=r"Regularize\(optimizer=2\): the trainer has 1"):
        _fit(_trainer(tmp_path, [Regularize(SPEC, module="net", optimizer=2)], logger=False),
             Module())
    with pytest.raises(pd.SelectorError, match=r"module='nett': Module has no such submodule; "
                                               r"its children are net"):
        _fit(_trainer(tmp_path, [Regularize(SPEC, module="nett")], logger=False), Module())


@pytest.mark.parametrize("max_epochs, loader, why", [
    (2, lambda: _loader(dataset=Stream()), "cannot count"),
    (-1, _loader, "has no end"),
])
def test_a_fit_of_unknown_length_asks_for_steps(tmp_path, max_epochs, loader, why):
    trainer = _trainer(tmp_path, [Regularize(SPEC, module="net")], max_epochs=max_epochs,
                       logger=False)
    with pytest.raises(pd.SpecError) as e:
        _fit(trainer, Module(), loader())
    message = str(e.value)
    assert "\n" not in message and why in message and "Regularize(steps=" in message, message
    assert message.startswith("<spec>:1:3: p:")
