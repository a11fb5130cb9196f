"""Run a Python training script unedited with the variant of its ``plugdrop ablate`` run
attached: ``python -m plugdrop.bootstrap SCRIPT [ARGS...]`` or ``python -m plugdrop.bootstrap
-m MODULE [ARGS...]``, which ``plugdrop ablate`` runs for a config with ``attach_to:``.

``PLUGDROP_ATTACH_TO`` names the model (comma-separated):

- a class, wherever it is defined: ``Net`` (any ``nn.Module`` subclass of that name),
  ``__main__.Net`` or ``train.Net`` (the script ``train.py``'s own), ``package.module.Net``: its
  first instance (or a subclass's), when its ``__init__`` returns, however late the class is
  defined (``nn.Module.__init_subclass__`` sees each new class);
- a factory (``timm.create_model``, ``transformers.PreTrainedModel.from_pretrained``): the
  model its first (outermost) call returns.

The script runs as ``python SCRIPT`` would (``__name__ == "__main__"``, ``sys.argv``,
``sys.path[0]`` its folder, set before the names are imported). The model gets
:func:`plugdrop.attach_all` of ``PLUGDROP_SPEC`` (schedules spanning ``PLUGDROP_ATTACH_STEPS``
steps when set), bound to the first optimizer built over its parameters, before or after it.
The receipt (``attached.json``) says what was attached, to which class, how often its hooks
ran, or why nothing was.

Nothing attached by the first optimizer step fails the run in one line naming the closest
classes; so does a variant with schedules that no ``torch.optim`` optimizer stepped (``steps:
0``). With ``PLUGDROP_DRY_START=1`` (the check before any run trains) the program stops at its
first optimizer step, or soon after its first forward without one, leaving the receipt.

Limits: only the first model is attached (a teacher built first: name the student's class); an
optimizer over a copy of the parameters is not found; ``spawn``-ed processes do not re-run the
bootstrap. Outside a run (no ``PLUGDROP_SEED``) the script runs with nothing attached.
"""

from __future__ import annotations

import atexit
import contextlib
import difflib
import functools
import importlib
import os
import runpy
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import torch
import torch.nn as nn

from . import _receipt
from .errors import one_line
from .run import AblationRun, current_run
from .spec import AttachmentGroup, attach_all

__all__ = ["DRY", "main"]

_USAGE = "usage: python -m plugdrop.bootstrap SCRIPT [ARGS...] | -m MODULE [ARGS...]"
#: the variable that makes a start a dry one: stop at the first optimizer step
DRY = "PLUGDROP_DRY_START"
#: a dry start without an optimizer step stops this long after the hooks first ran (at least)
DRY_WAIT_S = 2.0


def _classes() -> list[type]:
    """Every ``nn.Module`` subclass defined so far."""
    seen: set[type] = set()
    out, todo = [], [nn.Module]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                out.append(sub)
                todo.append(sub)
    return out


def _ran(group: AttachmentGroup) -> bool:
    """Whether the group's hooks have run (read from any thread)."""
    try:
        return any(any(list(h.calls.values())) for h in group.handles)
    except RuntimeError:  # changed while read: they are running
        return True


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class _Attacher:
    """Attaches the run's variant to the first model named (see the module) and binds it to
    the first optimizer over its parameters."""

    def __init__(self, run: AblationRun, names: Sequence[str], steps: int | None,
                 dry: bool = False) -> None:
        self.run, self.names, self.steps, self.dry = run, list(names), steps, dry
        self.depth = 0
        self.group: AttachmentGroup | None = None
        self.optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self.bound = self.stepped = False
        #: classes named lazily: (module or None for any, qualified name, the name written)
        self.lazy: list[tuple[str | None, str, str]] = []
        #: classes named by import
        self.objects: list[type] = []
        #: factories called whose outermost call returned no module: name -> its type
        self.returned: dict[str, str] = {}
        specs = run.attachments
        self.scheduled = any(isinstance(v, Mapping) and "schedule" in v
                             for s in specs for v in s.kwargs.values())

    def matches(self, cls: type) -> str | None:
        """The name of ``attach_to`` that class ``cls`` (or a class it derives from) is."""
        for k in cls.__mro__:
            if k is nn.Module:
                break
            if k in self.objects:
                return _name(k)
            for module, qual, written in self.lazy:
                if (k.__qualname__ == qual or k.__name__ == qual) if module is None else (
                        k.__module__ == module and k.__qualname__ == qual):
                    return written
        return None

    def wrap_class(self, cls: type, name: str) -> None:
        """Attach to the instance of ``cls`` whose ``__init__`` is the outermost to return."""
        if cls.__dict__.get("__plugdrop_wrapped__"):
            return
        init = cls.__init__  # type: ignore[misc]
        wrapped = self.wrap(lambda self, *a, **k: (init(self, *a, **k), self)[1], name)

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            wrapped(self, *args, **kwargs)

        cls.__init__ = __init__  # type: ignore[misc]
        cls.__plugdrop_wrapped__ = True  # type: ignore[attr-defined]

    def watch_classes(self) -> None:
        """Wrap the classes named defined so far, and those defined later as they are."""
        for cls in _classes():
            name = self.matches(cls)
            if name is not None:
                self.wrap_class(cls, name)
        at = self

        def __init_subclass__(cls: type, **kwargs: Any) -> None:
            super(nn.Module, cls).__init_subclass__(**kwargs)  # type: ignore[misc]
            name = at.matches(cls)
            if name is not None:
                at.wrap_class(cls, name)

        nn.Module.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]

    def wrap(self, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def factory(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            try:
                out = fn(*args, **kwargs)
            finally:
                self.depth -= 1
            if self.depth == 0 and self.group is None:
                if isinstance(out, nn.Module):
                    self.attach(out, name)
                else:
                    self.returned.setdefault(name, type(out).__name__)
            return out

        factory.__plugdrop_wrapped__ = fn  # type: ignore[attr-defined]
        return factory

    def attach(self, model: nn.Module, name: str) -> None:
        try:
            self.group = attach_all(model, self.run.spec, steps=self.steps,
                                    source=f"variant {self.run.variant!r}")
        except Exception as e:
            if not self.dry:
                raise
            self.stop(f"{type(e).__name__}: {one_line(e)}")
        self.run.record_attached(self.group, f"attach_to {name}")
        for opt in list(self.optimizers):
            self.built(opt)
        if self.dry:
            self.wait_for_step()

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

    def first_step(self) -> None:
        """The first optimizer step is about to run: the model must be attached by now."""
        self.stepped = True
        if self.group is None:
            why = self.unattached()
            if self.dry:
                self.stop(why)
            _receipt.unattached(why, "bootstrap")
            raise SystemExit(f"plugdrop bootstrap: {why}")
        if self.dry:
            self.stop(None if self.bound or not self.scheduled else self.unbound())

    def unbound(self) -> str:
        model = _name(type(self.group.model)) if self.group else "?"
        return (f"variant {self.run.variant!r} has schedules, but no torch.optim optimizer over "
                f"the parameters of {model} steps them (steps: 0: the values stay at their "
                f"start, in effect the baseline); train it with a torch.optim optimizer, or "
                f"attach in the script (plugdrop.current_run().attach) and step the group")

    def unattached(self) -> str:
        """Why nothing was attached, with the closest classes defined."""
        said = [f"{name} was called but returned a {kind}, not a torch.nn.Module: name the "
                f"class of the model, or the factory that returns it"
                for name, kind in self.returned.items()]
        if said:
            return "attach_to: " + "; ".join(said)
        named = ", ".join(self.names)
        when = "before the first optimizer step" if self.stepped else "in the program"
        if not self.lazy and not self.objects:
            return (f"attach_to: {named} was never called {when} (name the factory the "
                    f"script builds its model with, or its class)")
        classes = _classes()
        mine = sorted({c.__qualname__ for c in classes if c.__module__ == "__main__"})
        theirs = sorted({c.__qualname__ for c in classes
                         if not c.__module__.startswith(("torch.", "plugdrop."))})
        close: list[str] = []
        for _, want, _ in self.lazy:
            close += (difflib.get_close_matches(want, mine, n=3, cutoff=0.5)
                      or difflib.get_close_matches(want, theirs, n=3, cutoff=0.6))
        hint = f"; did you mean {', '.join(dict.fromkeys(close))}?" if close else ""
        defined = f" (the script defines {', '.join(mine[:8])})" if mine else ""
        return (f"attach_to: {named} matched no model built {when} (no instance of a class "
                f"of that name){hint}{defined}")

    def wait_for_step(self) -> None:
        """In a dry start: stop a while after the hooks first ran when no optimizer steps
        (a script that updates its weights itself)."""
        group = self.group
        assert group is not None
        began = time.monotonic()

        def watch() -> None:
            while not _ran(group):
                if not group.handles or self.stepped:
                    return
                time.sleep(0.02)
            first = time.monotonic()
            time.sleep(max(DRY_WAIT_S, 3 * (first - began)))
            if not self.stepped:
                self.stop(self.unbound() if self.scheduled else None)

        threading.Thread(target=watch, daemon=True, name="plugdrop-dry-start").start()

    def stop(self, error: str | None) -> NoReturn:
        """End a dry start here: the receipt written (with ``error``), the process gone."""
        if error is not None:
            _receipt.flag(error)
            _receipt.unattached(error, "bootstrap")
        _receipt.write()
        for f in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                f.flush()
        os._exit(0)

    def at_exit(self) -> None:
        if self.group is None:
            _receipt.unattached(self.unattached(), "bootstrap")
        elif self.scheduled and self.group.step_count == 0 and _ran(self.group):
            _receipt.flag(self.unbound())
            _receipt.write()


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
                                 f"{parts[0]} ({e}) with {sys.executable} (sys.path: the "
                                 f"script's folder, then {sys.path[1:3]}...)") from None
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


def _patch(name: str, at: _Attacher, script_module: str) -> None:
    """Name the model ``name`` (see the module): a class lazily or by import, a factory
    wrapped where it is defined and wherever a loaded module holds it."""
    mine = next((m for m in ("__main__", script_module) if name.startswith(m + ".")), None)
    if "." not in name or mine is not None:
        at.lazy.append((mine and "__main__", name[len(mine) + 1:] if mine else name, name))
        return
    owner, attr, value = _resolve(name)
    if isinstance(owner, type):  # a class method, a static method, a method
        raw = owner.__dict__.get(attr, value)
        kind = type(raw) if isinstance(raw, (classmethod, staticmethod)) else None
        setattr(owner, attr, kind(at.wrap(raw.__func__, name)) if kind is not None
                else at.wrap(raw, name))
        return
    if isinstance(value, type):  # a class: its instances (and its subclasses') are the models
        if not issubclass(value, nn.Module):
            raise SystemExit(f"plugdrop bootstrap: attach_to: {name} is a class, but not a "
                             f"torch.nn.Module: name the model's class or its factory")
        at.objects.append(value)
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
    """Tell ``at`` of every optimizer built (``torch.optim.Optimizer.__init__`` wrapped) and
    of the first step of any (each optimizer class's ``step`` wrapped once)."""
    init = torch.optim.Optimizer.__init__

    @functools.wraps(init)
    def __init__(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        at.built(self)
        cls = type(self)
        if not cls.__dict__.get("__plugdrop_step__"):
            step = cls.step

            @functools.wraps(step)
            def first(opt: Any, *a: Any, **k: Any) -> Any:
                if not at.stepped:
                    at.first_step()
                return step(opt, *a, **k)

            cls.step = first  # type: ignore[method-assign, assignment]
            cls.__plugdrop_step__ = True  # type: ignore[attr-defined]

    torch.optim.Optimizer.__init__ = __init__  # type: ignore[method-assign]


def main(argv: Sequence[str] | None = None) -> None:
    """Run the script or module of ``argv`` (``sys.argv[1:]``) as ``python`` would, with the
    run's variant attached to the model ``attach_to`` names (see the module)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] == "-m" and len(args) < 2:
        raise SystemExit(_USAGE)
    script_module = args[1] if args[0] == "-m" else os.path.splitext(
        os.path.basename(args[0]))[0]
    if args[0] != "-m":  # before the names are imported: a factory module beside it is found
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
    run = current_run()
    names = [n.strip() for n in os.environ.get("PLUGDROP_ATTACH_TO", "").split(",")
             if n.strip()]
    at: _Attacher | None = None
    if run is not None and names:
        steps_text = os.environ.get("PLUGDROP_ATTACH_STEPS")
        at = _Attacher(run, names, int(steps_text) if steps_text else None,
                       dry=os.environ.get(DRY) == "1")
        for name in names:
            _patch(name, at, script_module)
        if at.lazy or at.objects:
            at.watch_classes()
        _watch_optimizers(at)
        atexit.register(at.at_exit)
    try:
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(args)
            runpy.run_path(args[0], run_name="__main__")
    finally:  # also where atexit does not run (a process forked to run it)
        if at is not None:
            at.at_exit()
        _receipt.write()


if __name__ == "__main__":
    main()
