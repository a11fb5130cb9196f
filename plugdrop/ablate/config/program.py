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

import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .checks import Value, is_num
from .locations import suggest
from .types import Interval

__all__ = ["PLACEHOLDERS", "ProgramSpec", "program", "run_timeout"]

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
