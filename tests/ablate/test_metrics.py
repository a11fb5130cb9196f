"""The evaluation's metrics, by hand: accuracy, top-5, NLL without label smoothing, the loss with
it, and the expected calibration error over 15 equal-width confidence bins."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from plugdrop.ablate.train.metrics import BINS, EvalSums


def test_metrics_by_hand():
    torch.manual_seed(0)
    logits = torch.randn(40, 7) * 3
    target = torch.randint(0, 7, (40,))
    sums = EvalSums(7, torch.device("cpu"), smoothing=0.1)
    sums.add(logits[:25], target[:25])  # two batches: sums, not means of means
    sums.add(logits[25:], target[25:])
    got = sums.result()
    p = logits.softmax(1)
    conf, pred = p.max(1)
    hit = (pred == target).float()
    assert got["acc"] == pytest.approx(hit.mean().item())
    assert got["top5"] == pytest.approx((logits.topk(5, 1).indices == target[:, None])
                                        .any(1).float().mean().item())
    assert got["nll"] == pytest.approx(F.cross_entropy(logits, target).item(), rel=1e-6)
    assert got["loss"] == pytest.approx(F.cross_entropy(logits, target, label_smoothing=0.1)
                                        .item(), rel=1e-6)
    ece = 0.0
    for b in range(BINS):
        inside = (conf * BINS).long().clamp(max=BINS - 1) == b
        if inside.any():
            ece += inside.float().mean().item() * abs(hit[inside].mean().item()
                                                      - conf[inside].mean().item())
    assert got["ece"] == pytest.approx(ece, abs=1e-6)
    cal = got["calibration"]
    assert sum(cal["count"]) == 40 and len(cal["accuracy"]) == BINS
    filled = [i for i, n in enumerate(cal["count"]) if n]
    assert all(cal["confidence"][i] is not None for i in filled)
    assert all(cal["accuracy"][i] is None for i, n in enumerate(cal["count"]) if not n)


def test_five_classes_or_fewer_have_no_top5_and_a_perfect_model_is_calibrated():
    target = torch.tensor([0, 1, 2, 1])
    logits = F.one_hot(target, 3).float() * 50  # certain and right: confidence 1, accuracy 1
    sums = EvalSums(3, torch.device("cpu"), smoothing=0.0)
    sums.add(logits, target)
    got = sums.result()
    assert "top5" not in got and got["acc"] == 1.0 and got["ece"] < 1e-6
    assert math.isclose(got["nll"], 0.0, abs_tol=1e-6)
