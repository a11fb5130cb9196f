"""One run of an ablation (a variant with a seed): the training step, an epoch, evaluation, and
the state a checkpoint holds.

The step is the one people use: autocast (``amp: bf16 | fp16``, a ``GradScaler`` for fp16 that
plugdrop's gradient transforms receive), ``channels_last``, gradient accumulation, global
gradient-norm clipping, timm's optimizers and per-step schedulers and ``ModelEmaV3``. Every
coordinated transform of the variant (ManifoldMixup, PatchUp) mixes the targets through
:func:`plugdrop.mixed_loss`, whatever its class. After every epoch the run's state (model,
optimizer, scheduler, scaler, EMA, plugdrop handles, RNG states) is the checkpoint's, and so
it is in the middle of an epoch (``checkpoint_every``, a stopping signal), with the position in
the epoch (the batches taken, the partial sums, the watch's running statistics), so a resumed
run continues exactly at the step where it stopped.

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

from ..config import AblationConfig, CompileSpec, Variant, batch_per_process
from ..data import DataSets, make_loader
from ..errors import ConfigError, one_line
from . import build
from .distributed import Dist
from .metrics import EvalSums
from .rng import rng_state, seed_all, set_rng_state
from .cadence import Cadence
from .signals import StopFlag, Stopped

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
    #: where the next epoch resumes inside itself (a checkpoint's position), or None
    position: dict[str, Any] | None = None

    @property
    def eval_batch(self) -> int:
        """Images per forward pass of :meth:`evaluate`: ``eval_batch_size``, or with ``auto``
        twice the training's micro-batch per process."""
        size = self.cfg.eval_batch_size
        return self.batch * 2 if size == "auto" else int(size)

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def create(cls, cfg: AblationConfig, variant: Variant, seed: int, data: DataSets, d: Dist,
               workers: int, *, ddp: bool = True) -> "Trainer":
        """Build the model, attach the variant, make optimizer, scheduler, scaler and EMA.
        Errors a config can cause are :class:`ConfigError` with the setting's location."""
        seed_all(seed)
        batch = batch_per_process(cfg, d.world)
        model = build.make_model(cfg, len(data.classes)).to(d.device)
        if cfg.channels_last:
            model = model.to(memory_format=torch.channels_last)
        try:
            probe = make_loader(data.train, batch_size=batch, train=True, workers=0, seed=seed,
                                epoch=0, rank=d.rank, world=d.world, device=d.device)
        except ConfigError as e:
            raise ConfigError(build.locate(cfg, one_line(e), "batch_size")) from None
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
        if isinstance(cfg.compile, CompileSpec):  # after attaching: hooks traced with it
            net = torch.compile(net, backend=cfg.compile.backend,  # type: ignore[assignment]
                                mode=cfg.compile.mode)
        return cls(cfg, variant, seed, data, d, workers, model, net, optimizer, scheduler,
                   scaler, ema, handles, watch, steps, batch)

    def close(self) -> None:
        if self.watch is not None:
            self.watch.remove()
        for h in self.handles:
            h.remove()

    # -- state ----------------------------------------------------------------------------

    def state_dict(self, position: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The run's state: after ``epoch`` finished epochs, and, in the middle of the next one,
        where it is (``position``: this process's batches and partial sums; gathered from every
        rank under torchrun, as the random states are). Tensors and plain data only."""
        mine: dict[str, Any] = {"rng": rng_state(), "position": dict(position or {}) or None,
                                "watch": self.watch.state_dict()
                                if position and self.watch is not None else None}
        if mine["watch"] is not None:
            mine["watch"]["sums"] = {k: v.cpu() for k, v in mine["watch"]["sums"].items()}
        if self.d.active:
            ranks: list[Any] = [None] * self.d.world
            dist.all_gather_object(ranks, mine)
        else:
            ranks = [mine]
        return {"epoch": self.epoch, "step": self.step, "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                "ema": self.ema.state_dict() if self.ema is not None else None,
                "handles": [h.state_dict() for h in self.handles],
                "rng": [r["rng"] for r in ranks],
                "position": [r["position"] for r in ranks] if position else None,
                "watch": [r["watch"] for r in ranks] if mine["watch"] is not None else None,
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

        def mine(per_rank: list[Any]) -> Any:
            return per_rank[self.d.rank] if self.d.rank < len(per_rank) else per_rank[0]

        set_rng_state(mine(state["rng"]))
        self.epoch = int(state["epoch"])
        self.step = int(state["step"])
        self.position = mine(state["position"]) if state.get("position") else None
        if self.watch is not None and state.get("watch"):
            w = mine(state["watch"])
            self.watch.load_state_dict(dict(w, sums={k: v.to(self.d.device)
                                                     for k, v in w["sums"].items()}))

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
                    on_batch: Callable[[], None] | None = None,
                    checkpoint: Callable[[dict[str, Any]], None] | None = None,
                    cadence: Cadence | None = None) -> dict[str, Any]:
        """Train one epoch (or the rest of it, after a resume in its middle) and evaluate
        (:meth:`evaluates`); returns the epoch's metrics record (without the validation
        metrics of :meth:`validation` after an epoch that is not evaluated).

        Between optimizer steps, when ``cadence`` says so or a signal arrived (``stop``),
        ``checkpoint`` gets :meth:`state_dict` with the position in the epoch; after a signal
        the run then raises :class:`~.signals.Stopped`.
        """
        cfg, d = self.cfg, self.d
        epoch = self.epoch + 1
        start = time.perf_counter()
        pos, self.position = self.position or {}, None
        skipped = int(pos.get("batches", 0))
        loader = make_loader(self.data.train, batch_size=self.batch, train=True,
                             workers=self.workers, seed=self.seed, epoch=epoch, rank=d.rank,
                             world=d.world, device=d.device, start_batch=skipped)
        self.net.train()
        self.value_sums = dict(pos.get("value_sums", {}))
        self.value_count = int(pos.get("value_count", 0))
        loss_sum = torch.tensor(float(pos.get("loss_sum", 0.0)), dtype=torch.float64,
                                device=d.device)
        seen = int(pos.get("seen", 0))
        steps_done = int(pos.get("steps", 0))
        before = float(pos.get("train_time", 0.0))
        pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        taken = 0

        def position() -> dict[str, Any]:
            consumed = getattr(loader, "consumed", taken)
            return {"batches": skipped + consumed, "steps": steps_done,
                    "loss_sum": float(loss_sum.item()), "seen": seen,
                    "value_sums": dict(self.value_sums), "value_count": self.value_count,
                    "train_time": before + time.perf_counter() - start}

        def between_steps(every: int) -> None:
            by_steps, by_time = False, False  # an epoch's end checkpoints anyway
            if cadence is not None and steps_done < self.steps_per_epoch:
                by_steps, by_time = cadence.due(self.step)
            signum = 0
            if stop is not None:
                signum, by_time = stop.poll(d, by_time, every=every, i=steps_done)
            elif d.active:
                by_time = False  # no agreement without a flag to poll
            if checkpoint is not None and (signum or by_steps or by_time):
                checkpoint(self.state_dict(position()))
                if cadence is not None:
                    cadence.done()
            if signum:
                raise Stopped(signum)

        for x, y in (self.batches(loader) if steps_done < self.steps_per_epoch else ()):
            taken += 1
            pending.append((x, y))
            if len(pending) < cfg.grad_accum:
                continue
            seen += self.train_step(pending, loss_sum)
            pending = []
            steps_done += 1
            if on_batch is not None:
                on_batch()
            between_steps(every=20)
            if steps_done % 50 == 0 and not d.active and not torch.isfinite(loss_sum):
                raise FloatingPointError(f"the training loss is {loss_sum.item()} at epoch "
                                         f"{epoch}, step {self.step}; lower lr, or use amp: "
                                         f"bf16 / off")
            if steps_done >= self.steps_per_epoch:
                break
        between_steps(every=1)  # a signal in the last steps: the epoch's training is kept
        train_time = before + time.perf_counter() - start
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
        record: dict[str, Any] = {"epoch": epoch, "train_loss": train_loss}
        if self.evaluates(epoch):
            record.update(self.validation())
        elapsed = before + time.perf_counter() - start
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

    def evaluates(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` ends with an evaluation: every ``eval_every``-th epoch and
        the last one."""
        return epoch % self.cfg.eval_every == 0 or epoch >= self.cfg.epochs

    def validation(self) -> dict[str, Any]:
        """The validation metrics of an epoch's record (``val_loss``, ``val_acc``, ``val_nll``,
        ``val_ece``, ``val_top5`` with more than 5 classes, ``train_acc``, ``gap``,
        ``calibration``, and the EMA's ``val_loss_ema``, ``val_acc_ema``); evaluating draws
        nothing from the training's random streams."""
        val = self.evaluate(self.net)
        train_acc = self.evaluate(self.net, self.train_sample())["acc"]
        out: dict[str, Any] = {"val_loss": val["loss"], "val_acc": val["acc"],
                               "val_nll": val["nll"], "val_ece": val["ece"]}
        if "top5" in val:
            out["val_top5"] = val["top5"]
        out.update({"train_acc": train_acc, "gap": train_acc - val["acc"],
                    "calibration": val["calibration"]})
        if self.ema is not None:
            ema = self.evaluate(self.ema.module)
            out["val_loss_ema"], out["val_acc_ema"] = ema["loss"], ema["acc"]
        return out

    @torch.no_grad()
    def evaluate(self, model: nn.Module, data: Any = None) -> dict[str, Any]:
        """The metrics of :class:`~.metrics.EvalSums` of ``model`` over ``data`` (default: the
        whole validation set; all ranks), in eval mode."""
        d, cfg = self.d, self.cfg
        was = model.training
        model.eval()
        loader = make_loader(self.data.val if data is None else data,
                             batch_size=self.eval_batch, train=False, workers=self.workers,
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
