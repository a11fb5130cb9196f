"""A PyTorch Lightning callback that retrofits regularization onto the LightningModule.

    >>> from plugdrop.integrations.lightning import Regularize
    >>> trainer = L.Trainer(callbacks=[Regularize('''
    ... - {layers: "backbone.layer3.*", transform: DropBlock, block_size: 5,
    ...    p: {schedule: linear, start: 0.0, end: 0.1}}
    ... ''')])
    >>> trainer.fit(module)                       # the ramp spans the whole fit
    >>> trainer.fit(module, ckpt_path="last.ckpt")  # ... and resumes where it stopped

Needs ``lightning`` (``pip install 'plugdrop[lightning]'``); ``pytorch_lightning`` works too.
"""

from __future__ import annotations

import math
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError as e:  # pragma: no cover - depends on what is installed
    try:
        import pytorch_lightning as pl  # type: ignore[no-redef]
    except ImportError:
        from ._core import missing_extra

        raise missing_extra("lightning", "lightning", e) from None

import plugdrop as pd

from ._core import RegularizeCallback, metrics_of
from ._resume import ResumeWarning, Saved, key_fields

__all__ = ["Regularize", "ResumeWarning"]


class Regularize(RegularizeCallback, pl.Callback):
    """Attach an attachment spec when fitting starts, step it with the optimizer, take it off
    when fitting ends.

    Args:
        spec: what :func:`plugdrop.attach_all` takes: a list of attachment mappings, a YAML
            file or YAML text. Checked at once (a mistake raises :class:`~plugdrop.SpecError`
            here, naming its place). Default ``None``: the variant of the ``plugdrop ablate``
            run this script is (:func:`plugdrop.current_run`), nothing outside one (with a
            warning).
        module: the dotted name of the submodule to attach to (``"model"``); selectors are
            relative to it. Default: the LightningModule itself.
        steps: what schedules written without ``steps:`` span (a warm-up among them).
            Default: ``trainer.estimated_stepping_batches`` (the fit's optimizer steps,
            gradient accumulation and devices counted).
        optimizer: the index in ``trainer.optimizers`` whose steps advance the schedules
            (default ``0``). Steps a ``GradScaler`` skips do not count.
        log: log the value of every scheduled setting that each step's forward used, through
            the module's loggers at that step (``plugdrop/DropBlock@layer3.*/p``; a per-layer
            setting: its mean over the layers), on the steps Lightning writes
            (``log_every_n_steps``), as its ``LearningRateMonitor`` logs the learning rate.
        watch: a selector whose layers :func:`plugdrop.watch` observes; their statistics
            (``plugdrop/watch/<layer>/act_std``, ``drop_frac``, ...) are logged with the values.
        example_input: an input batch (a tuple: positional inputs, a dict: keyword inputs) to
            find the residual branches that ``"residual:..."`` selectors name, moved to the
            model's device (see :func:`plugdrop.residual_branches`; default: ``torch.fx``).
        remove_at_end: take everything off the model when fitting ends or fails (default
            ``True``: a model saved whole afterwards, ``torch.save(module)``, loads where
            plugdrop is not installed; the next fit attaches again). ``False`` leaves the
            attachments on, inactive in eval mode.
        source: the spec's name in error messages (see :func:`plugdrop.parse_spec`).

    Inside ``plugdrop ablate`` (the script is an ablation's ``program:``), each validation's
    ``trainer.callback_metrics`` (``val_loss``, ``val_acc``, what ``self.log`` gave; not the
    sanity check's, not plugdrop's own values) are logged into the run, with ``epoch`` (the
    epochs the validation follows) and ``step``: adding this callback makes a Lightning
    script an ablation program.

    Every fit it is given attaches the spec to that fit's module, its schedules at that fit's
    steps: one callback serves ``fit``, a second ``fit``, another module's ``fit``. The
    schedules' position and the spec are saved in Lightning's checkpoints (the callback's
    ``state_dict``), so ``trainer.fit(ckpt_path=...)`` continues the ramp at the step it
    stopped, also with a spec written otherwise (``0`` for ``0.0``, another key order). A spec
    changed in what it does (another ``end``, added ``steps:``, another training length)
    continues at the trainer's step with a :class:`ResumeWarning` naming the old and new
    attachments; a checkpoint without the callback's state starts the schedules at the
    trainer's step with the same warning.

    Raises:
        SpecError: (when fitting starts) a schedule spans the fit and Lightning cannot tell its
            length (an ``IterableDataset`` without ``max_steps``, ``max_epochs=-1``): give
            ``Regularize(steps=N)``.
        SettingError: ``optimizer`` is not an index of the trainer's optimizers.
    """

    def __init__(self, spec: Any = None, *, module: str | None = None, steps: int | None = None,
                 optimizer: int = 0, log: bool = True, watch: Any = None,
                 remove_at_end: bool = True, example_input: Any = None,
                 source: str | None = None) -> None:
        super().__init__(spec, module, steps, log, watch, remove_at_end, example_input, source)
        self.optimizer = optimizer
        self._saved: Saved | None = None
        self._batch_step = 0

    @property
    def state_key(self) -> str:
        """Lightning's key for this callback's state: its module and its attachments' labels
        (what the spec attaches where, not how its values are written)."""
        return self._generate_state_key(module=self._reg.module,
                                        attachments=pd.AttachmentGroup.labels_of(self._reg.specs))

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._saved = None  # a state read by an earlier validate/test is not this fit's

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        total, unknown = _fit_length(trainer)
        optimizers = trainer.optimizers
        if not 0 <= self.optimizer < len(optimizers):
            raise pd.SettingError(f"Regularize(optimizer={self.optimizer}): the trainer has "
                                  f"{len(optimizers)} optimizer(s); give an index below that")
        group = self._reg.attach(pl_module, total, unknown)
        group.bind(optimizers[self.optimizer])  # a LightningOptimizer is bound through
        if self.run is not None:
            self.run.record_attached(group, "plugdrop.integrations.lightning.Regularize")

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        saved, self._saved = self._saved, None
        if trainer.ckpt_path is None:
            self._reg.move_to(trainer.global_step)  # 0, or where an earlier fit of it stopped
            return
        why = self._reg.resume(saved, trainer.global_step)
        if why is not None:
            self._warn(why)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        self._batch_step = trainer.global_step
        if not self.log or self._reg.group is None or not trainer.loggers or not _writes(
                trainer):
            return
        values = self._reg.capture()  # what this batch's forward uses, logged at its step
        if values:
            pl_module.log_dict(values, on_step=True, on_epoch=False, batch_size=1)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not self.log or self._reg.watch is None or not trainer.loggers:
            return
        stepped = trainer.global_step != self._batch_step
        if _writes(trainer) and (stepped or not pl_module.automatic_optimization):
            stats = self._reg.watch_stats()
            if stats:
                pl_module.log_dict(stats, on_step=True, on_epoch=False, batch_size=1)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        """Log the validation's metrics into the ``plugdrop ablate`` run (rank 0)."""
        if self._run is None or trainer.sanity_checking or not trainer.is_global_zero:
            return
        values = metrics_of(trainer.callback_metrics)
        if values:
            self._run.log(epoch=int(trainer.current_epoch) + 1, step=int(trainer.global_step),
                          **values)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._end()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._end()

    def _end(self) -> None:
        self._saved = None
        if self._reg.group is not None:
            self._reg.group.unbind()
        if self._reg.remove_at_end:
            self._reg.remove()

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]
                           ) -> None:
        """Find this callback's state under a key it no longer has (its attachments' labels
        changed, or an earlier version wrote the key): the state that no other Regularize
        callback of the trainer claims, of the same module."""
        states = checkpoint.get("callbacks") or {}
        if self.state_key in states:
            return  # Lightning hands it to load_state_dict
        name = type(self).__qualname__
        claimed = {c.state_key for c in trainer.callbacks if isinstance(c, Regularize)}
        found = []
        for key, state in states.items():
            fields = key_fields(key, name) if isinstance(key, str) else None
            if fields is not None and key not in claimed:
                saved = Saved.read(state, *fields)
                if saved is not None:
                    found.append(saved)
        same = [s for s in found if s.module == self._reg.module] or found
        self._saved = same[0] if len(same) == 1 else None

    def state_dict(self) -> dict[str, Any]:
        return self._reg.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._saved = Saved.read(state_dict)


def _fit_length(trainer: Any) -> tuple[int | None, str]:
    """The fit's optimizer steps as Lightning estimates them, or ``None`` and why not."""
    try:
        total = trainer.estimated_stepping_batches
    except Exception as e:  # e.g. an accumulation schedule that changes between epochs
        return None, f"Lightning cannot estimate the fit's steps ({' '.join(str(e).split())})"
    if isinstance(total, (int, float)) and math.isfinite(total) and total >= 1:
        return int(total), ""
    if trainer.max_epochs == -1:
        return None, "the fit has no end (max_epochs=-1 and no max_steps)"
    return None, ("Lightning cannot count the fit's steps (a training set without len() and "
                  "no max_steps)")


def _writes(trainer: Any) -> bool:
    """Whether Lightning writes the metrics logged in this batch: the flag its own
    LearningRateMonitor reads, or its rule (every ``log_every_n_steps`` steps) where the flag
    is missing."""
    flag = getattr(getattr(trainer, "_logger_connector", None), "should_update_logs", None)
    if isinstance(flag, bool):
        return flag
    every = int(getattr(trainer, "log_every_n_steps", 50) or 0)
    return every > 0 and (trainer.global_step + 1) % every == 0
