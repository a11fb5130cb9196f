"""One run of an ablation (a variant with a seed): the training step, evaluation, checkpoints.

The step is the one people use: autocast (``amp: bf16 | fp16``, a ``GradScaler`` for fp16 that
plugdrop's gradient transforms receive), ``channels_last``, gradient accumulation, global
gradient-norm clipping, timm's optimizers (``create_optimizer_v2``), schedulers
(``create_scheduler_v2``, per step, with warm-up) and ``ModelEmaV3``. After every epoch the
run's state (model, optimizer, scheduler, scaler, EMA, plugdrop handles, RNG states) is written
atomically, so a resumed run continues exactly where the last epoch ended.

Under ``torchrun`` each process trains on its shard of every global batch (``batch_size`` is the
global batch) with DistributedDataParallel; validation sums are all-reduced; rank 0 writes.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import plugdrop as pd

from .config import AblationConfig, Variant
from .data import DataSets, make_loader
from .errors import ConfigError
from .model import build_model

# ----------------------------------------------------------------------------- processes


@dataclass
class Dist:
    """This process's place: rank, world size, device."""

    rank: int = 0
    world: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


def resolve_device(name: str, loc: str = "device") -> torch.device:
    """``auto`` -> cuda if available, else cpu; a CUDA device that is not there is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{loc}: device {name!r}, but CUDA is not available here; use "
                          f"device: cpu (or auto)")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(f"{loc}: device {name!r}, but there are "
                          f"{torch.cuda.device_count()} GPUs here")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{loc}: device 'mps' is not available here; use device: cpu")
    return dev


def world_from_env() -> tuple[int, int]:
    """(rank, world) from torchrun's environment (0, 1 when not launched by it)."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def setup_distributed(device: torch.device) -> Dist:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1)."""
    rank, world = world_from_env()
    if world <= 1:
        return Dist(0, 1, device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(rank, world, device)


# ------------------------------------------------------------------------------- signals


class Stopped(Exception):
    """SIGINT or SIGTERM asked the ablation to stop at the next step boundary."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopFlag:
    """SIGINT / SIGTERM set a flag the training loop polls between steps; a second SIGINT
    interrupts at once."""

    def __init__(self) -> None:
        self.signum = 0
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        if self.signum and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def install(self) -> None:
        for s in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[s] = signal.signal(s, self._handler)
            except ValueError:  # not the main thread
                pass

    def restore(self) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}

    def check(self, d: Dist, every: int = 1, i: int = 0) -> None:
        """Raise :class:`Stopped` if a signal arrived (on any rank, under torchrun)."""
        if d.active:
            if i % every:
                return
            flag = torch.tensor([float(self.signum)], device=d.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            self.signum = int(flag.item())
        if self.signum:
            raise Stopped(self.signum)


# --------------------------------------------------------------------------------- setup


def _rng_state() -> dict[str, Any]:
    import numpy as np

    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate(),
                             "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    import numpy as np

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_all(seed: int) -> None:
    import numpy as np

    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def locate(cfg: AblationConfig, msg: str, default: str) -> str:
    """``msg`` prefixed with the location of the setting it is about: the one it starts with
    (``model_kwargs: ...``), else ``default``."""
    key = default
    head = msg.split(":", 1)[0].strip()
    if head in cfg.locs:
        key = head
    elif default == "model" and "model_kwargs" in cfg.locs and (
            "keyword" in msg or "kwarg" in msg or any(f"'{k}'" in msg for k in cfg.model_kwargs)):
        key = "model_kwargs"
    loc = cfg.loc(key)
    return msg if msg.startswith(loc) else f"{loc}: {msg}"


def make_model(cfg: AblationConfig, num_classes: int) -> nn.Module:
    """The config's model; errors name the ``model`` (or ``model_kwargs``/``pretrained``)
    setting."""
    try:
        return build_model(cfg.model, num_classes=num_classes, model_kwargs=cfg.model_kwargs,
                           pretrained=cfg.pretrained)
    except ConfigError as e:
        raise ConfigError(locate(cfg, " ".join(str(e).split()), "model")) from None


def _autocast(cfg: AblationConfig, device: torch.device) -> contextlib.AbstractContextManager:
    if cfg.amp == "off":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if cfg.amp == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def _loss_fn(cfg: AblationConfig) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    smoothing = cfg.label_smoothing

    def criterion(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), target, label_smoothing=smoothing)
    return criterion


def per_process_batch(cfg: AblationConfig, world: int) -> int:
    """The loader batch of one process for one micro-step: ``batch_size`` is the global batch
    of one optimizer step, split over processes and accumulation steps."""
    parts = world * cfg.grad_accum
    if cfg.batch_size % parts:
        raise ConfigError(f"{cfg.loc('batch_size')}: batch_size {cfg.batch_size} is the global "
                          f"batch; it must divide by processes x grad_accum = {world} x "
                          f"{cfg.grad_accum}; use a multiple of {parts}")
    return cfg.batch_size // parts


def watch_selector(cfg: AblationConfig) -> Any:
    """The layers watched per epoch: the config's ``watch``, or (auto) every layer any variant
    attaches a forward transform to, so that all variants report the same layers."""
    if cfg.watch is False:
        return None
    if cfg.watch == "auto":
        return cfg.attached_layers() or None
    return cfg.watch


def _watchable(model: nn.Module, selector: Any, auto: bool) -> Any:
    """In auto mode, the selectors of other variants that match nothing in this model are
    left out (the variant that attaches them reports the error); a typo in ``watch:``
    itself fails."""
    if not auto:
        return selector
    keep = []
    for sel in selector:
        try:
            pd.select(model, sel)
            keep.append(sel)
        except (ValueError, TypeError):
            pass
    return keep or None


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
        batch = per_process_batch(cfg, d.world)
        model = make_model(cfg, len(data.classes)).to(d.device)
        if cfg.channels_last:
            model = model.to(memory_format=torch.channels_last)
        try:
            probe = make_loader(data.train, batch_size=batch, train=True, workers=0, seed=seed,
                                epoch=0, rank=d.rank, world=d.world, device=d.device)
        except ConfigError as e:
            raise ConfigError(locate(cfg, " ".join(str(e).split()), "batch_size")) from None
        steps = len(probe) // cfg.grad_accum
        if steps < 1:
            raise ConfigError(f"{cfg.loc('batch_size')}: batch_size {cfg.batch_size} x "
                              f"grad_accum is more than the {_size(data.train)} training images "
                              f"(one optimizer step needs a full batch); lower batch_size")
        total = steps * cfg.epochs
        scaler = torch.amp.GradScaler(d.device.type, enabled=cfg.amp == "fp16")
        handles = []
        for a in variant.attachments:
            try:
                handles.append(a.attach(model, total, scaler if cfg.amp == "fp16" else None))
            except (ValueError, TypeError) as e:
                for h in handles:
                    h.remove()
                raise ConfigError(f"{a.loc}: variant {variant.name!r}: {_one_line(e)}") \
                    from None
        import timm.optim
        import timm.scheduler

        opt_kwargs: dict[str, Any] = {}
        if cfg.optimizer in ("sgd", "nesterov", "momentum", "sgdp", "sgdw", "lars", "larc",
                             "nlars", "nlarc", "rmsprop", "rmsproptf"):
            opt_kwargs["momentum"] = cfg.momentum
        try:
            optimizer = timm.optim.create_optimizer_v2(
                model, opt=cfg.optimizer, lr=cfg.lr, weight_decay=cfg.weight_decay,
                filter_bias_and_bn=False, **opt_kwargs)
        except (ValueError, TypeError, ImportError) as e:
            raise ConfigError(f"{cfg.loc('optimizer')}: optimizer {cfg.optimizer!r}: "
                              f"{_one_line(e)}") from None
        sched_name = cfg.lr_schedule
        extra: dict[str, Any] = {}
        if sched_name == "constant":
            sched_name, extra = "step", {"decay_epochs": 10 * cfg.epochs + 1,
                                         "decay_rate": 1.0}
        scheduler, _ = timm.scheduler.create_scheduler_v2(
            optimizer, sched=sched_name, num_epochs=cfg.epochs, warmup_epochs=cfg.warmup_epochs,
            warmup_lr=cfg.warmup_lr, min_lr=cfg.min_lr, step_on_epochs=False,
            updates_per_epoch=steps, **extra)
        for h in handles:
            h.bind(optimizer)
        ema = None
        if cfg.ema is not None:
            from timm.utils import ModelEmaV3

            ema = ModelEmaV3(model, decay=cfg.ema)
        watched = watch_selector(cfg)
        if watched is not None:
            watched = _watchable(model, watched, cfg.watch == "auto")
        watch = None
        if watched is not None:
            try:
                watch = pd.watch(model, watched)
            except (ValueError, TypeError) as e:
                raise ConfigError(f"{cfg.loc('watch')}: watch: {_one_line(e)}") from None
        net: nn.Module = model
        if d.active and ddp:
            net = nn.parallel.DistributedDataParallel(
                model, device_ids=[d.device.index] if d.device.type == "cuda" else None)
        return cls(cfg, variant, seed, data, d, workers, model, net, optimizer, scheduler,
                   scaler, ema, handles, watch, steps, batch)

    def close(self) -> None:
        if self.watch is not None:
            self.watch.remove()
        for h in self.handles:
            h.remove()

    # -- state ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        rng = _rng_state()
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
        _set_rng_state(rng[self.d.rank] if self.d.rank < len(rng) else rng[0])
        self.epoch = int(state["epoch"])
        self.step = int(state["step"])

    # -- training -------------------------------------------------------------------------

    def _batches(self, loader: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
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

    def train_step(self, batches: list[tuple[torch.Tensor, torch.Tensor]],
                   loss_sum: torch.Tensor) -> int:
        """One optimizer step over ``grad_accum`` micro-batches; returns the images seen."""
        cfg, net = self.cfg, self.net
        criterion = _loss_fn(cfg)
        mixup = next((h for h in self.handles if isinstance(h, pd.MixupHandle)), None)
        seen = 0
        for j, (x, y) in enumerate(batches):
            last = j == len(batches) - 1
            sync = contextlib.nullcontext() if last or not isinstance(
                net, nn.parallel.DistributedDataParallel) else net.no_sync()
            with sync:
                with _autocast(cfg, self.d.device):
                    logits = net(x)
                    loss = mixup.loss(criterion, logits, y) if mixup is not None \
                        else criterion(logits, y)
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
        for x, y in self._batches(loader):
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
        val_loss, val_acc = self.evaluate(self.net)
        record: dict[str, Any] = {"epoch": epoch, "train_loss": train_loss,
                                  "val_loss": val_loss, "val_acc": val_acc}
        if self.ema is not None:
            record["val_loss_ema"], record["val_acc_ema"] = self.evaluate(self.ema.module)
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
                       "values": self._values(), "values_mean": means, "watch": watch})
        return record

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> tuple[float, float]:
        """Validation loss and accuracy over the whole validation set (all ranks)."""
        d, cfg = self.d, self.cfg
        was = model.training
        model.eval()
        loader = make_loader(self.data.val, batch_size=self.batch * 2, train=False,
                             workers=self.workers, seed=self.seed, epoch=0, rank=d.rank,
                             world=d.world, device=d.device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=d.device)
        correct = torch.zeros((), dtype=torch.float64, device=d.device)
        n = torch.zeros((), dtype=torch.float64, device=d.device)
        for x, y in self._batches(loader):
            with _autocast(cfg, d.device):
                out = model(x)
            loss_sum += F.cross_entropy(out.float(), y, reduction="sum",
                                        label_smoothing=cfg.label_smoothing).double()
            correct += (out.argmax(1) == y).sum().double()
            n += len(y)
        if d.active:
            both = torch.stack([loss_sum, correct, n])
            dist.all_reduce(both)
            loss_sum, correct, n = both[0], both[1], both[2]
        model.train(was)
        total = max(n.item(), 1.0)
        return loss_sum.item() / total, correct.item() / total

    # -- the dry step ---------------------------------------------------------------------

    def dry_step(self) -> None:
        """One training step and one evaluation batch on real data, on a copy of nothing:
        call it on a throw-away trainer. Errors become one-line :class:`ConfigError`."""
        loader = make_loader(self.data.train, batch_size=self.batch, train=True, workers=0,
                             seed=self.seed, epoch=0, rank=self.d.rank, world=self.d.world,
                             device=self.d.device)
        it = self._batches(loader)
        batches = [next(it) for _ in range(self.cfg.grad_accum)]
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.d.device)
        try:
            self.model.train()
            self.train_step(batches, loss_sum)
            if self.watch is not None:
                self.watch.as_dict(reset=True)
            self.model.eval()
            with torch.no_grad(), _autocast(self.cfg, self.d.device):
                self.model(batches[0][0][:2])
        except (ValueError, TypeError, RuntimeError, NotImplementedError, AssertionError,
                IndexError) as e:
            msg = _one_line(e)
            if "Input height" in msg or "Input width" in msg or "img_size" in msg:
                raise ConfigError(f"{self.cfg.loc('model')}: model {self.cfg.model!r} does not "
                                  f"take {self.cfg.image_size}px images ({msg}); add "
                                  f"model_kwargs: {{img_size: {self.cfg.image_size}}}") from None
            loc = self.variant.loc
            if len(self.variant.attachments) == 1:
                loc = self.variant.attachments[0].loc
            raise ConfigError(f"{loc}: variant {self.variant.name!r}: the dry training step "
                              f"failed: {msg}") from None
        if not torch.isfinite(loss_sum):
            raise ConfigError(f"{self.variant.loc}: variant {self.variant.name!r}: the loss of "
                              f"the dry training step is {loss_sum.item()}")


def _size(ds: Any) -> int:
    return len(ds)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text or type(e).__name__


# ------------------------------------------------------------------------------ Grad-CAM


def _output_shapes(model: nn.Module, x: torch.Tensor, names: list[str]) -> dict[str, tuple]:
    shapes: dict[str, tuple] = {}
    mods = dict(model.named_modules())
    hooks = []
    for name in names:
        def hook(mod: nn.Module, inp: Any, out: Any, name: str = name) -> None:
            if isinstance(out, torch.Tensor) and name not in shapes:
                shapes[name] = tuple(out.shape)
        hooks.append(mods[name].register_forward_hook(hook))
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
        model.train(was)
    return shapes


def _map_size(shape: tuple, prefix_tokens: int) -> int:
    if len(shape) == 4:
        return min(shape[2], shape[3])
    if len(shape) == 3:  # tokens
        n = shape[1] - prefix_tokens
        side = int(math.isqrt(max(n, 0)))
        return side if side * side == n else 0
    return 0


def gradcam_layer(cfg: AblationConfig, model: nn.Module, x: torch.Tensor) -> str | None:
    """The Grad-CAM layer: the config's, or (auto) the last regularized layer whose map is at
    least 4x4, else the last module of the model with such a map (never a 1x1 "heatmap")."""
    if cfg.gradcam is False:
        return None
    if isinstance(cfg.gradcam, Mapping) and cfg.gradcam.get("layer", "auto") != "auto":
        return str(cfg.gradcam["layer"])
    prefix = int(getattr(model, "num_prefix_tokens", 0) or 0)
    candidates: list[str] = []
    layers = cfg.attached_layers()
    if layers:
        for sel in layers:
            try:
                candidates += [n for n in pd.select(model, sel) if n not in candidates]
            except ValueError:
                pass
        order = [n for n, _ in model.named_modules()]
        candidates.sort(key=order.index)
        shapes = _output_shapes(model, x, candidates)
        good = [n for n in candidates if _map_size(shapes.get(n, ()), prefix) >= 4]
        if good:
            return good[-1]
    names = [n for n, _ in model.named_modules() if n]
    shapes = _output_shapes(model, x, names)
    good = [n for n in names if n in shapes and _map_size(shapes[n], prefix) >= 4]
    return good[-1] if good else None


def save_gradcam(cfg: AblationConfig, model: nn.Module, data: DataSets, d: Dist,
                 path: Path) -> str | None:
    """Grad-CAM overlays of the first validation images; returns the layer, or None."""
    n = int(cfg.gradcam.get("images", 8)) if isinstance(cfg.gradcam, Mapping) else 8
    xs, ys = [], []
    for i in range(min(n, len(data.val))):  # type: ignore[arg-type]
        x, y = data.val[i]
        xs.append(x)
        ys.append(int(y))
    if not xs:
        return None
    x = torch.stack(xs).to(d.device)
    if cfg.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    layer = gradcam_layer(cfg, model, x)
    if layer is None:
        return None
    shapes = _output_shapes(model, x[:1], [layer])
    layout = "tokens" if len(shapes.get(layer, ())) == 3 else None
    model.eval()
    cam = pd.gradcam(model, x, layer, layout=layout)
    with torch.no_grad():
        pred = model(x).argmax(1).cpu()
    titles = [f"{data.classes[t]}->{data.classes[int(p)]}" for t, p in zip(ys, pred)]
    pd.save_gradcam(path, x.float().cpu(), cam.float().cpu(), titles=titles)
    return layer
