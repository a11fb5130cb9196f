"""plugdrop.integrations.lightning.Regularize with a real Lightning Trainer on CPU: one
callback attaches, steps per optimizer step (gradient accumulation respected), logs, and a fit
killed in the middle of the ramp resumes from its checkpoint with the same scheduled values."""

import warnings

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from conftest import Net

L = pytest.importorskip("lightning.pytorch")
from plugdrop.integrations.lightning import Regularize  # noqa: E402

SPEC = """\
- {layers: "layer1.*.conv", transform: DropBlock, block_size: 3,
   p: {schedule: linear, start: 0.0, end: 0.3}}
- {layers: "layer2.*.conv", transform: Dropout2d, p: {schedule: cosine, start: 0.2, end: 0.0}}
"""


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
    """The scheduled values each training batch saw, by batch, and optionally a crash."""

    def __init__(self, crash_after=None):
        self.seen = {}
        self.crash_after = crash_after

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        reg = next(c for c in trainer.callbacks if isinstance(c, Regularize))
        self.seen[(trainer.current_epoch, batch_idx)] = (trainer.global_step,
                                                          reg.group.values())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.crash_after is not None and trainer.global_step >= self.crash_after:
            raise KeyboardInterrupt  # what a kill looks like to Lightning


def _loader(n=32, batch=4):
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(n, 3, 8, 8, generator=g),
                                          torch.randint(0, 5, (n,), generator=g))
    return torch.utils.data.DataLoader(data, batch_size=batch)


def _trainer(tmp_path, callbacks, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kw.setdefault("max_epochs", 3)
        return L.Trainer(default_root_dir=tmp_path, accelerator="cpu",
                         devices=1, logger=L.loggers.CSVLogger(tmp_path), log_every_n_steps=1,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=callbacks, **kw)


def _fit(trainer, module, **kw):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        warnings.filterwarnings("ignore", ".*KeyboardInterrupt.*")
        trainer.fit(module, _loader(), **kw)


def test_one_callback_ramps_over_the_fit_and_respects_accumulation(tmp_path):
    reg, rec = Regularize(SPEC, module="net", watch="layer1.*.conv"), Record()
    trainer = _trainer(tmp_path, [reg, rec], accumulate_grad_batches=2)
    _fit(trainer, Module())
    # 8 batches a epoch, 2 per optimizer step: 12 steps in all, the ramp's length
    assert trainer.global_step == 12 and reg.group.step_count == 12
    steps = [s for s, _ in rec.seen.values()]
    assert steps == [i // 2 for i in range(24)]
    p = [v["DropBlock@layer1.*.conv/p"] for _, v in rec.seen.values()]
    assert p[0] == 0.0 and p[-1] == pytest.approx(0.3 * 11 / 12)
    assert reg.group.calls["DropBlock@layer1.*.conv"] == 24 * 2  # 2 layers, every batch
    logged = (tmp_path / "lightning_logs/version_0/metrics.csv").read_text()
    header = logged.splitlines()[0].split(",")
    assert "plugdrop/DropBlock@layer1.*.conv/p" in header
    assert {"plugdrop/watch/layer1.0.conv/act_std", "plugdrop/watch/layer1.0.conv/drop_frac",
            "plugdrop/watch/layer1.1.conv/grad_norm"} <= set(header)
    assert reg.group.attached  # stays unless asked


def test_a_fit_killed_mid_ramp_resumes_with_the_same_values(tmp_path):
    whole = Record()
    _fit(_trainer(tmp_path / "a", [Regularize(SPEC, module="net"), whole]), Module())

    ckpt = L.callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=5,
                                       save_top_k=-1)
    first = Record(crash_after=13)
    t1 = _trainer(tmp_path / "b", [Regularize(SPEC, module="net"), first, ckpt])
    with pytest.raises((SystemExit, KeyboardInterrupt)):  # Lightning exits after a Ctrl-C
        _fit(t1, Module())
    assert t1.global_step == 13  # killed in epoch 2, at 13 of 24 steps
    saved = sorted((tmp_path / "ck").glob("*.ckpt"))
    assert [p.name for p in saved][-1] == "epoch=1-step=10.ckpt"
    state = torch.load(saved[-1], weights_only=True)["callbacks"]
    assert [v for k, v in state.items() if k.startswith("Regularize")] == [
        {"attachments": [{"label": "DropBlock@layer1.*.conv", "step": 10},
                         {"label": "Dropout2d@layer2.*.conv", "step": 10}]}]

    reg, again = Regularize(SPEC, module="net"), Record()
    t2 = _trainer(tmp_path / "c", [reg, again])
    _fit(t2, Module(), ckpt_path=saved[-1])
    assert t2.global_step == 24 and reg.group.step_count == 24
    by_step = {s: v for s, v in whole.seen.values()}
    assert again.seen and all(by_step[s] == v for s, v in again.seen.values())
    assert min(s for s, _ in again.seen.values()) == 10


def test_remove_at_end_and_mistakes(tmp_path):
    module = Module()
    reg = Regularize(SPEC, module="net", remove_at_end=True, log=False)
    _fit(_trainer(tmp_path, [reg], max_epochs=1), module)
    assert not reg.group.attached and len(pd.summary(module)) == 0
    with pytest.raises(pd.SpecError, match=r"^<spec>:1:24: unknown transform 'DropBlok'"):
        Regularize("- {layers: 'layer1.*', transform: DropBlok}")
    with pytest.raises(TypeError, match=r"module= names a submodule by its dotted name"):
        Regularize(SPEC, module=3)
    with pytest.raises(pd.SettingError, match=r"steps= takes a whole number of steps >= 1"):
        Regularize(SPEC, steps="100")
    with pytest.raises(pd.SpecError, match=r"the spec must be a list of attachments"):
        Regularize("")
    with pytest.raises(pd.SettingError, match=r"Regularize\(optimizer=2\): the trainer has 1"):
        _fit(_trainer(tmp_path, [Regularize(SPEC, module="net", optimizer=2)], max_epochs=1),
             Module())
    with pytest.raises(pd.SelectorError, match=r"module='nett': Module has no such submodule; "
                                               r"its children are net"):
        _fit(_trainer(tmp_path, [Regularize(SPEC, module="nett")], max_epochs=1), Module())
