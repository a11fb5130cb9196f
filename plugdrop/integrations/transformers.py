"""A Hugging Face ``Trainer`` callback that retrofits regularization onto the model.

    >>> from plugdrop.integrations.transformers import Regularize
    >>> spec = [{"layers": "residual:", "transform": "DropPath",
    ...          "p": {"schedule": "by_depth", "start": 0.0, "end": 0.1}}]
    >>> trainer = Trainer(model, args, train_dataset=ds)
    >>> Regularize(spec).add_to(trainer)               # before the reporters (TensorBoard...)
    >>> trainer.train()                                  # the ramp spans max_steps
    >>> trainer.train(resume_from_checkpoint=True)       # ... and resumes where it stopped

Needs ``transformers`` (``pip install 'plugdrop[transformers]'``).
"""

from __future__ import annotations

import weakref
from typing import Any

try:
    from transformers.trainer_callback import (DefaultFlowCallback, ExportableState,
                                               TrainerCallback)
except ImportError as e:  # pragma: no cover - depends on what is installed
    from ._core import missing_extra

    raise missing_extra("transformers", "transformers", e) from None

import plugdrop as pd

from ._core import RegularizeCallback, metrics_of, spec_arg
from ._resume import ResumeWarning, Saved, changes

__all__ = ["Regularize", "ResumeWarning"]


class Regularize(RegularizeCallback, TrainerCallback, ExportableState):
    """Attach an attachment spec when training starts; its schedules follow the trainer's
    optimizer steps (``state.global_step``); take it off when training ends.

    Args:
        spec: what :func:`plugdrop.attach_all` takes: a list of attachment mappings, a YAML
            file or YAML text. Checked at once (a mistake raises :class:`~plugdrop.SpecError`
            here, naming its place). Default ``None``: the variant of the ``plugdrop ablate``
            run this script is (:func:`plugdrop.current_run`), nothing outside one (with a
            warning).
        module: the dotted name of the submodule to attach to (``"vit"``); selectors are
            relative to it. Default: the model the trainer trains.
        steps: what schedules written without ``steps:`` span (a warm-up among them).
            Default: the trainer's ``max_steps`` (the optimizer steps of the whole training).
        log: add the value of every scheduled setting that the logged step's forward used
            (``plugdrop/DropPath@.../p``; a per-layer setting: its mean over the layers) to the
            trainer's step logs, as its ``learning_rate``; evaluation logs and the metrics
            ``train()`` and ``evaluate()`` return stay without them.
        watch: a selector whose layers :func:`plugdrop.watch` observes; their statistics are
            logged with the values.
        example_input: an input batch (a dict: keyword inputs, as the model takes them) to
            find the residual branches that ``"residual:..."`` selectors name (see
            :func:`plugdrop.residual_branches`). Default: the first example of the training
            set, collated by the trainer's own collator (read without touching the sampler or
            any random state), moved to the model's device.
        remove_at_end: take everything off the model when training ends (default ``True``: a
            model saved whole afterwards loads without plugdrop; the next ``train()``
            attaches again).
        source: the spec's name in error messages (see :func:`plugdrop.parse_spec`).
        step: the trainer's step the schedules are at, until training starts (what the
            trainer restores into a callback it rebuilds; the schedules follow
            ``state.global_step`` in any case).

    Inside ``plugdrop ablate`` (the script is an ablation's ``program:``), every evaluation's
    metrics (``eval_loss``, ``eval_accuracy``, what ``compute_metrics`` gave) are logged into
    the run at its ``step`` (and ``epoch`` when it falls on an epoch's end), from the main
    process: adding this callback makes a ``Trainer`` script an ablation program.

    Each ``train()`` attaches the spec to the model it trains, its schedules at that
    training's step: one callback serves several trainings and trainers. The position of the
    schedules is the trainer's own ``global_step``, which ``resume_from_checkpoint``
    restores, so a resumed training continues the ramp at the step it stopped; a spec changed
    in what it does since the checkpoint continues there too, with a :class:`ResumeWarning`
    naming the old and new attachments. The callback's spec and step are written to
    ``trainer_state.json`` (HF's ``ExportableState``); with
    ``TrainingArguments(restore_callback_states_from_checkpoint=True)`` the trainer rebuilds
    the callback from there, and the rebuilt one hands everything to the object you made,
    which stays the one to read.

    Hugging Face's reporters (``report_to``: TensorBoard, W&B, MLflow...) run before the
    callbacks given to ``Trainer(callbacks=...)``: add the callback with :meth:`add_to` for
    them to receive the values.
    """

    def __init__(self, spec: Any = None, *, module: str | None = None,
                 steps: int | None = None, log: bool = True, watch: Any = None,
                 remove_at_end: bool = True, example_input: Any = None,
                 source: str | None = None, step: int = 0) -> None:
        self._args = {"spec": spec_arg(spec) if spec is not None else None, "module": module,
                      "steps": steps, "log": log,
                      "watch": watch if _plain(watch) else None,
                      "remove_at_end": remove_at_end, "source": source}
        super().__init__(spec, module, steps, log, watch, remove_at_end, example_input, source)
        self._step = step
        self._rebuilt = False  # made by the trainer from a checkpoint (it sets ``step``)
        self._twin: Regularize | None = None  # the user's callback a rebuilt one serves
        self._claimed: object = None  # the training a rebuilt callback serves this one in
        self._trainer: Any = None  # weak reference to the trainer of add_to
        self._told_reporters = False
        self._captured = -1  # the step whose values were captured last
        #: what the schedules written without ``steps:`` span in the current training
        self.total_steps: int | None = None

    @property
    def step(self) -> int:
        """The trainer's optimizer step the schedules are at."""
        return self._twin.step if self._twin is not None else self._step

    @step.setter
    def step(self, value: int) -> None:  # the trainer restoring a rebuilt callback
        self._step = int(value)
        self._rebuilt = True

    @property
    def group(self) -> pd.AttachmentGroup | None:
        """The :class:`~plugdrop.AttachmentGroup` of the last training (``None`` before the
        first); after a training it keeps its steps and counts, taken off the model unless
        ``remove_at_end=False``."""
        return self._twin.group if self._twin is not None else self._reg.group

    def add_to(self, trainer: Any) -> "Regularize":
        """Add this callback to ``trainer`` (or move it there if it was given already) right
        after Hugging Face's ``DefaultFlowCallback``: before the reporters of ``report_to``
        (TensorBoard, W&B, MLflow...) and the console printer, which then receive the values
        it adds to the step logs. ``Trainer(callbacks=[...])`` puts callbacks after them.

        Returns:
            ``self``.
        """
        handler = getattr(trainer, "callback_handler", None)
        if handler is None or not isinstance(getattr(handler, "callbacks", None), list):
            raise pd.SettingError(f"Regularize.add_to() takes a Hugging Face Trainer (with its "
                                  f"callback_handler), got {type(trainer).__name__}; for a "
                                  f"Lightning Trainer use plugdrop.integrations.lightning."
                                  f"Regularize in Trainer(callbacks=[...])")
        handler.callbacks[:] = _placed(handler.callbacks, self)
        self._trainer = weakref.ref(trainer)
        if getattr(trainer, "model", None) is not None:
            _register(trainer.model, trainer.state, self)
        return self

    def state(self) -> dict[str, Any]:
        """HF's ``ExportableState``: the arguments (as plain data), the step reached and the
        training's length the schedules span."""
        if self._twin is not None:
            return self._twin.state()
        args = dict(self._args, spec=self._reg.plain_spec(), source=None)
        return {"args": args, "attributes": {"step": self._step,
                                             "total_steps": self._reg.total}}

    def on_init_end(self, args: Any, state: Any, control: Any, model: Any = None,
                    **kwargs: Any) -> None:
        if model is not None:
            _register(model, state, self)  # found by the copy a checkpoint's restore makes

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       **kwargs: Any) -> None:
        if self._rebuilt and self._twin is None and model is not None:
            self._serve(model, state)
        if self._twin is not None:
            return self._twin.on_train_begin(args, state, control, model=model, **kwargs)
        if model is None:
            raise pd.AttachError("Regularize: the trainer gave its callbacks no model; attach "
                                 "with plugdrop.attach_all(model, spec) before training instead")
        total = int(state.max_steps) if (getattr(state, "max_steps", 0) or 0) > 0 else None
        if self._reg.example_input is None and any(s.residual for s in self._reg.specs):
            self._reg.example_input = _first_example(kwargs.get("train_dataloader"))
        group = self._reg.attach(model, total, "the trainer gives no max_steps")
        if self.run is not None:
            self.run.record_attached(group, "plugdrop.integrations.transformers.Regularize")
        self.total_steps = self._reg.total
        self._captured = -1
        self._step = int(state.global_step)
        if self._step > 0:  # resumed from a checkpoint
            why = self._reg.resume(self._stored(state), self._step)
            if why is not None:
                self._warn(why)
        placed = self._trainer is not None and getattr(self._trainer(), "model", None) is model
        if self.log and args.report_to and not placed and not self._told_reporters:
            self._told_reporters = True
            self._warn(f"the reporters of report_to ({', '.join(map(str, args.report_to))}) "
                       f"run before this callback and do not receive plugdrop's values; add "
                       f"the callback with Regularize(...).add_to(trainer) instead of "
                       f"Trainer(callbacks=[...])", UserWarning)
        return None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._twin is not None:
            return self._twin.on_step_end(args, state, control, **kwargs)
        self._step = int(state.global_step)
        if self.log and getattr(control, "should_log", False):
            self._reg.capture()  # what the step just taken used, before moving on
            self._captured = self._step
        self._reg.sync(self._step)
        return None

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None,
               **kwargs: Any) -> None:
        if self._twin is not None:
            return self._twin.on_log(args, state, control, logs=logs, **kwargs)
        if not self.log or logs is None or self._reg.group is None or not _step_log(logs):
            return None
        step = int(state.global_step)
        if self._captured != step:  # a log the trainer was not asked for at the step's end
            self._reg.move_to(max(step - 1, 0))
            self._reg.capture()
            self._reg.move_to(step)
            self._captured = step
        values = self._reg.in_use
        values.update(self._reg.watch_stats())
        logs.update(values)  # the callbacks after this one (reporters, printer) see them
        last = state.log_history[-1] if state.log_history else {}
        if last.get("step") == state.global_step and _step_log(last):
            last.update(values)  # the trainer stored a copy of the logs before calling us
        return None

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: Any = None,
                    **kwargs: Any) -> None:
        """Log the evaluation's metrics into the ``plugdrop ablate`` run (the main process)."""
        run = self._twin._run if self._twin is not None else self._run
        if run is None or not metrics or not getattr(state, "is_world_process_zero", True):
            return None
        values = metrics_of(metrics)
        if not values:
            return None
        epoch = getattr(state, "epoch", None)
        whole = (int(round(epoch)) if isinstance(epoch, (int, float)) and epoch >= 0
                 and abs(epoch - round(epoch)) < 1e-6 else None)
        run.log(epoch=whole, step=int(state.global_step), **values)
        return None

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._twin is not None:
            return self._twin.on_train_end(args, state, control, **kwargs)
        if self._reg.remove_at_end:
            self._reg.remove()
        return None

    def _serve(self, model: Any, state: Any) -> None:
        """Made by the trainer from a checkpoint in place of the user's callback: find that
        one and hand it every event, in its place among the callbacks."""
        self._twin = _made_for(model, state, self)
        if self._twin is None:
            self._warn("the trainer rebuilt this callback from its checkpoint (TrainingArguments"
                       "(restore_callback_states_from_checkpoint=True)) and the one given to it "
                       "no longer trains; read the trainer's copy: next(c for c in trainer."
                       "callback_handler.callbacks if isinstance(c, Regularize))", UserWarning)
            return
        trainer = self._twin._trainer() if self._twin._trainer is not None else None
        handler = getattr(trainer, "callback_handler", None)
        if handler is not None and any(c is self for c in handler.callbacks):
            # where add_to had placed the user's callback; a new list, as the trainer is
            # going through the old one now
            handler.callbacks = _placed(handler.callbacks, self)

    def _stored(self, state: Any) -> Saved | None:
        """This callback's entry in the checkpoint's ``trainer_state.json``: of the same
        module, and among several, the one that does what this one does."""
        entries = (getattr(state, "stateful_callbacks", None) or {}).get(type(self).__name__)
        entries = entries if isinstance(entries, list) else [entries] if entries else []
        found = []
        for entry in entries:
            args = entry.get("args", {}) if isinstance(entry, dict) else {}
            total = (entry.get("attributes") or {}).get("total_steps")
            found.append(Saved(spec=args.get("spec"), module=args.get("module"),
                               total=total if isinstance(total, int) else None))
        same = [s for s in found if s.module == self._reg.module] or found
        for saved in same:
            if changes(saved, self._reg.specs, self._reg.module, self._reg.total) is None:
                return saved
        return same[0] if len(same) == 1 else None


#: model -> (the trainer's state when its callbacks were made, the Regularize callbacks
#: among them): how a callback rebuilt from a checkpoint finds the one the user gave
_MADE: "weakref.WeakKeyDictionary[Any, tuple[Any, list[weakref.ref[Regularize]]]]" = (
    weakref.WeakKeyDictionary())


def _register(model: Any, state: Any, callback: Regularize) -> None:
    made = _MADE.get(model)
    if made is None or made[0]() is not state:  # another Trainer of this model
        made = (weakref.ref(state), [])
        _MADE[model] = made
    if not any(ref() is callback for ref in made[1]):
        made[1].append(weakref.ref(callback))


def _made_for(model: Any, state: Any, rebuilt: Regularize) -> Regularize | None:
    """The user's callback a callback ``rebuilt`` from a checkpoint stands for: the first of
    the last Trainer of ``model`` not yet served in this training (``state``)."""
    made = _MADE.get(model)
    for ref in made[1] if made is not None else []:
        callback = ref()
        if callback is not None and callback is not rebuilt and not callback._rebuilt and (
                callback._claimed is not state):
            callback._claimed = state
            return callback
    return None


def _placed(callbacks: list[Any], callback: Any) -> list[Any]:
    """``callbacks`` with ``callback`` right after the ``DefaultFlowCallback`` (first if none),
    before the reporters."""
    others = [c for c in callbacks if c is not callback]
    at = next((i + 1 for i, c in enumerate(others) if isinstance(c, DefaultFlowCallback)), 0)
    return [*others[:at], callback, *others[at:]]


def _step_log(logs: Any) -> bool:
    """Whether ``logs`` are a training step's (its loss and learning rate), not an evaluation's
    or the training's summary."""
    return isinstance(logs, dict) and "loss" in logs and "learning_rate" in logs


def _plain(value: Any) -> bool:
    """Whether ``value`` is JSON data (a selector stored in ``trainer_state.json``)."""
    return value is None or isinstance(value, str) or isinstance(value, list) and all(
        isinstance(v, str) for v in value)


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
