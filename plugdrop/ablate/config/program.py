"""``program:``, the training program of an ablation when it is not plugdrop's own loop: its
typed value (:class:`ProgramSpec`: the arguments, with ``{seed}``, ``{variant}``, ``{spec}``,
``{run_dir}`` and ``{metrics}`` replaced for each run) and the checks of ``program`` and
``run_timeout``. How a program is run is :mod:`plugdrop.ablate.programs`; what it is handed
is the run contract (``docs/guide/programs.md``).

    >>> p = ProgramSpec(("python", "train.py", "--seed", "{seed}"))
    >>> p.render(seed=3, variant="baseline", spec="s.yaml", run_dir="r", metrics="m.jsonl")
    ['python', 'train.py', '--seed', '3']
"""

from __future__ import annotations

import re
import shlex
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .checks import Value, is_num
from .locations import fail, plain, suggest
from .types import Interval

__all__ = ["AttachTo", "FACTORIES", "MetricsFrom", "PLACEHOLDERS", "ProgramSpec", "ResumeArgs",
           "SOURCES", "attach_to", "is_python", "python_target", "metrics_from", "program", "resume_args", "run_timeout"]

#: the names a program's arguments may hold in braces, replaced for each run
PLACEHOLDERS = ("seed", "variant", "spec", "run_dir", "metrics")

_SAMPLE: Mapping[str, Any] = {"seed": 0, "variant": "baseline", "spec": "spec.yaml",
                              "run_dir": "work", "metrics": "metrics.jsonl"}


@dataclass(frozen=True)
class ProgramSpec:
    """A training program: its arguments as written (no shell), placeholders in braces.

    Attributes:
        argv: the arguments, the executable first; ``{seed}``, ``{variant}``, ``{spec}``,
            ``{run_dir}`` and ``{metrics}`` are replaced for each run (``{{`` and ``}}`` are
            braces).
    """

    argv: tuple[str, ...]

    def render(self, **values: Any) -> list[str]:
        """The arguments of one run, placeholders replaced by ``values`` (every name of
        :data:`PLACEHOLDERS`)."""
        f = string.Formatter()
        return [f.vformat(a, (), values) for a in self.argv]

    @property
    def uses(self) -> set[str]:
        """The placeholders the arguments hold."""
        return {name for a in self.argv for _, name, _, _ in string.Formatter().parse(a)
                if name}

    def plain(self) -> list[str]:
        return list(self.argv)

    def __str__(self) -> str:
        return shlex.join(self.argv)


def program(v: Value) -> Any:
    """A list of arguments, or a string split as a shell splits it (no shell runs it), as a
    :class:`ProgramSpec`; ``null`` for plugdrop's own training loop."""
    if v.value is None:
        return None
    if isinstance(v.value, str):
        try:
            args: list[Any] = shlex.split(v.value)
        except ValueError as e:  # No closing quotation
            raise v.fail(f"program: {e} in {v.value!r}; quote as a shell would, or give a "
                         f"list of arguments") from None
    elif isinstance(v.value, list):
        args = list(v.value)
    else:
        args = []
    v.need(bool(args) and all(isinstance(a, str) or is_num(a) for a in args)
           and isinstance(args[0], str) and args[0].strip() != "",
           "the command that trains one run: a list of arguments such as [python, train.py, "
           "--seed, '{seed}'], or a string split as a shell would")
    argv = tuple(str(a) for a in args)
    for a in argv:
        try:
            names = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(a)
                     if name is not None]
        except ValueError as e:  # a single brace
            raise v.fail(f"program: argument {a!r}: {e}; write {{{{ and }}}} for braces") \
                from None
        for name, _, _ in names:
            if name not in PLACEHOLDERS:
                raise v.fail(f"program: argument {a!r} names {{{name}}}{suggest(name, PLACEHOLDERS)}"
                             f"; the placeholders are "
                             f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)} (write {{{{ and "
                             f"}}}} for braces)")
        try:
            string.Formatter().vformat(a, (), dict(_SAMPLE))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise v.fail(f"program: argument {a!r} cannot be filled in ({e})") from None
    return ProgramSpec(argv)


def run_timeout(v: Value) -> Any:
    """A duration (``2h``, ``30min``, ``90s``) as an :class:`~.types.Interval`, or ``None``."""
    if v.value is None or v.value is False:
        return None
    what = "a duration such as 2h, 30min or 90s, or null (no limit)"
    if not isinstance(v.value, str):
        v.need(False, what, " (give a unit: 90s, 30min)" if is_num(v.value) else "")
    try:
        interval = Interval.parse(v.value)
    except ValueError:
        interval = None
    v.need(interval is not None and interval.unit != "steps", what)
    return interval


# ----------------------------------------------------------- a script run as it is

#: ``attach_to:`` shorthands: the model factories of the libraries a script builds its model
#: with (the bootstrap patches each; the first one called gives the model)
FACTORIES: Mapping[str, tuple[str, ...]] = {
    "timm": ("timm.create_model",),
    "timm.create_model": ("timm.create_model",),
    "torchvision": ("torchvision.models.get_model",),
    "torchvision.models.get_model": ("torchvision.models.get_model",),
    "transformers": ("transformers.PreTrainedModel.from_pretrained",
                     "transformers.models.auto.auto_factory._BaseAutoModelClass.from_pretrained",
                     "transformers.models.auto.auto_factory._BaseAutoModelClass.from_config"),
}
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


@dataclass(frozen=True)
class AttachTo:
    """``attach_to:``: the model's class or the factories whose first model gets the run's
    variant, in a Python program run unedited under plugdrop's bootstrap.

    Attributes:
        factories: class names (``Net``, ``__main__.Net``) and dotted names of classes and
            callables (``timm.create_model``, ``mypkg.models.Net``), the shorthands of
            :data:`FACTORIES` expanded.
        steps: the optimizer steps that schedules written without ``steps:`` span; ``None``:
            each schedule gives its own.
        written: the value as the config gave it.
    """

    factories: tuple[str, ...]
    steps: int | None = None
    written: Any = None

    def plain(self) -> Any:
        return self.written

    def __str__(self) -> str:
        return ", ".join(self.factories)


def attach_to(v: Value) -> Any:
    """A class name (``Net``, ``__main__.Net``, ``mypkg.models.Net``), a factory's dotted name
    (or a shorthand: ``timm``, ``torchvision``, ``transformers``), a list of them, or
    ``{factory: NAME or [NAMES], steps: N}``, as an :class:`AttachTo`."""
    if v.value is None:
        return None
    written = v.value
    steps = None
    value = v.value
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in ("factory", "steps")]
        if unknown:
            raise v.fail(f"attach_to has no setting {unknown[0]!r}"
                         f"{suggest(str(unknown[0]), ('factory', 'steps'))}; it takes factory "
                         f"and steps")
        steps = value.get("steps")
        if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool)
                                  or steps < 1):
            raise v.fail(f"attach_to steps must be a whole number of optimizer steps >= 1 "
                         f"(what schedules without steps: span), got {steps!r}")
        value = value.get("factory")
    names = value if isinstance(value, list) else [value]
    what = ("the model's class (Net: any class of that name, the script's own included; "
            "__main__.Net, mypkg.models.Net) or the factory a script calls (timm.create_model, "
            "or timm, torchvision, transformers; mypkg.models.build), a list of them, or "
            "{factory: NAME, steps: N}")
    v.need(bool(names) and all(isinstance(n, str) and n.strip() for n in names), what)
    out: list[str] = []
    for name in names:
        name = re.sub(r"\.py:", ".", name.strip()).replace(":", ".")  # train.py:Net
        if name in FACTORIES:
            out += FACTORIES[name]
        elif _DOTTED.fullmatch(name) or (name.isidentifier() and not (
                name[0].islower() and suggest(name, FACTORIES))):
            out.append(name)
        else:
            raise v.fail(f"attach_to: {name!r} is not a class name or a dotted name "
                         f"(package.module.function){suggest(name, FACTORIES)}; {what}")
    return AttachTo(tuple(dict.fromkeys(out)), steps, plain(written))


#: the kinds of ``metrics_from:`` and what each reads
SOURCES = {"csv": "a CSV file with a header row (timm's summary.csv, Lightning's CSVLogger)",
           "json": "a JSON file: a list of records, JSON lines, or an object with a list of "
                   "them (the Hugging Face Trainer's trainer_state.json log_history)",
           "tensorboard": "a folder of TensorBoard event files (its scalars, by tag)",
           "stdout": "a regular expression with named groups matched against each line the "
                     "program prints"}


@dataclass(frozen=True)
class MetricsFrom:
    """``metrics_from:``: where a program already writes its metrics, read instead of the
    run contract's JSON-lines file.

    Attributes:
        kind: ``csv``, ``json``, ``tensorboard`` or ``stdout`` (:data:`SOURCES`).
        where: the path (placeholders of :data:`PLACEHOLDERS` in braces; relative to the
            folder the program runs in), or the regular expression of ``stdout``.
    """

    kind: str
    where: str

    def path(self, **values: Any) -> str:
        """The path of a run (placeholders filled in); ``stdout`` has none."""
        return string.Formatter().vformat(self.where, (), values)

    def plain(self) -> dict[str, str]:
        return {self.kind: self.where}

    def __str__(self) -> str:
        return f"{self.kind}: {self.where}"


def metrics_from(v: Value) -> Any:
    """``{csv: PATH}``, ``{json: PATH}``, ``{tensorboard: DIR}`` or ``{stdout: REGEX}`` as a
    :class:`MetricsFrom`; ``null``: the run contract's JSON-lines file."""
    if v.value is None:
        return None
    what = ("{csv: PATH}, {json: PATH}, {tensorboard: DIR} or {stdout: REGEX} (the path may "
            "use {run_dir}); null: the metrics file of the run contract")
    v.need(isinstance(v.value, Mapping) and len(v.value) == 1, what)
    (kind, where), = v.value.items()
    if kind not in SOURCES:
        raise fail(v.at(kind), f"metrics_from has no kind {kind!r}{suggest(str(kind), SOURCES)}"
                               f"; it is one of {what}")
    if not isinstance(where, str) or not where.strip():
        raise fail(v.at(kind), f"metrics_from {kind} must be "
                               f"{'a regular expression' if kind == 'stdout' else 'a path'}, "
                               f"got {where!r}")
    if kind == "stdout":
        try:
            pattern = re.compile(where)
        except re.error as e:
            raise fail(v.at(kind), f"metrics_from stdout: {where!r} is not a regular "
                                   f"expression ({e})") from None
        metrics = [g for g in pattern.groupindex if g not in ("epoch", "step")]
        if not metrics:
            raise fail(v.at(kind), f"metrics_from stdout: {where!r} names no metric: give each "
                                   f"value a named group, e.g. 'epoch (?P<epoch>\\d+) .*acc "
                                   f"(?P<val_acc>[0-9.]+)' (epoch and step say where)")
    else:
        _placeholders(v, where, f"metrics_from {kind}")
    return MetricsFrom(str(kind), where)


def resume_args(v: Value) -> Any:
    """A list of arguments added to ``program:`` when a run resumes (placeholders filled in),
    or ``{args: [...], if_exists: PATH}`` (added only when that file exists), as a
    :class:`ResumeArgs`; ``null``: none."""
    if v.value is None:
        return None
    what = ("a list of arguments added when a run resumes, such as [--resume, "
            "'{run_dir}/last.pth.tar'], or {args: [...], if_exists: PATH}")
    args, exists = v.value, None
    if isinstance(v.value, Mapping):
        unknown = [k for k in v.value if k not in ("args", "if_exists")]
        if unknown:
            raise fail(v.at(unknown[0]), f"resume_args has no setting {unknown[0]!r}"
                                         f"{suggest(str(unknown[0]), ('args', 'if_exists'))}; "
                                         f"it takes args and if_exists")
        args, exists = v.value.get("args"), v.value.get("if_exists")
        if exists is not None and (not isinstance(exists, str) or not exists.strip()):
            raise fail(v.at("if_exists"), f"resume_args if_exists must be a path, got "
                                          f"{exists!r}")
    v.need(isinstance(args, list) and bool(args)
           and all(isinstance(a, str) or is_num(a) for a in args), what)
    out = tuple(str(a) for a in args)
    for a in out:
        _placeholders(v, a, "resume_args")
    if exists is not None:
        _placeholders(v, exists, "resume_args if_exists")
    return ResumeArgs(out, exists)


@dataclass(frozen=True)
class ResumeArgs:
    """``resume_args:``: arguments the program is given only when a run resumes.

    Attributes:
        args: the arguments (placeholders in braces).
        if_exists: a path (placeholders in braces): the arguments are added only when it
            exists; ``None``: always on a resume.
    """

    args: tuple[str, ...]
    if_exists: str | None = None

    def render(self, **values: Any) -> list[str]:
        f = string.Formatter()
        return [f.vformat(a, (), values) for a in self.args]

    def plain(self) -> Any:
        return list(self.args) if self.if_exists is None else {
            "args": list(self.args), "if_exists": self.if_exists}


#: interpreter options that take the next argument as their value
_PY_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")
#: an interpreter ``program:`` may start with: ``python``, ``python3``, ``python3.12``, a path
_PYTHON = re.compile(r"(.*/)?python[0-9.]*")


def is_python(word: str) -> bool:
    """Whether ``word`` names a Python interpreter (``python``, ``python3.12``, a path)."""
    return _PYTHON.fullmatch(word) is not None


def python_target(argv: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """``(interpreter options, [SCRIPT, args...] or [-m, MODULE, args...])`` of a Python
    program's arguments, or ``None`` when ``argv`` runs no Python script or module (another
    program, ``python -c``, ``python`` alone)."""
    if not argv or not is_python(argv[0]):
        return None
    opts: list[str] = []
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "-m":
            return (opts, list(argv[i:])) if i + 1 < len(argv) else None
        if a in ("-c", "-") or a.startswith("-c"):
            return None
        if a in _PY_WITH_VALUE:
            opts += argv[i:i + 2]
            i += 2
            continue
        if a.startswith("-"):
            opts.append(a)
            i += 1
            continue
        return opts, list(argv[i:])
    return None


def _placeholders(v: Value, text: str, what: str) -> None:
    """Every name in braces of ``text`` is a placeholder, and it fills in."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(text) if name is not None]
        for name in names:
            if name not in PLACEHOLDERS:
                raise v.fail(f"{what}: {text!r} names {{{name}}}{suggest(name, PLACEHOLDERS)}; "
                             f"the placeholders are "
                             f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
        string.Formatter().vformat(text, (), dict(_SAMPLE))
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise v.fail(f"{what}: {text!r} cannot be filled in ({e}); write {{{{ and }}}} for "
                     f"braces") from None
