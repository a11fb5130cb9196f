"""Run a Python training script unedited with the variant of its ``plugdrop ablate`` run
attached: ``python -m plugdrop.bootstrap SCRIPT [ARGS...]`` or ``python -m plugdrop.bootstrap
-m MODULE [ARGS...]``, which ``plugdrop ablate`` runs for a config with ``attach_to:``.

The bootstrap wraps the model factories ``PLUGDROP_ATTACH_TO`` names (comma-separated dotted
names: ``timm.create_model``; a function, a class method such as
``transformers.PreTrainedModel.from_pretrained``, or a class, whose instances are the models),
then runs the script as ``python SCRIPT`` would (``__name__ == "__main__"``, ``sys.argv``,
``sys.path[0]`` its folder). The model the first call of a factory returns (the outermost
call, when one factory calls another) gets the run's attachments
(:func:`plugdrop.attach_all` of ``PLUGDROP_SPEC``), with their schedules spanning
``PLUGDROP_ATTACH_STEPS`` steps when set; they are bound to the first optimizer built over that
model's parameters, before or after it. The receipt (``attached.json``) says what was attached
and how often its hooks ran, or why nothing was (no factory was called).

Limits: only the first model is attached (a script that builds a teacher first attaches the
teacher: name the student's factory instead); an optimizer built over a copy of the
parameters is not found (nothing steps the schedules, which stay at their start); classes
defined in a script run this way live in a module named ``__main__`` as usual, but processes
started with ``spawn`` do not re-run the bootstrap. Outside a run of ``plugdrop ablate`` (no
``PLUGDROP_SEED``) the script runs with nothing attached.
"""

from __future__ import annotations

import functools
import importlib
import os
import runpy
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn as nn

from . import _receipt
from .run import AblationRun, current_run
from .spec import AttachmentGroup, attach_all

__all__ = ["main"]

_USAGE = ("usage: python -m plugdrop.bootstrap SCRIPT [ARGS...] | -m MODULE [ARGS...] "
          "(factories in PLUGDROP_ATTACH_TO)")


class _Attacher:
    """Attaches the run's variant to the first model a wrapped factory returns and binds it
    to the first optimizer over its parameters."""

    def __init__(self, run: AblationRun, names: Sequence[str], steps: int | None) -> None:
        self.run, self.names, self.steps = run, list(names), steps
        self.depth = 0
        self.group: AttachmentGroup | None = None
        self.optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self.bound = False

    def wrap(self, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def factory(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            try:
                out = fn(*args, **kwargs)
            finally:
                self.depth -= 1
            if self.depth == 0 and self.group is None and isinstance(out, nn.Module):
                self.attach(out, name)
            return out

        factory.__plugdrop_wrapped__ = fn  # type: ignore[attr-defined]
        return factory

    def attach(self, model: nn.Module, name: str) -> None:
        self.group = attach_all(model, self.run.spec, steps=self.steps,
                                source=f"variant {self.run.variant!r}")
        self.run.record_attached(self.group, f"attach_to {name}")
        for opt in list(self.optimizers):
            self.built(opt)

    def built(self, opt: torch.optim.Optimizer) -> None:
        """An optimizer was built: bound to when it holds the attached model's parameters."""
        if self.bound:
            return
        if self.group is None:
            self.optimizers.add(opt)
            return
        params = {id(p) for p in self.group.model.parameters()}
        if any(id(p) in params for g in opt.param_groups for p in g["params"]):
            self.group.bind(opt)
            self.bound = True

    def at_exit(self) -> None:
        if self.group is None:
            _receipt.unattached(f"attach_to: {', '.join(self.names)} was never called in the "
                                f"program (name the factory the script builds its model "
                                f"with, or attach in the script with "
                                f"plugdrop.current_run().attach(model))", "bootstrap")


def _resolve(name: str) -> tuple[Any, str, Any]:
    """``(owner, attribute, value)`` of a dotted name: the longest importable module prefix,
    then attributes (a class method's owner is its class)."""
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError as e:
            if i == 1:
                raise SystemExit(f"plugdrop bootstrap: attach_to: {name}: cannot import "
                                 f"{parts[0]} ({e}) with {sys.executable}") from None
            continue
        try:
            for attr in parts[i:-1]:
                owner = getattr(owner, attr)
            return owner, parts[-1], getattr(owner, parts[-1])
        except AttributeError:
            raise SystemExit(f"plugdrop bootstrap: attach_to: {name}: "
                             f"{getattr(owner, '__name__', owner)!s} has no attribute "
                             f"{parts[-1]!r}") from None
    raise SystemExit(f"plugdrop bootstrap: attach_to: {name} is not a dotted name")


def _patch(name: str, at: _Attacher) -> None:
    """Wrap the factory ``name`` where it is defined and wherever a loaded module holds it."""
    owner, attr, value = _resolve(name)
    if isinstance(owner, type):  # a class method, a static method, a method
        raw = owner.__dict__.get(attr, value)
        if isinstance(raw, classmethod):
            setattr(owner, attr, classmethod(at.wrap(raw.__func__, name)))
        elif isinstance(raw, staticmethod):
            setattr(owner, attr, staticmethod(at.wrap(raw.__func__, name)))
        else:
            setattr(owner, attr, at.wrap(raw, name))
        return
    if isinstance(value, type):  # a class: its instances are the models
        init = value.__init__  # type: ignore[misc]
        wrapped = at.wrap(lambda self, *a, **k: (init(self, *a, **k), self)[1], name)

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            wrapped(self, *args, **kwargs)

        value.__init__ = __init__  # type: ignore[misc]
        return
    if not callable(value):
        raise SystemExit(f"plugdrop bootstrap: attach_to: {name} is not callable")
    new = at.wrap(value, name)
    for module in list(sys.modules.values()):
        try:
            for key, held in list(vars(module).items()):
                if held is value:
                    setattr(module, key, new)
        except TypeError:  # a module without a __dict__
            continue


def _watch_optimizers(at: _Attacher) -> None:
    """Tell ``at`` of every optimizer built (``torch.optim.Optimizer.__init__`` wrapped)."""
    init = torch.optim.Optimizer.__init__

    @functools.wraps(init)
    def __init__(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        at.built(self)

    torch.optim.Optimizer.__init__ = __init__  # type: ignore[method-assign]


def main(argv: Sequence[str] | None = None) -> None:
    """Run the script or module of ``argv`` (``sys.argv[1:]``) as ``python`` would, with the
    run's variant attached to the model its factory builds (see the module)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] == "-m" and len(args) < 2:
        raise SystemExit(_USAGE)
    run = current_run()
    names = [n for n in os.environ.get("PLUGDROP_ATTACH_TO", "").split(",") if n.strip()]
    if run is not None and names:
        steps_text = os.environ.get("PLUGDROP_ATTACH_STEPS")
        at = _Attacher(run, names, int(steps_text) if steps_text else None)
        for name in names:
            _patch(name.strip(), at)
        _watch_optimizers(at)
        import atexit

        atexit.register(at.at_exit)
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        script = args[0]
        sys.argv = list(args)
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
