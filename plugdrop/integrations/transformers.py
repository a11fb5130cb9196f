"""A Hugging Face ``Trainer`` callback that retrofits regularization onto the model.

    >>> from plugdrop.integrations.transformers import Regularize
    >>> spec = [{"layers": "residual:", "transform": "DropPath",
    ...          "p": {"schedule": "by_depth", "start": 0.0, "end": 0.1}}]
    >>> trainer = Trainer(model, args, train_dataset=ds, callbacks=[Regularize(spec)])
    >>> trainer.train()                                  # the ramp spans max_steps
    >>> trainer.train(resume_from_checkpoint=True)       # ... and resumes where it stopped

Needs ``transformers`` (``pip install 'plugdrop[transformers]'``).
"""

from __future__ import annotations

from typing import Any

try:
    from transformers import TrainerCallback
    from transformers.trainer_callback import ExportableState
except ImportError as e:  # pragma: no cover - depends on what is installed
    from ._core import missing_extra

    raise missing_extra("transformers", "transformers", e) from None

import plugdrop as pd

from ._core import RegularizeCallback, spec_arg

__all__ = ["Regularize"]


class Regularize(RegularizeCallback, TrainerCallback, ExportableState):
    """Attach an attachment spec when training starts; its schedules follow the trainer's
    optimizer steps (``state.global_step``).

    Args:
        spec: what :func:`plugdrop.attach_all` takes: a list of attachment mappings, a YAML
            file or YAML text. Checked at once (a mistake raises :class:`~plugdrop.SpecError`
            here, naming its place).
        module: the dotted name of the submodule to attach to (``"vit"``); selectors are
            relative to it. Default: the model the trainer trains.
        steps: what schedules written without ``steps:`` span. Default: the trainer's
            ``max_steps`` (the optimizer steps of the whole training).
        log: add the current value of every scheduled setting to the trainer's logs
            (``plugdrop/DropPath@.../p``) at every logging step.
        watch: a selector whose layers :func:`plugdrop.watch` observes; their statistics are
            logged with the values.
        example_input: an input batch (a dict: keyword inputs, as the model takes them) to
            find the residual branches that ``"residual:..."`` selectors name (see
            :func:`plugdrop.residual_branches`). Default: the first example of the training
            set, collated by the trainer's own collator (read without touching the sampler or
            any random state), moved to the model's device.
        remove_at_end: take everything off the model when training ends (default ``False``).

    The position of the schedules is the trainer's own ``global_step``, which
    ``resume_from_checkpoint`` restores, so a resumed training continues the ramp at the step
    it stopped; the callback's state is also written to ``trainer_state.json`` (HF's
    ``ExportableState``), from which ``TrainingArguments(restore_callback_states_from_checkpoint=
    True)`` rebuilds it. Logged values reach the trainer's ``log_history`` and the reporting
    callbacks placed after this one (the built-in TensorBoard and W&B reporters run before
    user callbacks and do not see them).
    """

    def __init__(self, spec: Any, *, module: str | None = None, steps: int | None = None,
                 log: bool = True, watch: Any = None, remove_at_end: bool = False,
                 example_input: Any = None, source: str | None = None, step: int = 0) -> None:
        self._args = {"spec": spec_arg(spec), "module": module, "steps": steps, "log": log,
                      "watch": watch, "remove_at_end": remove_at_end, "source": source}
        super().__init__(spec, module, steps, log, watch, remove_at_end, example_input, source)
        self.step = step

    def state(self) -> dict[str, Any]:
        """HF's ``ExportableState``: the arguments (as plain data) and the step reached."""
        args = dict(self._args, spec=self._reg.plain_spec(), source=None)
        return {"args": args, "attributes": {"step": self.step}}

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       **kwargs: Any) -> None:
        if model is None:
            raise pd.AttachError("Regularize: the trainer gave its callbacks no model; attach "
                                 "with plugdrop.attach_all(model, spec) before training instead")
        total = int(state.max_steps) if getattr(state, "max_steps", 0) else None
        if self._reg.example_input is None and any(s.residual for s in self._reg.specs):
            self._reg.example_input = _first_example(kwargs.get("train_dataloader"))
        self._reg.attach(model, total)
        self.step = int(state.global_step)
        self._reg.sync(self.step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.step = int(state.global_step)
        self._reg.sync(self.step)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None,
               **kwargs: Any) -> None:
        if not self.log or logs is None or self._reg.group is None:
            return
        values = self._reg.values()
        logs.update(values)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(values)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._reg.remove_at_end:
            self._reg.remove()



def _first_example(loader: Any) -> Any:
    """The training set's first example as a batch of one, through the loader's collator
    (``None`` when the loader has no indexable dataset: torch.fx traces instead)."""
    dataset = getattr(loader, "dataset", None)
    collate = getattr(loader, "collate_fn", None)
    if dataset is None or collate is None or not hasattr(dataset, "__getitem__"):
        return None
    try:
        batch = collate([dataset[0]])
    except Exception:  # an iterable or odd dataset: fall back to tracing
        return None
    if isinstance(batch, dict):
        return {k: v for k, v in batch.items() if k not in ("labels", "label")}
    return batch
