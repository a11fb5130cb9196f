"""Confidence intervals and paired comparisons, checked against a hand computation.

Three variants x four seeds of final accuracy, typed in. The t quantiles come from a printed
t-table (two-sided 95%: df=1 12.706, df=3 3.182; two-sided 90%: df=3 2.353), and the p-values
from the closed forms of Student's t CDF for 1 and 3 degrees of freedom:

    df=1: p = 1 - (2/pi) * atan(|t|)
    df=3: p = 1 - (2/pi) * (x / (1 + x^2) + atan(x)),  x = |t| / sqrt(3)
"""

from __future__ import annotations

import math
import warnings

import pytest

from plugdrop.ablate.decide.stats import MIN_SEEDS, mean_ci, paired_difference

A = {0: 0.80, 1: 0.82, 2: 0.78, 3: 0.84}  # baseline: mean 0.81, sum of squares 0.0020
B = {0: 0.83, 1: 0.84, 2: 0.82, 3: 0.87}  # mean 0.84; B - A = 0.03 0.02 0.04 0.03
C = {0: 0.82, 1: 0.81, 2: 0.81, 3: 0.82}  # C - A = 0.02 -0.01 0.03 -0.02

T95_DF1, T95_DF3, T90_DF3 = 12.706, 3.182, 2.353


def half(lo_hi: float | None, mean: float, t: float, se: float) -> None:
    """``lo_hi`` is ``mean -/+ t * se`` up to the t-table's rounding (0.0005)."""
    assert lo_hi is not None
    assert abs(lo_hi - mean) == pytest.approx(t * se, abs=0.0005 * se)


def p_df3(t: float) -> float:
    x = abs(t) / math.sqrt(3)
    return 1 - (2 / math.pi) * (x / (1 + x * x) + math.atan(x))


def p_df1(t: float) -> float:
    return 1 - (2 / math.pi) * math.atan(abs(t))


def test_mean_ci_by_hand() -> None:
    ci = mean_ci(list(A.values()))
    se = math.sqrt(0.0020 / 3) / 2  # s / sqrt(n)
    assert ci.n == 4 and ci.mean == pytest.approx(0.81)
    half(ci.low, 0.81, T95_DF3, se)
    half(ci.high, 0.81, T95_DF3, se)
    assert ci.format() == "81.00 [76.89, 85.11]"
    ci90 = mean_ci(list(A.values()), confidence=0.90)
    half(ci90.high, 0.81, T90_DF3, se)
    b = mean_ci(list(B.values()))
    half(b.high, 0.84, T95_DF3, math.sqrt(0.0014 / 3) / 2)


def test_paired_better_by_hand() -> None:
    d = paired_difference(B, A)
    se = math.sqrt(0.0002 / 3) / 2
    t = 0.03 / se  # 7.348
    assert d.n == 4 and d.seeds == (0, 1, 2, 3)
    assert d.mean == pytest.approx(0.03)
    half(d.low, 0.03, T95_DF3, se)
    half(d.high, 0.03, T95_DF3, se)
    assert d.p == pytest.approx(p_df3(t), rel=1e-9)
    assert d.conclusive and d.note == "" and d.verdict == "better"
    assert paired_difference(A, B).verdict == "worse"
    assert d.format() == "+3.00 [+1.70, +4.30]" and d.format_p() == "0.005"
    # For a loss, a higher value is worse: the same numbers, the other verdict.
    loss = paired_difference(B, A, higher_is_better=False)
    assert (loss.mean, loss.low, loss.high, loss.p) == (d.mean, d.low, d.high, d.p)
    assert loss.verdict == "worse" and loss.as_dict()["verdict"] == "worse"


def test_paired_no_clear_difference_by_hand() -> None:
    d = paired_difference(C, A)
    se = math.sqrt(0.0017 / 3) / 2
    assert d.mean == pytest.approx(0.005)
    half(d.high, 0.005, T95_DF3, se)
    assert d.p == pytest.approx(p_df3(0.005 / se), rel=1e-9)
    assert d.p is not None and d.p > 0.5
    assert d.verdict == "no clear difference"


def test_two_seeds_are_too_few() -> None:
    d = paired_difference({0: 0.9, 1: 0.93}, {0: 0.8, 1: 0.82})  # differences 0.10, 0.11
    se = math.sqrt(0.00005) / math.sqrt(2)
    assert d.n == 2 < MIN_SEEDS and not d.conclusive
    assert d.note == "too few seeds to conclude (n=2 < 3)"
    assert d.verdict == "too few seeds"
    half(d.high, 0.105, T95_DF1, se)
    assert d.p == pytest.approx(p_df1(0.105 / se), rel=1e-9)


def test_one_seed() -> None:
    ci = mean_ci([0.9])
    assert ci.mean == 0.9 and ci.low is None and ci.high is None and ci.half_width is None
    assert ci.note == "one seed: no confidence interval"
    assert ci.format() == "90.00 (1 seed, no CI)"
    d = paired_difference({0: 0.9}, {0: 0.8})
    assert d.n == 1 and d.p is None and d.low is None
    assert d.note == "too few seeds to conclude (n=1 < 3)" and d.verdict == "too few seeds"
    assert d.format() == "+10.00 (1 seed, no CI)" and d.format_p() == "-"


def test_nothing() -> None:
    ci = mean_ci([])
    assert ci.n == 0 and math.isnan(ci.mean) and ci.format() == "-"
    d = paired_difference({0: 0.9}, {1: 0.8})
    assert d.n == 0 and d.verdict == "no common seeds" and d.format() == "-"


def test_unpaired_seeds_use_common_ones() -> None:
    a = {0: 0.5, 1: 0.82, 2: 0.85, 3: 0.83}
    b = {1: 0.80, 2: 0.80, 3: 0.80, 4: 0.1}
    d = paired_difference(a, b)
    assert d.seeds == (1, 2, 3) and d.n == 3
    assert d.mean == pytest.approx((0.02 + 0.05 + 0.03) / 3)


def test_zero_spread_without_nan_or_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same = paired_difference(A, dict(A))
        shift = paired_difference({s: v + 0.1 for s, v in A.items()}, A)  # float rounding
        flat = mean_ci([0.7, 0.7, 0.7])
    assert same.p == 1.0 and same.mean == 0.0 and same.verdict == "no clear difference"
    assert same.low == same.high == 0.0
    assert shift.p == 0.0 and shift.mean == pytest.approx(0.1) and shift.verdict == "better"
    assert shift.format() == "+10.00 [+10.00, +10.00]" and shift.format_p() == "<0.001"
    assert flat.low == flat.high == pytest.approx(0.7)


def test_bad_confidence() -> None:
    with pytest.raises(ValueError, match="confidence"):
        mean_ci([1.0, 2.0], confidence=95)


def test_interval_is_cut_to_the_metric_range():
    # 3 seeds near 100%: the t-interval would reach past 1.0; an accuracy cannot.
    free = mean_ci([0.97, 0.99, 1.0])
    cut = mean_ci([0.97, 0.99, 1.0], bounds=(0.0, 1.0))
    assert free.high > 1.0 and cut.high == 1.0
    assert cut.low == free.low and cut.mean == free.mean


# ------------------------------------------------------------- the robust summaries' speed

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 3), min_size=1, max_size=12),
       st.lists(st.integers(-3, 3), min_size=1, max_size=12),
       st.integers(1, 5), st.booleans())
def test_the_probability_of_improvement_on_ranks_is_the_same_number(a, b, batch, higher):
    """The report bootstraps the probability of improvement on the values' ranks (counted per
    rank, not per pair): the same statistic, bit for bit, on any values with ties, one sample
    or a batch of resamples."""
    import numpy as np

    from plugdrop.ablate.report import robust as R

    x, y = np.array(a, dtype=np.float64) / 4, np.array(b, dtype=np.float64) / 4
    if not higher:
        x, y = -x, -y
    _, ranks = np.unique(np.concatenate([x, y]), return_inverse=True)
    rx, ry = ranks[:len(x)].astype(np.int64), ranks[len(x):].astype(np.int64)
    assert R._ranked_probability(rx, ry) == R.probability_of_improvement(x, y)
    rng = np.random.default_rng(len(a) * 31 + len(b))
    ix = rng.integers(0, len(x), (batch, len(x)))
    iy = rng.integers(0, len(y), (batch, len(y)))
    assert np.array_equal(R._ranked_probability(rx[ix], ry[iy]),
                          R.probability_of_improvement(x[ix], y[iy]))
