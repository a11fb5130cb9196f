"""Progress of an ablation: tqdm bars on a terminal (runs with ETA, the current run's epochs,
its batches), one line per epoch otherwise (logs, CI, ``nohup``)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from decimal import Decimal
from typing import Any


def _number(value: float) -> str:
    """``value`` to 4 significant digits, however large (an integer beyond a float's range
    too)."""
    try:
        return format(value, ".4g")
    except OverflowError:
        return format(Decimal(value), ".4g")


class Progress:
    """Reports the progress of every run; silent when ``enabled`` is false (ranks > 0).

    Args:
        total_runs: how many runs this invocation will train (the overall bar).
        enabled: print at all.
        tty: draw bars; default: whether stderr is a terminal.
    """

    def __init__(self, total_runs: int, enabled: bool = True, tty: bool | None = None):
        self.enabled = enabled
        self.tty = enabled and (sys.stderr.isatty() if tty is None else tty)
        self.runs_bar: Any = None
        self.epoch_bar: Any = None
        self.batch_bar: Any = None
        self.name = ""
        if self.tty:
            from tqdm.auto import tqdm

            self._tqdm = tqdm
            self.runs_bar = tqdm(total=total_runs, desc="runs", position=0, unit="run",
                                 dynamic_ncols=True)

    def run_start(self, variant: str, seed: int, epochs: int, steps: int,
                  start_epoch: int = 1) -> None:
        self.name = f"{variant} seed={seed}"
        if not self.enabled:
            return
        if self.tty:
            self.epoch_bar = self._tqdm(total=epochs, initial=start_epoch - 1, desc=self.name,
                                        position=1, leave=False, unit="epoch",
                                        dynamic_ncols=True)
            self.batch_bar = self._tqdm(total=steps, desc="batches", position=2, leave=False,
                                        unit="batch", dynamic_ncols=True)
        elif start_epoch > 1:
            print(f"[{self.name}] resuming at epoch {start_epoch}", flush=True)

    def program_start(self, variant: str, seed: int, attempt: int, resumed: bool) -> None:
        """A program's run starts (its attempt ``attempt``; ``resumed``: an earlier one did
        not finish)."""
        self.name = f"{variant} seed={seed}"
        if self.enabled and resumed:
            print(f"[{self.name}] resuming (attempt {attempt}, PLUGDROP_RESUME=1)", flush=True)

    def logged(self, record: Mapping[str, Any], most: int = 6) -> None:
        """A metrics line a program logged: ``[name] epoch 3: val_miou 0.7312  loss 0.2104``
        (its first ``most`` numbers)."""
        if not self.enabled:
            return
        where = " ".join(f"{k} {record[k]}" for k in ("epoch", "step") if k in record)
        values = [(k, v) for k, v in record.items() if k not in ("epoch", "step")
                  and isinstance(v, (int, float)) and not isinstance(v, bool)]
        shown = "  ".join(f"{k} {_number(v)}" for k, v in values[:most])
        more = f"  (+{len(values) - most} more)" if len(values) > most else ""
        line = f"[{self.name}] {where}: {shown}{more}"
        if self.tty:
            self._tqdm.write(line, file=sys.stderr)
        else:
            print(line, flush=True)

    def batch(self) -> None:
        if self.batch_bar is not None:
            self.batch_bar.update(1)

    def epoch(self, record: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        ema = (f"  ema acc {100 * record['val_acc_ema']:.2f}%" if "val_acc_ema" in record
               else "")
        val = (f"  val loss {record['val_loss']:.4f}  val acc {100 * record['val_acc']:.2f}%"
               if "val_acc" in record else "")  # an epoch not evaluated (eval_every)
        if self.tty:
            self.epoch_bar.update(1)
            if val:
                self.epoch_bar.set_postfix_str(f"val acc {100 * record['val_acc']:.1f}%")
            self.batch_bar.reset()
        else:
            print(f"[{self.name}] epoch {record['epoch']}: train loss "
                  f"{record['train_loss']:.4f}{val}{ema}  ({record['epoch_time']:.1f}s, "
                  f"{record['images_per_s']:.0f} img/s)", flush=True)

    def run_end(self, status: str = "finished") -> None:
        if not self.enabled:
            return
        for bar in (self.batch_bar, self.epoch_bar):
            if bar is not None:
                bar.close()
        self.batch_bar = self.epoch_bar = None
        if self.runs_bar is not None:
            self.runs_bar.update(1)
        if status != "finished":
            self.message(f"[{self.name}] {status}")

    def message(self, text: str) -> None:
        """A line that does not break the bars."""
        if not self.enabled:
            return
        if self.tty:
            self._tqdm.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        self.run_end_all()

    def run_end_all(self) -> None:
        for bar in (self.batch_bar, self.epoch_bar, self.runs_bar):
            if bar is not None:
                bar.close()
        self.batch_bar = self.epoch_bar = self.runs_bar = None
