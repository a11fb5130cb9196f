"""What verdicts are decided on: the metrics a run records (:data:`METRICS`, each with its
direction and the units it is shown in) and the rule of an ablation's decisions
(:class:`DecisionRule`: the metric, the family-wise error rate, the equivalence margin and
the adaptive design's spending and alpha passing),
which the config carries to the runner's design and to the report.

    >>> rule = DecisionRule(METRICS["val_nll"], alpha=0.05, margin=AUTO)
    >>> rule.metric.higher_is_better, rule.margin
    (False, 0.01)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .spending import DEFAULT_SPENDING, Spending

__all__ = ["AUTO", "DecisionRule", "METRICS", "MOST_DIGITS", "Metric", "PASSING",
           "supported_digits", "unit_problem"]

#: the ``margin`` setting's value that stands for the metric's own margin
AUTO = "auto"
#: the ``passing`` setting's values: Holm (a decided variant's alpha goes to the open ones, the
#: graphical approach of Maurer and Bretz) or Bonferroni (nothing is passed on)
PASSING = ("holm", "bonferroni")
#: the most decimals :func:`supported_digits` shows
MOST_DIGITS = 6


def supported_digits(spread: float | None, value: float | None = None) -> int:
    """Decimals to show a value of a metric in its own units with, as far as its interval
    supports them: the interval's half-width ``spread`` to 2 significant digits (a half-width
    of 0.049: 3 decimals, ``0.490 [0.441, 0.539]``; of 3.2: 1, ``27.1 [23.9, 30.3]``; of 45
    or more: none). Without a spread (one seed, or every seed alike) the value to 4
    significant digits (``27.08``, ``0.4903``). Never fewer than 0 decimals nor more than
    :data:`MOST_DIGITS`; 4 when neither says more."""
    if spread is not None and math.isfinite(spread) and spread > 0:
        wanted = 1 - math.floor(math.log10(spread))
    elif value is not None and math.isfinite(value) and value != 0:
        wanted = 3 - math.floor(math.log10(abs(value)))
    else:
        wanted = 4
    return max(0, min(MOST_DIGITS, wanted))


@dataclass(frozen=True)
class Metric:
    """A metric a run records per epoch, as verdicts read it: one of :data:`METRICS`, or one
    a program logs (:meth:`logged`: any name, shown in its own units).

    Attributes:
        name: its key in ``metrics.jsonl`` (``val_acc``).
        higher_is_better: its direction.
        scale: display units per metric unit (100 for a fraction shown in percentage points).
        auto_margin: the equivalence margin ``margin: auto`` stands for, in display units;
            ``None`` for a metric plugdrop does not know (``margin`` must be given).
        help: what it is, for the settings reference.
        custom: a metric plugdrop does not know, named by ``decide_on: {metric, goal}``.
        own_unit: the units such a metric is logged in, as ``decide_on: {metric, goal,
            unit}`` names them (``ms``, ``dB``); ``""`` when not given.
    """

    name: str
    higher_is_better: bool
    scale: float
    auto_margin: float | None
    help: str
    custom: bool = False
    own_unit: str = ""

    #: ``goal:`` of ``decide_on: {metric, goal}`` -> whether higher is better
    GOALS = {"max": True, "min": False}
    #: the keys of ``decide_on: {metric, goal, unit}``
    KEYS = ("metric", "goal", "unit")

    @classmethod
    def logged(cls, name: str, higher_is_better: bool, unit: str = "") -> Metric:
        """A metric plugdrop does not know (a program logs it): shown as logged (scale 1),
        in its ``unit`` when given, without a margin of its own."""
        return cls(name, higher_is_better, 1.0, None, "", custom=True, own_unit=unit)

    @property
    def goal(self) -> str:
        """``"max"`` or ``"min"``."""
        return "max" if self.higher_is_better else "min"

    @property
    def percent(self) -> bool:
        """Whether it is a fraction shown in percentage points."""
        return self.scale == 100.0

    @property
    def digits(self) -> int:
        """Digits shown: 2 in percentage points, 3 for a loss in nats, 4 for a metric plugdrop
        does not know (where no interval sets them: :meth:`shown_digits`)."""
        return 4 if self.custom else 2 if self.percent else 3

    def shown_digits(self, spread: float | None, value: float | None = None) -> int:
        """Digits shown of a value in display units whose interval has the half-width
        ``spread`` (``None``: no interval): :attr:`digits` for a metric plugdrop knows, as
        many as the interval supports for one a program logs (:func:`supported_digits`)."""
        return supported_digits(spread, value) if self.custom else self.digits

    @property
    def unit(self) -> str:
        """``pp``, ``nats``, or a metric plugdrop does not know: the ``unit`` given with it
        (``""`` when none was)."""
        return "pp" if self.percent else self.own_unit if self.custom else "nats"

    @property
    def label(self) -> str:
        """The unit the tables' headers name: ``pp`` for a fraction, the ``unit`` given with
        a metric plugdrop does not know, else ``""`` (losses, and a metric given no unit)."""
        return self.unit if self.percent or self.custom else ""

    def plain(self) -> str | dict[str, str]:
        if not self.custom:
            return self.name
        unit = {"unit": self.own_unit} if self.own_unit else {}
        return {"metric": self.name, "goal": self.goal, **unit}


def _metrics(*rows: tuple[str, bool, str]) -> dict[str, Metric]:
    out = {}
    for name, higher, help in rows:
        percent = name not in ("val_loss", "val_nll")
        out[name] = Metric(name, higher, 100.0 if percent else 1.0, 0.5 if percent else 0.01,
                           help)
    return out


#: the metrics verdicts can be decided on, in the order the reference lists them; a fraction
#: is shown in percentage points (margin ``auto``: 0.5 pp), a loss in nats (``auto``: 0.01)
METRICS: dict[str, Metric] = _metrics(
    ("val_acc", True, "validation accuracy"),
    ("val_top5", True, "top-5 validation accuracy (more than 5 classes)"),
    ("val_loss", False, "validation loss (with label smoothing, as trained)"),
    ("val_nll", False, "validation negative log-likelihood"),
    ("val_ece", False, "expected calibration error on the validation set"),
    ("gap", False, "train minus validation accuracy (the train accuracy in eval mode on as "
                   "many training images as the validation set holds, with augment's "
                   "transform when set)"),
    ("val_acc_ema", True, "validation accuracy of the EMA weights (needs ema:)"))


def unit_problem(name: str, unit: object) -> str | None:
    """What is wrong with ``unit`` given in ``decide_on: {metric: name, unit: ...}`` (one line),
    ``None`` when nothing is: a short name on one line (at most 20 characters), and only for a
    metric plugdrop does not know (those of :data:`METRICS` have their own units)."""
    known = METRICS.get(name)
    if known is not None:
        return (f"decide_on: {name} is a metric plugdrop knows, shown in {known.unit}: leave "
                f"unit out")
    if not isinstance(unit, str) or not unit.strip() or unit != " ".join(unit.split()) \
            or len(unit) > 20:
        return (f"decide_on unit must be a short name of the metric's units on one line (ms, dB, "
                f"tokens/s), got {unit!r}")
    return None


@dataclass(frozen=True)
class DecisionRule:
    """How an ablation decides: on ``metric`` (its last epoch's value), with a family-wise
    error rate of ``alpha`` over every variant and look, calling a difference smaller than
    ``margin`` (display units; :data:`AUTO`: the metric's own) equivalent; an adaptive design
    spends each variant's alpha over the rounds by ``spending`` and passes a decided
    variant's alpha on to the open ones by ``passing`` (:data:`PASSING`).

    Attributes:
        metric: the decision metric.
        alpha: the family-wise error rate.
        margin: the equivalence margin in display units, resolved.
        spending: the spending function of the adaptive design.
        passing: ``"holm"`` or ``"bonferroni"``.
    """

    metric: Metric
    alpha: float
    margin: float
    spending: Spending
    passing: str

    def __init__(self, metric: Metric, alpha: float, margin: float | str,
                 spending: Spending = DEFAULT_SPENDING, passing: str = "holm") -> None:
        if passing not in PASSING:
            raise ValueError(f"passing must be one of {', '.join(PASSING)}, got {passing!r}")
        object.__setattr__(self, "metric", metric)
        object.__setattr__(self, "alpha", float(alpha))
        if margin == AUTO and metric.auto_margin is None:
            raise ValueError(f"{metric.name} is not a metric plugdrop knows: give the margin "
                             f"in its units")
        object.__setattr__(self, "margin", metric.auto_margin if margin == AUTO
                           else float(margin))
        object.__setattr__(self, "spending", spending)
        object.__setattr__(self, "passing", passing)

    @property
    def higher_is_better(self) -> bool:
        return self.metric.higher_is_better
