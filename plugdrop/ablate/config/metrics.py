"""What verdicts are decided on: the metrics a run records (:data:`METRICS`, each with its
direction and the units it is shown in) and the rule of an ablation's decisions
(:class:`DecisionRule`: the metric, the family-wise error rate and the equivalence margin),
which the config carries to the runner's design and to the report.

    >>> rule = DecisionRule(METRICS["val_nll"], alpha=0.05, margin=AUTO)
    >>> rule.metric.higher_is_better, rule.margin
    (False, 0.01)
"""

from __future__ import annotations

from dataclasses import dataclass
__all__ = ["AUTO", "DecisionRule", "METRICS", "Metric"]

#: the ``margin`` setting's value that stands for the metric's own margin
AUTO = "auto"


@dataclass(frozen=True)
class Metric:
    """A metric a run records per epoch, as verdicts read it.

    Attributes:
        name: its key in ``metrics.jsonl`` (``val_acc``).
        higher_is_better: its direction.
        scale: display units per metric unit (100 for a fraction shown in percentage points).
        auto_margin: the equivalence margin ``margin: auto`` stands for, in display units.
        help: what it is, for the settings reference.
    """

    name: str
    higher_is_better: bool
    scale: float
    auto_margin: float
    help: str

    @property
    def percent(self) -> bool:
        """Whether it is a fraction shown in percentage points."""
        return self.scale == 100.0

    @property
    def digits(self) -> int:
        """Digits shown: 2 in percentage points, 3 for a loss in nats."""
        return 2 if self.percent else 3

    @property
    def unit(self) -> str:
        return "pp" if self.percent else "nats"

    def plain(self) -> str:
        return self.name


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
    ``margin`` (display units; :data:`AUTO`: the metric's own) equivalent.

    Attributes:
        metric: the decision metric.
        alpha: the family-wise error rate.
        margin: the equivalence margin in display units, resolved.
    """

    metric: Metric
    alpha: float
    margin: float

    def __init__(self, metric: Metric, alpha: float, margin: float | str) -> None:
        object.__setattr__(self, "metric", metric)
        object.__setattr__(self, "alpha", float(alpha))
        object.__setattr__(self, "margin", metric.auto_margin if margin == AUTO
                           else float(margin))

    @property
    def higher_is_better(self) -> bool:
        return self.metric.higher_is_better
