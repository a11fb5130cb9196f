"""What both trainer callbacks do: attach a spec to the model (or one of its submodules) at the
start of each training, keep the schedules at the trainer's optimizer step (a resumed training
continues them), report the values each step used, and take it all off at the end."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch.nn as nn

import plugdrop as pd

from ._resume import ResumeWarning, Saved, changes

__all__ = ["Regularizer", "RegularizeCallback", "ResumeWarning", "metrics_of", "missing_extra",
           "run_spec", "spec_arg"]


def missing_extra(framework: str, extra: str, error: ImportError) -> ImportError:
    """The one-line error of an integration whose framework is not installed."""
    return ImportError(f"plugdrop.integrations.{extra} needs {framework}, which is not "
                       f"installed ({error}); install it with: pip install 'plugdrop[{extra}]'")


class Regularizer:
    """The spec, parsed at once (mistakes fail when the callback is made, not hours later at
    the first step), and the group it attaches for each training."""

    def __init__(self, spec: Any, module: str | None, steps: int | None, watch: Any,
                 remove_at_end: bool, source: str | None, example_input: Any = None) -> None:
        if module is not None and not isinstance(module, str):
            raise TypeError(f"module= names a submodule by its dotted name ('model', "
                            f"'backbone.encoder'), got {type(module).__name__}")
        if isinstance(steps, bool) or steps is not None and (
                not isinstance(steps, int) or steps < 1):
            raise pd.SettingError(f"steps= takes a whole number of steps >= 1 (or None: the "
                                  f"trainer's total), got {steps!r}")
        self.specs = pd.parse_spec(spec, source=source)
        self.module = module
        self.steps = steps
        self.watch_selector = watch
        self.remove_at_end = remove_at_end
        self.example_input = example_input
        self.group: pd.AttachmentGroup | None = None
        self.watch: pd.Watch | None = None
        #: what the schedules without ``steps:`` span in the current training
        self.total: int | None = None
        self._watched: list[tuple[pd.Handle, str]] = []
        self._in_use: dict[str, float] = {}
        self._in_use_at: dict[str, float] = {}

    def plain_spec(self) -> list[dict[str, Any]]:
        """The spec as plain data (JSON, YAML), to store or recreate the callback from."""
        return [s.describe() for s in self.specs]

    def target(self, root: nn.Module) -> nn.Module:
        if self.module is None:
            return root
        try:
            return root.get_submodule(self.module)
        except AttributeError:
            names = [n for n, _ in root.named_children()]
            raise pd.SelectorError(f"module={self.module!r}: {type(root).__name__} has no such "
                                   f"submodule; its children are {', '.join(names) or 'none'}"
                                   ) from None

    def attach(self, root: nn.Module, total: int | None, unknown: str = "") -> pd.AttachmentGroup:
        """Attach the spec to ``root`` (its ``module`` submodule) for one training, at step 0:
        what an earlier training left attached is taken off first, and the schedules written
        without ``steps:`` span ``steps=`` or the training's ``total`` optimizer steps.

        Raises:
            SpecError: a schedule needs the training's length and neither is known
                (``unknown`` says why the trainer cannot tell it).
            SelectorError, AttachError: what :func:`plugdrop.attach_all` raises.
        """
        model = self.target(root)
        span = self.steps or total
        if span is None:
            self._need_steps(unknown)
        self.remove()
        example = self.example_input
        if example is not None:
            device = next((p.device for p in model.parameters()), None)
            example = _to(example, device) if device is not None else example
        self.group = pd.attach_all(model, self.specs, steps=span, example_input=example)
        self.total = span
        self._in_use, self._in_use_at, self._watched = {}, {}, []
        if self.watch_selector is not None:
            self.watch = pd.watch(model, self.watch_selector)
            names = set(pd.select(model, self.watch_selector))
            self._watched = [(h, layer) for h in self.group for layer in h.layers
                             if layer in names]
        return self.group

    def _need_steps(self, unknown: str) -> None:
        for s in self.specs:
            for setting, kind in s.needs_steps.items():
                raise pd.SpecError(
                    f"{s.loc + ': ' if s.loc else ''}{setting}: the {kind} schedule spans the "
                    f"training (it has no 'steps:'), and "
                    f"{unknown or 'the trainer does not give its length'}: give "
                    f"Regularize(steps=N), the optimizer steps it spans, or 'steps:' in the "
                    f"schedule")

    def move_to(self, step: int, each: Sequence[int] | None = None) -> None:
        """Put every schedule at ``step`` (or attachment ``i`` at ``each[i]``), forwards or
        backwards."""
        if self.group is not None:
            for i, h in enumerate(self.group):
                h.load_state_dict({"step": int(each[i]) if each is not None else int(step)})

    def sync(self, step: int) -> None:
        """Put the schedules at optimizer step ``step`` (never backwards)."""
        if self.group is not None and step > self.group.step_count:
            self.group.step(step - self.group.step_count)

    def resume(self, saved: Saved | None, trainer_step: int) -> str | None:
        """Put the schedules where a resumed training continues them and say, for a warning,
        why that is not an exact resume (``None`` when it is).

        The checkpoint's attachments doing what those given now do (however written): each
        continues at its saved step. Other attachments: every schedule continues at the saved
        step (``trainer_step`` when ``saved`` has none), the attachments given now in force.
        No saved state: the trainer's step.
        """
        if self.group is None:
            return None
        if saved is None:
            self.move_to(trainer_step)
            return (f"the checkpoint holds no state of this callback; the schedules start at "
                    f"the trainer's step {trainer_step}") if trainer_step > 0 else None
        change = changes(saved, self.specs, self.module, self.total)
        if change is None and len(saved.steps) == len(self.group):
            self.move_to(0, saved.steps)
            return None
        step = saved.step if saved.step is not None else trainer_step
        self.move_to(step)
        if change is None:
            return None
        return (f"resumed with other attachments than the checkpoint was saved with ({change});"
                f" the schedules continue at the trainer's step {step} with those given now")

    def capture(self) -> dict[str, float]:
        """Record and return the values the coming forward uses, ``plugdrop/<attachment>/
        <setting>`` (a per-layer setting: its mean over the layers), and each watched layer's
        own."""
        if self.group is None:
            return {}
        self._in_use = {f"plugdrop/{k}": v for k, v in self.group.values().items()}
        self._in_use_at = {f"{layer}/{k}": v for h, layer in self._watched
                           for k, v in h.transform.values(layer).items()}
        return dict(self._in_use)

    @property
    def in_use(self) -> dict[str, float]:
        """What :meth:`capture` recorded last."""
        return dict(self._in_use)

    def watch_stats(self) -> dict[str, float]:
        """``plugdrop/watch/<layer>/<stat>`` since the last call (the watch's statistics,
        read and reset; a watched layer's scheduled setting is the value the last captured
        forward used there)."""
        if self.watch is None:
            return {}
        stats = self.watch.as_dict(reset=True)
        return {f"plugdrop/watch/{k}": self._in_use_at.get(k, v) for k, v in stats.items()}

    def state_dict(self) -> dict[str, Any]:
        """The group's steps (:meth:`plugdrop.AttachmentGroup.state_dict`) with the spec,
        the module and the training's length they were attached with: plain data."""
        if self.group is None:
            return {}
        return {**self.group.state_dict(), "spec": self.plain_spec(), "module": self.module,
                "total_steps": self.total}

    def remove(self) -> None:
        """Take the group and the watch off the model (the group keeps its steps and counts)."""
        if self.group is not None:
            self.group.remove()
        if self.watch is not None:
            self.watch.remove()
            self.watch = None


def _to(value: Any, device: Any) -> Any:
    """``value`` (a tensor, or a tuple/list/dict of them) on ``device``."""
    if hasattr(value, "to") and callable(value.to):
        return value.to(device)
    if isinstance(value, Mapping):
        return {k: _to(v, device) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_to(v, device) for v in value)
    return value


def run_spec(spec: Any, source: str | None, stacklevel: int = 4
             ) -> tuple[Any, str | None, pd.AblationRun | None]:
    """The spec a callback attaches and the ``plugdrop ablate`` run it serves: the spec
    given, else the run's (``PLUGDROP_SPEC``: the variant's attachments), else none (a
    warning says so); ``(spec, source, run)``."""
    run = pd.current_run()
    if spec is None and run is not None:
        return str(run.spec), source or f"variant {run.variant!r} ({run.spec})", run
    if spec is None:
        warnings.warn("Regularize(): no spec given, and this script does not run inside "
                      "plugdrop ablate (no PLUGDROP_SPEC): nothing is attached", UserWarning,
                      stacklevel=stacklevel)
        return [], source, None
    if run is not None and _differs(spec, source, run):
        warnings.warn(f"Regularize(spec=...) inside plugdrop ablate: the attachments of "
                      f"variant {run.variant!r} (PLUGDROP_SPEC) are not attached, the spec "
                      f"given is; give no spec to ablate the variants", UserWarning,
                      stacklevel=stacklevel)
    return spec, source, run


def _differs(spec: Any, source: str | None, run: pd.AblationRun) -> bool:
    """Whether ``spec`` attaches other than the run's variant (a callback rebuilt from its
    stored spec attaches the same)."""
    try:
        given = [a.describe() for a in pd.parse_spec(spec, source=source)]
        return given != [a.describe() for a in run.attachments]
    except ValueError:
        return True  # Regularizer raises the spec's own error


def metrics_of(values: Mapping[str, Any]) -> dict[str, float]:
    """The numbers among a trainer's metrics (0-dim tensors and NumPy numbers too), without
    plugdrop's own values (``plugdrop/...``) and the position (``epoch``, ``step``)."""
    out: dict[str, float] = {}
    for key, value in values.items():
        key = str(key)
        if key.startswith("plugdrop/") or key in ("epoch", "step"):
            continue
        if hasattr(value, "numel") and callable(value.numel):
            if value.numel() != 1:
                continue
            value = value.item()
        elif hasattr(value, "item") and callable(value.item) and not isinstance(value, str):
            try:
                value = value.item()
            except (ValueError, TypeError):
                continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    return out


def spec_arg(spec: Any) -> Any:
    """A spec as the callback keeps it: a list of mappings stays (JSON-able data), a path or
    text stays a string."""
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        return [dict(s) if isinstance(s, Mapping) else s for s in spec]
    return str(spec) if not isinstance(spec, Mapping) else dict(spec)


class RegularizeCallback:
    """What both trainers' ``Regularize`` callbacks share: the checked spec with what it
    attached, the switch for logging, warnings, and a short ``repr``."""

    def __init__(self, spec: Any, module: str | None, steps: int | None, log: bool, watch: Any,
                 remove_at_end: bool, example_input: Any, source: str | None) -> None:
        spec, source, self._run = run_spec(spec, source)
        self._reg = Regularizer(spec, module, steps, watch, remove_at_end, source,
                                example_input)
        self.log = log

    @property
    def run(self) -> pd.AblationRun | None:
        """The ``plugdrop ablate`` run this training is (:func:`plugdrop.current_run` when the
        callback was made), into which it logs the evaluations; ``None`` outside one."""
        return self._run

    @property
    def group(self) -> pd.AttachmentGroup | None:
        """The :class:`~plugdrop.AttachmentGroup` of the last training (``None`` before the
        first); after a training it keeps its steps and counts, taken off the model unless
        ``remove_at_end=False``."""
        return self._reg.group

    def _warn(self, message: str, category: type[Warning] = ResumeWarning) -> None:
        warnings.warn(f"{self!r}: {message}", category, stacklevel=3)

    def __repr__(self) -> str:
        module = f", module={self._reg.module!r}" if self._reg.module is not None else ""
        return f"Regularize({', '.join(s.label for s in self._reg.specs)}{module})"
