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

from dataclasses import dataclass

from .spending import DEFAULT_SPENDING, Spending

__all__ = ["AUTO", "DecisionRule", "METRICS", "Metric", "PASSING"]

#: the ``margin`` setting's value that stands for the metric's own margin
AUTO = "auto"
#: the ``passing`` setting's values: Holm (a decided variant's alpha goes to the open ones, the
#: graphical approach of Maurer and Bretz) or Bonferroni (nothing is passed on)
PASSING = ("holm", "bonferroni")


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
    """

    name: str
    higher_is_better: bool
    scale: float
    auto_margin: float | None
    help: str
    custom: bool = False

    #: ``goal:`` of ``decide_on: {metric, goal}`` -> whether higher is better
    GOALS = {"max": True, "min": False}

    @classmethod
    def logged(cls, name: str, higher_is_better: bool) -> Metric:
        """A metric plugdrop does not know (a program logs it): shown as logged (scale 1),
        without a margin of its own."""
        return cls(name, higher_is_better, 1.0, None, "", custom=True)

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
        does not know."""
        return 4 if self.custom else 2 if self.percent else 3

    @property
    def unit(self) -> str:
        """``pp``, ``nats``, or ``""`` (a metric plugdrop does not know: its own units)."""
        return "pp" if self.percent else "" if self.custom else "nats"

    def plain(self) -> str | dict[str, str]:
        return {"metric": self.name, "goal": self.goal} if self.custom else self.name


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
