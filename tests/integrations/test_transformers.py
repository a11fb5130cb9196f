"""plugdrop.integrations.transformers.Regularize with a real Hugging Face Trainer on CPU, on a
ViT built from a config (no download): DropPath on the residual branches ``residual:`` finds
(HF's ViT has no drop path of its own), stepped with the optimizer, logged with the values each
step used (to the TensorBoard reporter too, never into what ``evaluate()`` returns), taken off
when training ends, and a training killed in the middle of the ramp resumes from its checkpoint
with the same scheduled values, also when the trainer rebuilds the callback from it."""

import importlib.util
import json
import pickle
import shutil
import warnings
from pathlib import Path

import pytest
import torch

import plugdrop as pd

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
from plugdrop.integrations.transformers import Regularize, ResumeWarning  # noqa: E402

#: every test trains through the framework's own loop
pytestmark = pytest.mark.slow

KEY = "plugdrop/DropPath@residual:/p"
#: the reporter the values must reach, where it is installed
REPORT = ["tensorboard"] if importlib.util.find_spec("tensorboard") else []
SPEC = [{"layers": "residual:", "transform": "DropPath",
         "p": {"schedule": "by_depth", "start": 0.05, "end": 0.2,
               "times": {"schedule": "linear", "start": 0.0, "end": 1.0, "warmup": 2}}}]


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
    """The values and step count each optimizer step's forward saw (by the step's index), as the
    trainer's own copy of the Regularize callback gives them, and optionally a crash."""

    def __init__(self, crash_at=None):
        self.seen, self.crash_at = {}, crash_at

    def on_step_begin(self, args, state, control, **kw):
        reg = next(c for c in self.handler.callbacks if isinstance(c, Regularize))
        self.seen[state.global_step] = (reg.group.step_count, reg.group.values())

    def on_step_end(self, args, state, control, **kw):
        if self.crash_at is not None and state.global_step >= self.crash_at:
            raise KeyboardInterrupt


def _trainer(out, callbacks, reg=None, **kw):
    kw.setdefault("num_train_epochs", 4)
    args = transformers.TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=4, gradient_accumulation_steps=2,
        learning_rate=1e-3, logging_steps=1, save_steps=5, report_to=kw.pop("report_to", []),
        use_cpu=True, seed=0, dataloader_num_workers=0, disable_tqdm=True, **kw)
    trainer = transformers.Trainer(model=_vit(), args=args, train_dataset=Images(),
                                   callbacks=callbacks)
    if reg is not None:
        reg.add_to(trainer)
    for c in trainer.callback_handler.callbacks:
        if isinstance(c, Record):
            c.handler = trainer.callback_handler
    return trainer


def _train(trainer, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("always", ResumeWarning)
        return trainer.train(**kw)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """One uninterrupted training of 12 optimizer steps (24 images, 4 a batch, 2 batches a
    step, 4 epochs), reported to TensorBoard."""
    out = tmp_path_factory.mktemp("whole")
    reg, rec = Regularize(SPEC), Record()
    trainer = _trainer(out, [rec], reg=reg, report_to=REPORT)
    result = _train(trainer)
    return trainer, reg, reg.group, rec, result  # the group of this training: reg gets others


def test_one_callback_puts_drop_path_on_every_residual_branch(whole):
    trainer, _, group, rec, _ = whole
    assert trainer.state.global_step == 12 and group.step_count == 12
    first = group[0].layers
    assert first == pd.residual_branches(_vit(), {"pixel_values": torch.randn(1, 3, 16, 16)})
    assert len(first) == 2
    p = [v[KEY[9:]] for _, v in rec.seen.values()]
    assert p[0] == 0.0 and p == sorted(p)
    values = group[0].transform.values
    assert values(first[0])["p"] < values(first[1])["p"]  # deeper layers drop more
    # each residual branch ran twice a forward (attention and MLP share HF's dropout module)
    assert group.calls["DropPath@residual:"] == 12 * 2 * 2 * 2
    # the warm-up counts among the training's 12 steps: the ramp ends at its last step
    assert group.values()[KEY[9:]] == pytest.approx((0.05 + 0.2) / 2)


def test_logged_values_are_those_each_step_used(whole):
    trainer, _, _, rec, _ = whole
    rows = [h for h in trainer.state.log_history if KEY in h]
    # the row of step k (HF counts from 1, as its learning_rate) has what step k's forward used
    assert [h["step"] for h in rows] == list(range(1, 13))
    assert [h[KEY] for h in rows] == [rec.seen[h["step"] - 1][1][KEY[9:]] for h in rows]


def test_values_reach_tensorboard_and_stay_out_of_returned_metrics(whole, tmp_path):
    trainer, _, _, _, result = whole
    assert not any(k.startswith("plugdrop/") for k in result.metrics)
    assert not any(k.startswith("plugdrop/") for k in trainer.evaluate(Images(8)))
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    runs = list(Path(trainer.args.output_dir).glob("runs/*"))
    assert len(runs) == 1
    events = accumulator.EventAccumulator(str(runs[0]))
    events.Reload()
    assert "train/" + KEY in events.Tags()["scalars"]
    logged = [h[KEY] for h in trainer.state.log_history if KEY in h]
    assert [e.value for e in events.Scalars("train/" + KEY)] == pytest.approx(logged)


def test_the_model_is_bare_after_training_and_saves_whole_without_plugdrop(whole):
    trainer, _, group, _, _ = whole
    assert not pd.is_attached(trainer.model) and not group.attached
    assert b"plugdrop" not in pickle.dumps(trainer.model)  # torch.save(model) needs no plugdrop


def test_one_callback_trains_a_second_model(whole, tmp_path):
    first, reg, _, _, _ = whole
    trainer = _trainer(tmp_path, [reg], max_steps=3, save_strategy="no",
                       report_to=REPORT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert reg.group.model is trainer.model and reg.group.step_count == 3
    assert reg.group.calls["DropPath@residual:"] == 3 * 2 * 2 * 2
    assert not pd.is_attached(first.model)
    # given through Trainer(callbacks=...), after the reporters: it says how to reach them
    told = [str(w.message) for w in caught if "report_to" in str(w.message)]
    assert len(told) == len(REPORT[:1]) and all("Regularize(...).add_to(trainer)" in t
                                                for t in told), told


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """A training killed at step 7 of 12; its checkpoint-5 is where resuming starts."""
    out = tmp_path_factory.mktemp("crashed")
    with pytest.raises(KeyboardInterrupt):
        _train(_trainer(out, [Regularize(SPEC), Record(crash_at=7)]))
    state = json.loads((out / "checkpoint-5/trainer_state.json").read_text())
    saved = state["stateful_callbacks"]["Regularize"]
    assert saved["attributes"]["step"] == 5 and saved["args"]["spec"] == SPEC
    return out


CHANGED = [{**SPEC[0], "p": {**SPEC[0]["p"], "end": 0.3}}]


@pytest.mark.parametrize("restore, spec", [(False, SPEC), (True, SPEC), (False, CHANGED)],
                         ids=["resume", "restore-callback-states", "changed-spec"])
def test_training_killed_mid_ramp_resumes(whole, crashed, tmp_path, restore, spec):
    out = tmp_path / "run"
    shutil.copytree(crashed, out)
    reg, again = Regularize(spec), Record()
    t2 = _trainer(out, [again], reg=reg, restore_callback_states_from_checkpoint=restore)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _train(t2, resume_from_checkpoint=True)
    resumed = [str(w.message) for w in caught if issubclass(w.category, ResumeWarning)]
    # the object the user made is the one that trained, also when the trainer rebuilt it
    assert t2.state.global_step == 12 and reg.group is not None and reg.group.step_count == 12
    trainers = [c for c in t2.callback_handler.callbacks if isinstance(c, Regularize)]
    assert len(trainers) == 1 and t2.callback_handler.callbacks[1] is trainers[0]  # add_to's
    assert sorted(again.seen) == list(range(5, 12))
    assert [n for n, _ in again.seen.values()] == list(range(5, 12))
    if spec is SPEC:
        assert resumed == []
        assert all(again.seen[s][1] == whole[3].seen[s][1] for s in again.seen)
        return
    assert len(resumed) == 1, resumed
    assert "by_depth(0.05, 0.2)" in resumed[0] and "by_depth(0.05, 0.3)" in resumed[0]
    assert "step 5" in resumed[0]
    fresh = pd.attach_all(_vit(), spec, steps=12,
                          example_input={"pixel_values": torch.randn(1, 3, 16, 16)})
    fresh.step(5)
    assert again.seen[5][1] == pytest.approx(fresh.values())


def test_a_rebuilt_callback_without_the_users_one_says_which_one_trains(tmp_path):
    state = {"args": {"spec": SPEC, "module": None, "steps": None, "log": True, "watch": None,
                      "remove_at_end": True, "source": None},
             "attributes": {"step": 5, "total_steps": 12}}
    rebuilt = Regularize.from_state(state)  # as TrainingArguments(restore_...=True) does
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    trainer_state = transformers.TrainerState(max_steps=12, global_step=5,
                                              stateful_callbacks={"Regularize": state})
    with pytest.warns(UserWarning, match=r"rebuilt this callback from its checkpoint .* read "
                                         r"the trainer's copy: next\(c for c in trainer"):
        rebuilt.on_train_begin(args, trainer_state, transformers.TrainerControl(),
                               model=_vit(),
                               train_dataloader=torch.utils.data.DataLoader(Images()))
    assert rebuilt.group.step_count == 5 and rebuilt.step == 5


def test_a_log_asked_for_after_the_steps_end_has_the_values_that_step_used(tmp_path):
    reg = Regularize(SPEC, example_input={"pixel_values": torch.randn(1, 3, 16, 16)})
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    state, control = transformers.TrainerState(max_steps=12), transformers.TrainerControl()
    reg.on_train_begin(args, state, control, model=_vit())
    used = []
    for step in range(1, 4):  # no log asked for when the steps end (should_log stays False)
        used.append(reg.group.values())
        state.global_step = step
        reg.on_step_end(args, state, control)
    logs = {"loss": 1.0, "learning_rate": 1e-3}  # a later callback asked for this log
    reg.on_log(args, state, control, logs=logs)
    assert logs[KEY] == used[-1][KEY[9:]] and reg.group.step_count == 3


def test_mistakes_fail_when_the_callback_is_made(tmp_path):
    with pytest.raises(pd.SpecError, match=r"^spec\[0\]\.p: bad DropPath settings"):
        Regularize([{"layers": "residual:", "transform": "DropPath", "p": 2}])
    with pytest.raises(pd.SettingError, match="steps="):
        Regularize(SPEC, steps=-3)
