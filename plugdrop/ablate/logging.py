"""Loggers of a run: TensorBoard event files in ``runs/<id>/tb`` (``log: [tensorboard]``).

Scalars per epoch: ``loss/train``, ``loss/val``, ``acc/val`` (and the EMA's), ``lr``,
``images_per_s``, every scheduled value (``values/<attachment>/<setting>``) and the watch
statistics (``watch/<layer>/<stat>``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import ConfigError


def _scalars(record: Mapping[str, Any]) -> dict[str, float]:
    out = {"loss/train": record["train_loss"], "lr": record["lr"],
           "images_per_s": record["images_per_s"], "epoch_time": record["epoch_time"]}
    if "val_acc" in record:  # not after an epoch that is not evaluated (eval_every)
        out["loss/val"], out["acc/val"] = record["val_loss"], record["val_acc"]
    if "val_acc_ema" in record:
        out["acc/val_ema"] = record["val_acc_ema"]
        out["loss/val_ema"] = record["val_loss_ema"]
    for k, v in record.get("values", {}).items():
        out[f"values/{k}"] = v
    for k, v in record.get("watch", {}).items():
        out[f"watch/{k}"] = v
    return out


class RunLogger:
    """Writes a run's epoch records to the configured loggers.

    Args:
        kinds: the config's ``log`` list.
        path: the run folder.
        run_name: the run id.
        start_epoch: the first epoch this process will log (later events of a killed attempt
            are purged from TensorBoard's view).
        params: the resolved config (written as TensorBoard text).
    """

    def __init__(self, kinds: Sequence[str], path: Path, run_name: str, start_epoch: int = 1,
                 params: Mapping[str, Any] | None = None):
        self.tb: Any = None
        if "tensorboard" in kinds:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ConfigError("log: [tensorboard] needs the tensorboard package: pip "
                                  "install tensorboard (or 'plugdrop[cli]')") from None
            self.tb = SummaryWriter(str(path / "tb"),
                                    purge_step=start_epoch if start_epoch > 1 else None)
            if params and start_epoch == 1:
                import json

                self.tb.add_text("config", "```\n" + json.dumps(dict(params), indent=2,
                                                                  default=str) + "\n```", 0)

    def log(self, record: Mapping[str, Any]) -> None:
        scalars = _scalars(record)
        epoch = int(record["epoch"])
        if self.tb is not None:
            for k, v in scalars.items():
                self.tb.add_scalar(k, v, epoch)
            self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
            self.tb = None


def check(kinds: Sequence[str]) -> None:
    """Fail before training when a configured logger is not installed."""
    if "tensorboard" in kinds:
        try:
            import tensorboard  # noqa: F401
        except ImportError:
            raise ConfigError("log: [tensorboard] needs the tensorboard package: pip install "
                              "tensorboard") from None
