"""The Lightning and Hugging Face ``Regularize`` callbacks inside ``plugdrop ablate``: given no
spec, they attach the run's variant (``PLUGDROP_SPEC``) and log every validation's metrics into
the run (``PLUGDROP_METRICS``), so that adding the callback makes a training script an
ablation program; outside an ablation they attach nothing and say so."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from conftest import Net

pytestmark = pytest.mark.slow

SPEC = '[{"layers": "net.layer1.*", "transform": "DropBlock", "p": 0.1, "block_size": 3}]\n'


@pytest.fixture
def run(tmp_path, monkeypatch):
    """The environment of a run of plugdrop ablate (its spec: DropBlock on layer1)."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "work").mkdir()
    for k, v in {"PLUGDROP_SEED": "0", "PLUGDROP_VARIANT": "dropblock",
                 "PLUGDROP_SPEC": str(tmp_path / "spec.yaml"),
                 "PLUGDROP_RUN_DIR": str(tmp_path / "work"),
                 "PLUGDROP_METRICS": str(tmp_path / "metrics.jsonl"),
                 "PLUGDROP_RESUME": "0", "PLUGDROP_RUN_ID": "dropblock__s0"}.items():
        monkeypatch.setenv(k, v)
    return tmp_path


def _records(folder):
    return [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]


def _loader(n=16):
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(n, 3, 8, 8, generator=g),
                                          torch.randint(0, 5, (n,), generator=g))
    return torch.utils.data.DataLoader(data, batch_size=4)


def test_lightning_callback_is_an_ablation_program(run, tmp_path):
    L = pytest.importorskip("lightning.pytorch")
    from plugdrop.integrations.lightning import Regularize

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Net()
            self.attached = []

        def training_step(self, batch, i):
            self.attached.append([r.layer for r in pd.summary(self)])
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def validation_step(self, batch, i):
            x, y = batch
            logits = self.net(x)
            self.log("val_loss", nn.functional.cross_entropy(logits, y))
            self.log("val_acc", (logits.argmax(1) == y).float().mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    reg = Regularize()  # no spec: the run's
    assert reg.run is not None and reg.run.variant == "dropblock"
    module = Module()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = L.Trainer(default_root_dir=tmp_path, accelerator="cpu", devices=1,
                            max_epochs=2, logger=False, enable_progress_bar=False,
                            enable_checkpointing=False, enable_model_summary=False,
                            callbacks=[reg])
        trainer.fit(module, _loader(), _loader(8))
    assert module.attached[0] == ["net.layer1.0", "net.layer1.1"]
    records = _records(run)
    assert [(r["epoch"], r["step"]) for r in records] == [(1, 4), (2, 8)]  # no sanity check
    assert set(records[0]) == {"epoch", "step", "val_loss", "val_acc"}


def test_hf_callback_is_an_ablation_program(run, tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from plugdrop.integrations.transformers import Regularize

    class Images(torch.utils.data.Dataset):
        def __init__(self, n):
            g = torch.Generator().manual_seed(0)
            self.x, self.y = torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 5, (n,))

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return {"pixel_values": self.x[i], "labels": self.y[i]}

    (run / "spec.yaml").write_text('[{"layers": "vit.layers.*.mlp", '
                                   '"transform": "Dropout", "p": 0.1}]\n')
    torch.manual_seed(0)
    model = transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64, num_labels=5))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"), per_device_train_batch_size=4, num_train_epochs=2,
        eval_strategy="epoch", save_strategy="no", report_to=[], use_cpu=True, seed=0,
        disable_tqdm=True, logging_steps=1)
    reg = Regularize()
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Images(8),
                                   eval_dataset=Images(4))
    reg.add_to(trainer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
        trainer.evaluate()
    assert reg.group is not None and reg.group.labels == ["Dropout@vit.layers.*.mlp"]
    records = _records(run)
    assert [(r.get("epoch"), r["step"]) for r in records] == [(1, 2), (2, 4), (2, 4)]
    assert "eval_loss" in records[0] and "epoch" not in {k for k in records[0]
                                                          if k.startswith("eval")}


def test_outside_an_ablation_a_callback_without_spec_attaches_nothing(monkeypatch):
    L = pytest.importorskip("lightning.pytorch")  # noqa: F841
    from plugdrop.integrations.lightning import Regularize

    monkeypatch.delenv("PLUGDROP_SEED", raising=False)
    with pytest.warns(UserWarning, match="no spec given, and this script does not run inside "
                                         "plugdrop ablate"):
        reg = Regularize()
    assert reg.run is None and reg._reg.specs == []


def test_a_spec_given_inside_an_ablation_is_said_to_replace_the_variant(run):
    pytest.importorskip("lightning.pytorch")
    from plugdrop.integrations.lightning import Regularize

    with pytest.warns(UserWarning, match="the attachments of variant 'dropblock'"):
        Regularize([{"layers": "x", "transform": "Dropout", "p": 0.2}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Regularize(SPEC)  # the run's own spec, written out (a callback rebuilt from it)
