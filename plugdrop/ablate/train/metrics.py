"""What an evaluation measures: the metrics regularization is judged on, summed over batches on
the device (one host read per evaluation), all-reduced under torchrun.

``loss`` (the training criterion: cross-entropy with the run's label smoothing), ``acc``
(top-1), ``top5`` (where there are more than 5 classes), ``nll`` (the negative log-likelihood,
without smoothing), ``ece`` (the expected calibration error over 15 equal-width bins of the
top-1 confidence: the mean of ``|accuracy - confidence|`` per bin, weighted by the bin's share)
and ``calibration`` (the bins themselves: count, mean confidence, accuracy) for a reliability
diagram.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

__all__ = ["BINS", "EvalSums"]

#: equal-width confidence bins of the calibration error
BINS = 15


class EvalSums:
    """Running sums of one evaluation pass over ``classes``-way logits on ``device``."""

    def __init__(self, classes: int, device: torch.device, smoothing: float) -> None:
        self.classes, self.smoothing = classes, smoothing
        # loss, nll, correct, correct top-5, n
        self.totals = torch.zeros(5, dtype=torch.float64, device=device)
        self.bins = torch.zeros(3, BINS, dtype=torch.float64, device=device)

    def add(self, logits: torch.Tensor, target: torch.Tensor) -> None:
        logits = logits.float()
        logp = F.log_softmax(logits, 1)
        pred = logits.argmax(1)
        conf = logp.gather(1, pred[:, None]).squeeze(1).exp()
        hit = (pred == target).double()
        k = min(5, logits.shape[1])
        top5 = (logits.topk(k, 1).indices == target[:, None]).any(1).double()
        self.totals += torch.stack([
            F.cross_entropy(logits, target, reduction="sum",
                            label_smoothing=self.smoothing).double(),
            F.nll_loss(logp, target, reduction="sum").double(), hit.sum(), top5.sum(),
            torch.tensor(float(len(target)), dtype=torch.float64, device=logits.device)])
        which = (conf.double() * BINS).long().clamp(max=BINS - 1)
        for row, values in enumerate((torch.ones_like(hit), conf.double(), hit)):
            self.bins[row].index_add_(0, which, values)

    def reduce(self) -> None:
        """Sum over the processes of a torchrun group."""
        both = torch.cat([self.totals, self.bins.flatten()])
        dist.all_reduce(both)
        self.totals, self.bins = both[:5], both[5:].view(3, BINS)

    def result(self) -> dict[str, Any]:
        """The metrics (one host read)."""
        loss, nll, correct, correct5, n = self.totals.tolist()
        count, conf, hit = self.bins.tolist()
        total = max(n, 1.0)
        ece = sum(abs(h - c) for c, h in zip(conf, hit)) / total
        out: dict[str, Any] = {"loss": loss / total, "acc": correct / total, "nll": nll / total,
                               "ece": ece}
        if self.classes > 5:
            out["top5"] = correct5 / total
        out["calibration"] = {"count": [int(c) for c in count],
                              "confidence": [c / k if k else None for c, k in zip(conf, count)],
                              "accuracy": [h / k if k else None for h, k in zip(hit, count)]}
        return out
