"""One run of an ablation (a variant with a seed): the training step, an epoch, evaluation, and
the state a checkpoint holds.

The step is the one people use: autocast (``amp: bf16 | fp16``, a ``GradScaler`` for fp16 that
plugdrop's gradient transforms receive), ``channels_last``, gradient accumulation, global
gradient-norm clipping, timm's optimizers and per-step schedulers and ``ModelEmaV3``. Every
coordinated transform of the variant (ManifoldMixup, PatchUp) mixes the targets through
:func:`plugdrop.mixed_loss`, whatever its class. After every epoch the run's state (model,
optimizer, scheduler, scaler, EMA, plugdrop handles, RNG states) is the checkpoint's, so a
resumed run continues exactly where the last epoch ended.

Under ``torchrun`` each process trains on its shard of every global batch (``batch_size`` is the
global batch) with DistributedDataParallel; validation sums are all-reduced; rank 0 writes.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

import plugdrop as pd

from ..config import AblationConfig, Variant
from ..data import DataSets, make_loader
from ..errors import ConfigError
from . import build
from .distributed import Dist
from .metrics import EvalSums
from .rng import rng_state, seed_all, set_rng_state
from .signals import StopFlag

__all__ = ["Trainer"]


@dataclass
class Trainer:
    """Everything one run trains with."""

    cfg: AblationConfig
    variant: Variant
    seed: int
    data: DataSets
    d: Dist
    workers: int
    model: nn.Module
    net: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler
    ema: Any
    handles: list[Any]
    watch: Any
    steps_per_epoch: int
    batch: int
    step: int = 0
    epoch: int = 0
    value_sums: dict[str, float] = field(default_factory=dict)
    value_count: int = 0

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def create(cls, cfg: AblationConfig, variant: Variant, seed: int, data: DataSets, d: Dist,
               workers: int, *, ddp: bool = True) -> "Trainer":
        """Build the model, attach the variant, make optimizer, scheduler, scaler and EMA.
        Errors a config can cause are :class:`ConfigError` with the setting's location."""
        seed_all(seed)
        batch = build.per_process_batch(cfg, d.world)
        model = build.make_model(cfg, len(data.classes)).to(d.device)
        if cfg.channels_last:
            model = model.to(memory_format=torch.channels_last)
        try:
            probe = make_loader(data.train, batch_size=batch, train=True, workers=0, seed=seed,
                                epoch=0, rank=d.rank, world=d.world, device=d.device)
        except ConfigError as e:
            raise ConfigError(build.locate(cfg, " ".join(str(e).split()), "batch_size")) \
                from None
        steps = len(probe) // cfg.grad_accum
        if steps < 1:
            n_train = len(data.train)  # type: ignore[arg-type]
            raise ConfigError(f"{cfg.loc('batch_size')}: batch_size {cfg.batch_size} x "
                              f"grad_accum is more than the {n_train} training images (one "
                              f"optimizer step needs a full batch); lower batch_size")
        scaler = torch.amp.GradScaler(d.device.type, enabled=cfg.amp == "fp16")
        handles = build.attach_variant(cfg, variant, model, steps * cfg.epochs, scaler)
        optimizer = build.make_optimizer(cfg, model)
        scheduler = build.make_scheduler(cfg, optimizer, steps)
        for h in handles:
            h.bind(optimizer)
        ema = build.make_ema(cfg, model)
        watch = build.make_watch(cfg, model)
        net: nn.Module = model
        if d.active and ddp:
            net = nn.parallel.DistributedDataParallel(
                model, device_ids=[d.device.index] if d.device.type == "cuda" else None)
        if isinstance(cfg.compile, Mapping):  # after attaching: hooks traced with the model
            net = torch.compile(net, backend=cfg.compile["backend"],  # type: ignore[assignment]
                                mode=cfg.compile["mode"])
        return cls(cfg, variant, seed, data, d, workers, model, net, optimizer, scheduler,
                   scaler, ema, handles, watch, steps, batch)

    def close(self) -> None:
        if self.watch is not None:
            self.watch.remove()
        for h in self.handles:
            h.remove()

    # -- state ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint holds (a collective under torchrun: every rank's RNG state)."""
        rng = rng_state()
        if self.d.active:
            ranks: list[Any] = [None] * self.d.world
            dist.all_gather_object(ranks, rng)
            rng_all: Any = ranks
        else:
            rng_all = [rng]
        return {"epoch": self.epoch, "step": self.step, "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                "ema": self.ema.state_dict() if self.ema is not None else None,
                "handles": [h.state_dict() for h in self.handles], "rng": rng_all,
                "config_hash": self.cfg.hash()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        if self.ema is not None and state.get("ema") is not None:
            self.ema.load_state_dict(state["ema"])
        for h, s in zip(self.handles, state["handles"]):
            h.load_state_dict(s)
        rng = state["rng"]
        set_rng_state(rng[self.d.rank] if self.d.rank < len(rng) else rng[0])
        self.epoch = int(state["epoch"])
        self.step = int(state["step"])

    # -- training -------------------------------------------------------------------------

    def batches(self, loader: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``loader``'s batches on the run's device (and memory format)."""
        nb = self.d.device.type == "cuda"
        for x, y in loader:
            x = x.to(self.d.device, non_blocking=nb)
            y = y.to(self.d.device, non_blocking=nb)
            if self.cfg.channels_last and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
            yield x, y

    def _values(self) -> dict[str, float]:
        out = {}
        for a, h in zip(self.variant.attachments, self.handles):
            for k, v in h.transform.values().items():
                out[f"{a.label}/{k}"] = float(v)
        return out

    def _calls(self) -> dict[str, int]:
        """Attachment -> how many times its hooks ran since the run started (all layers)."""
        return {a.label: sum(h.calls.values())
                for a, h in zip(self.variant.attachments, self.handles)}

    def train_step(self, batches: list[tuple[torch.Tensor, torch.Tensor]],
                   loss_sum: torch.Tensor) -> int:
        """One optimizer step over ``grad_accum`` micro-batches; returns the images seen."""
        cfg, net = self.cfg, self.net
        criterion = build.loss_fn(cfg)
        seen = 0
        for j, (x, y) in enumerate(batches):
            last = j == len(batches) - 1
            sync = contextlib.nullcontext() if last or not isinstance(
                net, nn.parallel.DistributedDataParallel) else net.no_sync()
            with sync:
                with build.autocast(cfg, self.d.device):
                    logits = net(x)
                    loss = pd.mixed_loss(self.handles, criterion, logits, y)
                self.scaler.scale(loss / len(batches)).backward()
            loss_sum += loss.detach().double() * len(y)
            seen += len(y)
        if cfg.clip_grad is not None:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_grad)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.scheduler.step_update(num_updates=self.step)
        if self.ema is not None:
            self.ema.update(self.model, step=self.step)
        if self.handles:
            for k, v in self._values().items():
                self.value_sums[k] = self.value_sums.get(k, 0.0) + v
            self.value_count += 1
        return seen

    def train_epoch(self, stop: StopFlag | None = None,
                    on_batch: Callable[[], None] | None = None) -> dict[str, Any]:
        """Train one epoch and evaluate; returns the epoch's metrics record."""
        cfg, d = self.cfg, self.d
        epoch = self.epoch + 1
        start = time.perf_counter()
        loader = make_loader(self.data.train, batch_size=self.batch, train=True,
                             workers=self.workers, seed=self.seed, epoch=epoch, rank=d.rank,
                             world=d.world, device=d.device)
        self.net.train()
        self.value_sums, self.value_count = {}, 0
        loss_sum = torch.zeros((), dtype=torch.float64, device=d.device)
        seen = 0
        pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        steps_done = 0
        for x, y in self.batches(loader):
            pending.append((x, y))
            if len(pending) < cfg.grad_accum:
                continue
            seen += self.train_step(pending, loss_sum)
            pending = []
            steps_done += 1
            if on_batch is not None:
                on_batch()
            if stop is not None:
                stop.check(d, every=20, i=steps_done)
            if steps_done % 50 == 0 and not d.active and not torch.isfinite(loss_sum):
                raise FloatingPointError(f"the training loss is {loss_sum.item()} at epoch "
                                         f"{epoch}, step {self.step}; lower lr, or use amp: "
                                         f"bf16 / off")
            if steps_done >= self.steps_per_epoch:
                break
        if stop is not None:
            stop.check(d)
        train_time = time.perf_counter() - start
        if d.active:
            both = torch.stack([loss_sum, torch.tensor(float(seen), dtype=torch.float64,
                                                       device=d.device)])
            dist.all_reduce(both)
            loss_sum, seen = both[0], int(both[1].item())
        train_loss = loss_sum.item() / max(seen, 1)
        if not math.isfinite(train_loss):
            raise FloatingPointError(f"the training loss is {train_loss} at epoch {epoch}; "
                                     f"lower lr, or use amp: bf16 / off")
        self.epoch = epoch
        val = self.evaluate(self.net)
        train_acc = self.evaluate(self.net, self.train_sample())["acc"]
        record: dict[str, Any] = {"epoch": epoch, "train_loss": train_loss,
                                  "val_loss": val["loss"], "val_acc": val["acc"],
                                  "val_nll": val["nll"], "val_ece": val["ece"]}
        if "top5" in val:
            record["val_top5"] = val["top5"]
        record.update({"train_acc": train_acc, "gap": train_acc - val["acc"],
                       "calibration": val["calibration"]})
        if self.ema is not None:
            ema = self.evaluate(self.ema.module)
            record["val_loss_ema"], record["val_acc_ema"] = ema["loss"], ema["acc"]
        elapsed = time.perf_counter() - start
        means = {k: v / self.value_count for k, v in self.value_sums.items()} \
            if self.value_count else {}
        watch = self.watch.as_dict(reset=True) if self.watch is not None else {}
        # The scheduled values next to drop_frac are epoch means, like the measurement.
        for a, h in zip(self.variant.attachments, self.handles):
            if a.kind != "forward":
                continue
            for layer in h.layers:
                for k in h.transform.values():
                    if f"{layer}/{k}" in watch and f"{a.label}/{k}" in means:
                        watch[f"{layer}/{k}"] = means[f"{a.label}/{k}"]
        record.update({"epoch_time": elapsed, "images_per_s": seen / max(train_time, 1e-9),
                       "lr": float(self.optimizer.param_groups[0]["lr"]), "step": self.step,
                       "values": self._values(), "values_mean": means, "watch": watch,
                       "calls": self._calls()})
        return record

    @torch.no_grad()
    def evaluate(self, model: nn.Module, data: Any = None) -> dict[str, Any]:
        """The metrics of :class:`~.metrics.EvalSums` of ``model`` over ``data`` (default: the
        whole validation set; all ranks), in eval mode."""
        d, cfg = self.d, self.cfg
        was = model.training
        model.eval()
        loader = make_loader(self.data.val if data is None else data,
                             batch_size=self.batch * 2, train=False, workers=self.workers,
                             seed=self.seed, epoch=0, rank=d.rank, world=d.world,
                             device=d.device)
        sums = EvalSums(len(self.data.classes), d.device, cfg.label_smoothing)
        for x, y in self.batches(loader):
            with build.autocast(cfg, d.device):
                out = model(x)
            sums.add(out, y)
        if d.active:
            sums.reduce()
        model.train(was)
        return sums.result()

    def train_sample(self) -> Any:
        """The training images whose accuracy (in eval mode) gives the train-validation gap:
        the first ones of the training set, as many as the validation set holds."""
        n = min(len(self.data.val), len(self.data.train))  # type: ignore[arg-type]
        return torch.utils.data.Subset(self.data.train, range(n))
