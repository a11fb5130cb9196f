"""Training runs of an ablation: one (variant, seed) at a time, in one process or under
``torchrun`` with DistributedDataParallel. Private; see ``plugdrop ablate``.

Under ``torchrun`` every rank runs the same sequence of runs; each rank trains on its shard of
every batch order (the data is sharded, the model replicated by DDP), validation sums are
all-reduced, and only rank 0 reports. Model weights start identical on every rank (same seed);
masks are drawn from a per-rank generator state (``seed * 1000 + rank``) so ranks do not drop
the same blocks of different samples in lockstep.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from . import _attach, observe
from ._ablate_config import AblationConfig, ConfigError, TransformSpec
from ._ablate_data import Dataset


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r}: CUDA is not available here; use device: cpu")
    return dev


def setup_distributed(device_name: str) -> Dist:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    device = resolve_device(device_name)
    if world <= 1:
        return Dist(0, 1, device)
    rank = int(os.environ["RANK"])
    if device.type == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(rank, world, device)


def create_model(name: str, num_classes: int | None = None, **kwargs: Any) -> nn.Module:
    """A timm model by name (``pretrained=False``) or ``package.module:factory``."""
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"model {name!r}: cannot import {attr} from {module_name} ({e})") \
                from None
        if num_classes is not None:
            kwargs.setdefault("num_classes", num_classes)
        try:
            return factory(**kwargs)
        except TypeError:
            kwargs.pop("num_classes", None)
            return factory(**kwargs)
    try:
        import timm
    except ImportError as e:  # pragma: no cover - timm is in the cli extra
        raise RuntimeError("plugdrop ablate/layers need timm: pip install 'plugdrop[cli]'") from e
    if not timm.is_model(name):
        close = timm.list_models(f"*{name[:6]}*")[:8]
        raise ConfigError(f"model {name!r} is not a timm model"
                          + (f"; similar: {', '.join(close)}" if close else ""))
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    return timm.create_model(name, pretrained=False, **kwargs)


def check_selectors(cfg: AblationConfig, num_classes: int) -> None:
    """Fail before training if any selector of any variant matches nothing."""
    model = create_model(cfg.model, num_classes, **cfg.model_kwargs)
    for variant, specs in cfg.variants.items():
        for spec in specs:
            try:
                _attach.select(model, spec.layers, exclude=spec.exclude)
            except (ValueError, TypeError) as e:
                raise ConfigError(f"{spec.layers_loc}: variant {variant!r}: {e}") from None


def _batches(n: int, batch_size: int, gen: torch.Generator, d: Dist):
    """Shuffled index batches; under DDP each rank takes its shard of every global batch."""
    perm = torch.randperm(n, generator=gen)
    global_bs = batch_size * d.world
    for start in range(0, n, global_bs):
        chunk = perm[start:start + global_bs]
        if len(chunk) < d.world:
            break  # too few samples left to give every rank one
        yield chunk[d.rank::d.world]


def _steps_per_epoch(n: int, batch_size: int, d: Dist) -> int:
    global_bs = batch_size * d.world
    full, rest = divmod(n, global_bs)
    return full + (1 if rest >= d.world else 0)


@dataclass
class EpochRecord:
    variant: str
    seed: int
    epoch: int
    train_loss: float
    val_loss: float
    val_acc: float
    epoch_time: float
    lr: float
    values: dict[str, float]
    watch: dict[str, float]


def _evaluate(model: nn.Module, data: Dataset, batch_size: int, d: Dist,
              label_smoothing: float) -> tuple[float, float]:
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=d.device)
    correct = torch.zeros((), dtype=torch.float64, device=d.device)
    idx = torch.arange(len(data.x_val))[d.rank::d.world]
    with torch.no_grad():
        for start in range(0, len(idx), batch_size * 4):
            b = idx[start:start + batch_size * 4]
            x = data.x_val[b].to(d.device)
            y = data.y_val[b].to(d.device)
            out = model(x)
            loss_sum += F.cross_entropy(out, y, reduction="sum",
                                        label_smoothing=label_smoothing).double()
            correct += (out.argmax(1) == y).sum().double()
    if d.active:
        both = torch.stack([loss_sum, correct])
        dist.all_reduce(both)
        loss_sum, correct = both[0], both[1]
    n = len(data.x_val)
    return loss_sum.item() / n, correct.item() / n


def train_run(cfg: AblationConfig, variant: str, seed: int, data: Dataset, d: Dist,
              progress: Callable[..., Any] | None = None, out_dir: Any = None
              ) -> list[EpochRecord]:
    """Train one variant with one seed; returns one record per epoch (on every rank)."""
    specs: list[TransformSpec] = cfg.variants[variant]
    torch.manual_seed(seed)
    model = create_model(cfg.model, data.num_classes, **cfg.model_kwargs).to(d.device)
    steps = _steps_per_epoch(len(data.x_train), cfg.batch_size, d)
    total = steps * cfg.epochs
    handles = [_attach.attach(model, s.layers, s.build(total), exclude=s.exclude, where=s.where,
                              element=s.element) for s in specs]
    net: nn.Module = model
    if d.active:
        net = nn.parallel.DistributedDataParallel(
            model, device_ids=[d.device.index] if d.device.type == "cuda" else None)
    if cfg.optimizer == "adamw":
        opt: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr,
                                                       weight_decay=cfg.weight_decay)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                              weight_decay=cfg.weight_decay, nesterov=cfg.momentum > 0)
    if cfg.lr_schedule == "cosine":
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    else:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    for h in handles:
        h.bind(opt)
    mixup = next((h for h in handles if isinstance(h, _attach.MixupHandle)), None)

    def criterion(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, target, label_smoothing=cfg.label_smoothing)

    watched = watch_selector(cfg)
    monitor = observe.watch(model, watched) if watched else None
    torch.manual_seed(seed * 1000 + d.rank)  # masks: per rank
    gen = torch.Generator().manual_seed(seed)  # batch order: the same on every rank
    records = []
    for epoch in range(1, cfg.epochs + 1):
        net.train()
        start = time.perf_counter()
        loss_sum = torch.zeros((), dtype=torch.float64, device=d.device)
        seen = 0
        for i, b in enumerate(_batches(len(data.x_train), cfg.batch_size, gen, d)):
            x = data.x_train[b].to(d.device)
            y = data.y_train[b].to(d.device)
            logits = net(x)
            if mixup is not None:
                loss = mixup.loss(criterion, logits, y)
            else:
                loss = criterion(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.detach().double() * len(b)
            seen += len(b)
            if progress is not None:
                progress("batch", i + 1, steps)
        if d.active:
            both = torch.stack([loss_sum, torch.tensor(float(seen), dtype=torch.float64,
                                                       device=d.device)])
            dist.all_reduce(both)
            loss_sum, seen = both[0], int(both[1].item())
        train_loss = loss_sum.item() / max(seen, 1)
        val_loss, val_acc = _evaluate(net, data, cfg.batch_size, d, cfg.label_smoothing)
        elapsed = time.perf_counter() - start
        values = {f"{s.transform}@{s.layers}:{k}": v for s, h in zip(specs, handles)
                  for k, v in h.transform.values().items()}
        stats = monitor.as_dict(reset=True) if monitor is not None else {}
        records.append(EpochRecord(variant, seed, epoch, train_loss, val_loss, val_acc, elapsed,
                                   sched.get_last_lr()[0], values, stats))
        if progress is not None:
            progress("epoch", epoch, cfg.epochs, records[-1])
    if monitor is not None:
        monitor.remove()
    if d.main and out_dir is not None and seed == cfg.seeds[0]:
        _gradcam_overlays(cfg, model, data, variant, out_dir, d)
    for h in handles:
        h.remove()
    return records


def watch_selector(cfg: AblationConfig) -> Any:
    """The layers watched per epoch: the config's ``watch``, or (auto) every layer any variant
    attaches a forward transform to, so all variants report the same layers."""
    if cfg.watch is False:
        return None
    if cfg.watch == "auto":
        return cfg.attached_layers() or None
    return cfg.watch


def gradcam_layer(cfg: AblationConfig, model: nn.Module) -> str | None:
    """The layer of the Grad-CAM overlays: the config's, or (auto) the last module in
    ``named_modules()`` order that any variant regularizes."""
    if cfg.gradcam is False:
        return None
    if isinstance(cfg.gradcam, dict) and cfg.gradcam.get("layer"):
        return cfg.gradcam["layer"]
    layers = cfg.attached_layers()
    if not layers:
        return None
    names = _attach.select(model, layers)
    return names[-1] if names else None


def _gradcam_overlays(cfg: AblationConfig, model: nn.Module, data: Dataset, variant: str,
                      out_dir: Any, d: Dist) -> None:
    from pathlib import Path

    layer = gradcam_layer(cfg, model)
    if layer is None:
        return
    n = cfg.gradcam.get("images", 8) if isinstance(cfg.gradcam, dict) else 8
    x = data.x_val[:n].to(d.device)
    y = data.y_val[:n]
    model.eval()
    try:
        cam = observe.gradcam(model, x, layer)
    except ValueError as e:  # e.g. a layer whose output is no feature map
        print(f"plugdrop ablate: no Grad-CAM for {variant!r} at {layer!r}: {e}", file=sys.stderr)
        return
    with torch.no_grad():
        pred = model(x).argmax(1).cpu()
    titles = [f"{data.classes[int(t)]}->{data.classes[int(p)]}" for t, p in zip(y, pred)]
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    observe.save_gradcam(Path(out_dir) / f"gradcam_{variant}.png", x.cpu(), cam.cpu(),
                         titles=titles)


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "torch": torch.__version__}
    for name in ("timm", "plugdrop", "numpy", "sklearn"):
        try:
            out[name] = importlib.import_module(name).__version__
        except Exception:
            pass
    return out
