"""One row of the runner's settings table (:class:`Setting`) and how a field of
:class:`~.schema.AblationConfig` declares it (:func:`setting`)."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from typing import Any

from . import checks as C

__all__ = ["AWAY_FROM_DEFAULT", "GROUPS", "JUDGES", "LOOP_GROUPS", "Setting", "setting"]

#: the groups of the settings reference, in order
GROUPS = ("Program", "Model", "Data", "Optimization", "Runs", "Decisions")
#: the groups whose every setting is one of plugdrop's own training loop (:attr:`Setting.loop`)
LOOP_GROUPS = ("Model", "Data", "Optimization")


@dataclass(frozen=True)
class Setting:
    """One row of the settings table (the metadata of an :class:`AblationConfig` field).

    Attributes:
        help: what it is and its values, for the reference and ``--help``.
        group: one of :data:`GROUPS`.
        check: validates and normalizes the value (:mod:`.checks`); ``None`` for ``variants``,
            which has a parser of its own (:mod:`.variants`).
        flag: the type of its dedicated ``plugdrop ablate`` flag (``--batch-size``), if any.
        many: the flag takes several values (``--seeds 0 1 2``).
        subflags: keys of a mapping value with a flag each (``--seeds-min 3``: ``seeds.min``).
        hashed: whether it changes results, and so enters :meth:`AblationConfig.hash` (a
            folder refuses ``--resume`` under a config whose hash differs): ``True``,
            ``False``, or :data:`AWAY_FROM_DEFAULT` for a setting added after ablation
            folders existed: it enters the hash only when set to another value than its
            default, so that the folders of earlier versions still resume; :data:`JUDGES`
            for a setting that judges the runs only (changed on ``--resume``, the runs are
            kept and judged again).
        shown: the default as the reference shows it, when the value alone says too little.
        loop: a setting of plugdrop's own training loop (the model, the data, the optimizer,
            ...), which a ``program:`` replaces: giving it with ``program:`` is an error.
    """

    help: str
    group: str
    check: C.Check | None
    flag: type | None = None
    many: bool = False
    hashed: bool | str = True
    shown: str | None = None
    subflags: tuple[str, ...] = ()
    loop: bool = False


#: :attr:`Setting.hashed` of a setting that enters the hash only away from its default
AWAY_FROM_DEFAULT = "away from its default"
#: :attr:`Setting.hashed` of a setting that only judges the runs (the decision metric, its
#: goal, margin and error rate): not in the hash, so that changing it keeps every run and
#: decides again; versions before 0.2 hashed it away from its default (the folders they
#: made are recognized by :func:`~.schema.fingerprint` with ``judging=True``)
JUDGES = "judges only"


def setting(default: Any = MISSING, *, help: str, group: str, check: C.Check | None,
            flag: type | None = None, many: bool = False, hashed: bool | str = True,
            shown: str | None = None, subflags: tuple[str, ...] = (),
            factory: Any = None, loop: bool | None = None) -> Any:
    """A field of :class:`AblationConfig` carrying its :class:`Setting` (no ``default``: the
    setting is required; ``factory``: a mutable default; ``loop``: a setting of plugdrop's own
    training loop, by default those of :data:`LOOP_GROUPS`)."""
    meta = {"setting": Setting(help, group, check, flag, many, hashed, shown, subflags,
                               group in LOOP_GROUPS if loop is None else loop)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)
