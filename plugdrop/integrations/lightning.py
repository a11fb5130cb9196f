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

from ._core import RegularizeCallback

__all__ = ["Regularize"]


class Regularize(RegularizeCallback, pl.Callback):
    """Attach an attachment spec when fitting starts and step it with the optimizer.

    Args:
        spec: what :func:`plugdrop.attach_all` takes: a list of attachment mappings, a YAML
            file or YAML text. Checked at once (a mistake raises :class:`~plugdrop.SpecError`
            here, naming its place).
        module: the dotted name of the submodule to attach to (``"model"``); selectors are
            relative to it. Default: the LightningModule itself.
        steps: what schedules written without ``steps:`` span. Default:
            ``trainer.estimated_stepping_batches`` (the fit's optimizer steps, gradient
            accumulation and devices counted).
        optimizer: the index in ``trainer.optimizers`` whose steps advance the schedules
            (default ``0``). Steps a ``GradScaler`` skips do not count.
        log: log the current value of every scheduled setting through the module's logger
            (``plugdrop/DropBlock@layer3.*/p``) every ``trainer.log_every_n_steps``.
        watch: a selector whose layers :func:`plugdrop.watch` observes; their statistics
            (``plugdrop/watch/<layer>/act_std``, ``drop_frac``, ...) are logged with the values.
        example_input: an input batch (a tuple: positional inputs, a dict: keyword inputs) to
            find the residual branches that ``"residual:..."`` selectors name, moved to the
            model's device (see :func:`plugdrop.residual_branches`; default: ``torch.fx``).
        remove_at_end: take everything off the model when fitting ends (default ``False``:
            the attachments stay, inactive in eval mode).

    The schedules' position is saved in Lightning's checkpoints (the callback's
    ``state_dict``), so ``trainer.fit(ckpt_path=...)`` continues the ramp at the step it
    stopped. Attaching happens in ``on_fit_start``, after DDP or FSDP wrapped the model and
    before the first batch; selectors name the module's own submodules either way.
    """

    def __init__(self, spec: Any, *, module: str | None = None, steps: int | None = None,
                 optimizer: int = 0, log: bool = True, watch: Any = None,
                 remove_at_end: bool = False, example_input: Any = None,
                 source: str | None = None) -> None:
        super().__init__(spec, module, steps, log, watch, remove_at_end, example_input, source)
        self.optimizer = optimizer

    @property
    def state_key(self) -> str:
        return self._generate_state_key(spec=self._reg.plain_spec(), module=self._reg.module)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        total = trainer.estimated_stepping_batches
        total = int(total) if isinstance(total, (int, float)) and math.isfinite(total) else None
        group = self._reg.attach(pl_module, total)
        optimizers = trainer.optimizers
        if not 0 <= self.optimizer < len(optimizers):
            raise pd.SettingError(f"Regularize(optimizer={self.optimizer}): the trainer has "
                                  f"{len(optimizers)} optimizer(s); give an index below that")
        opt = optimizers[self.optimizer]
        group.bind(opt)  # a LightningOptimizer is bound through to the torch optimizer

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not self.log or self._reg.group is None:
            return
        every = max(int(getattr(trainer, "log_every_n_steps", 50) or 1), 1)
        if trainer.global_step % every == 0 or trainer.is_last_batch:
            values = self._reg.values()
            if values:
                pl_module.log_dict(values, on_step=True, on_epoch=False, logger=True,
                                   prog_bar=False, batch_size=1)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if self._reg.group is not None:
            self._reg.group.unbind()
        if self._reg.remove_at_end:
            self._reg.remove()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self._reg.group is not None:
            self._reg.group.unbind()

    def state_dict(self) -> dict[str, Any]:
        return self._reg.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._reg.load_state_dict(state_dict)
