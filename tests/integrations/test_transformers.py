"""plugdrop.integrations.transformers.Regularize with a real Hugging Face Trainer on CPU, on a
ViT built from a config (no download): DropPath on the residual branches ``residual:`` finds
(HF's ViT has no drop path of its own), stepped with the optimizer, logged, and a training
killed in the middle of the ramp resumes from its checkpoint with the same scheduled values."""

import json
import warnings

import pytest
import torch

import plugdrop as pd

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
from plugdrop.integrations.transformers import Regularize  # noqa: E402

SPEC = [{"layers": "residual:", "transform": "DropPath",
         "p": {"schedule": "by_depth", "start": 0.05, "end": 0.2,
               "times": {"schedule": "linear", "start": 0.0, "end": 1.0}}}]


class Images(torch.utils.data.Dataset):
    def __init__(self, n=24):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, 16, 16, generator=g)
        self.y = torch.randint(0, 5, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"pixel_values": self.x[i], "labels": self.y[i]}


def _vit():
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(image_size=16, patch_size=4, hidden_size=32,
                                 num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, num_labels=5)
    return transformers.ViTForImageClassification(cfg)


class Record(transformers.TrainerCallback):
    def __init__(self, crash_at=None):
        self.seen, self.crash_at = {}, crash_at

    def on_step_begin(self, args, state, control, **kw):
        reg = next(c for c in self.handler.callbacks if isinstance(c, Regularize))
        self.seen[state.global_step] = reg.group.values()

    def on_step_end(self, args, state, control, **kw):
        if self.crash_at is not None and state.global_step >= self.crash_at:
            raise KeyboardInterrupt


def _trainer(out, callbacks, **kw):
    args = transformers.TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=4, gradient_accumulation_steps=2,
        num_train_epochs=4, learning_rate=1e-3, logging_steps=1, save_steps=5,
        report_to=[], use_cpu=True, seed=0, dataloader_num_workers=0,
        disable_tqdm=True, **kw)
    trainer = transformers.Trainer(model=_vit(), args=args, train_dataset=Images(),
                                   callbacks=callbacks)
    for c in trainer.callback_handler.callbacks:
        if isinstance(c, Record):
            c.handler = trainer.callback_handler
    return trainer


def _train(trainer, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train(**kw)


def test_one_callback_puts_drop_path_on_every_residual_branch(tmp_path):
    reg, rec = Regularize(SPEC), Record()
    trainer = _trainer(tmp_path, [reg, rec])
    _train(trainer)
    # 24 images, 4 a batch, 2 batches a step: 3 steps an epoch, 12 in all
    assert trainer.state.global_step == 12 and reg.group.step_count == 12
    first = reg.group[0].layers
    assert first == pd.residual_branches(_vit(), {"pixel_values": torch.randn(1, 3, 16, 16)})
    assert len(first) == 2
    p = [v["DropPath@residual:/p"] for v in rec.seen.values()]
    assert p[0] == 0.0 and p == sorted(p)
    values = reg.group[0].transform.values
    assert values(first[0])["p"] < values(first[1])["p"]  # deeper layers drop more
    logged = [h for h in trainer.state.log_history if "plugdrop/DropPath@residual:/p" in h]
    assert len(logged) >= 12  # every step's log, and the run's summary
    # each residual branch ran twice a forward (attention and MLP share HF's dropout module)
    assert reg.group.calls["DropPath@residual:"] == 12 * 2 * 2 * 2


@pytest.mark.parametrize("restore", [False, True])
def test_training_killed_mid_ramp_resumes_with_the_same_values(tmp_path, restore):
    whole = Record()
    _train(_trainer(tmp_path / "a", [Regularize(SPEC), whole]))

    first = Record(crash_at=7)
    t1 = _trainer(tmp_path / "b", [Regularize(SPEC), first],
                  restore_callback_states_from_checkpoint=restore)
    with pytest.raises(KeyboardInterrupt):
        _train(t1)
    state = json.loads((tmp_path / "b/checkpoint-5/trainer_state.json").read_text())
    saved = state["stateful_callbacks"]["Regularize"]
    assert saved["attributes"] == {"step": 5} and saved["args"]["spec"] == SPEC

    again = Record()
    t2 = _trainer(tmp_path / "b", [Regularize(SPEC), again],
                  restore_callback_states_from_checkpoint=restore)
    _train(t2, resume_from_checkpoint=True)
    reg = next(c for c in t2.callback_handler.callbacks if isinstance(c, Regularize))
    assert t2.state.global_step == 12 and reg.group.step_count == 12
    assert sorted(again.seen) == list(range(5, 12))
    assert all(again.seen[s] == whole.seen[s] for s in again.seen)


def test_mistakes_fail_when_the_callback_is_made(tmp_path):
    with pytest.raises(pd.SpecError, match=r"^spec\[0\]\.p: bad DropPath settings"):
        Regularize([{"layers": "residual:", "transform": "DropPath", "p": 2}])
    with pytest.raises(pd.SettingError, match="steps="):
        Regularize(SPEC, steps=-3)
