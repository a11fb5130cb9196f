"""The group-sequential decision rule (``verdicts.decide``) and its vectorised simulator
(``simulate``), issue 34: the simulator makes the very decisions of the per-ablation rule; the
family-wise rate of false verdicts stays at alpha under normal and t(3) noise for 1, 4 and 8
variants; the issue's goals are met; the old design's figures are reproduced; skewed
differences are warned about; identical values, unplanned looks, alpha passing and the race.
Simulations have fixed seeds and tolerances of 3 binomial standard errors."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from plugdrop.ablate.decide import boundaries as B
from plugdrop.ablate.decide import simulate as S
from plugdrop.ablate.decide.skew import pooled_skewness, skew_warning
from plugdrop.ablate.decide.verdicts import CODES, SeqDesign, decide, moments

ALPHA = 0.05
DESIGN = SeqDesign.plan(3, 12)


def bound(p: float, reps: int) -> float:
    """Alpha plus 3 binomial standard errors."""
    return p + 3 * math.sqrt(p * (1 - p) / reps)


@pytest.mark.parametrize("margin,groups,effects", [
    (0.0, None, (1.0, 0.0, 0.0, 0.0)),
    (0.5, None, (0.3, 0.0, -0.2, 2.0)),
    (0.3, [0, 0, 1, -1], (1.5, 0.2, 0.0, -1.0)),
])
def test_the_vectorised_path_makes_the_decisions_of_the_per_ablation_rule(margin, groups,
                                                                          effects):
    design = SeqDesign.plan(3, 12, margin=margin)
    x = S.draw(effects, 12, 60, "normal", np.random.default_rng(5))
    code, at = S.run(design, x, groups)
    seen = set()
    for r in range(len(x)):
        out = decide(design, x[r], groups=groups, p_values=False)
        assert [CODES.index(v.verdict) for v in out.variants] == list(code[r])
        assert [v.look for v in out.variants] == list(at[r])
        seen |= {v.verdict for v in out.variants}
    assert {"better", "inconclusive"} <= seen  # the cases are not trivial


@pytest.mark.parametrize("noise", ["normal", "t3"])
@pytest.mark.parametrize("variants", [1, 4, 8])
def test_false_verdicts_stay_at_alpha(noise, variants):
    """No variant differs: the share of ablations with any better/worse verdict stays at
    alpha (heavy tails make the t-test conservative, not liberal)."""
    reps = 6000
    oc = S.plan((0.0,) * variants, noise=noise, reps=reps, seed=variants)
    assert oc.false_verdict_rate <= bound(ALPHA, reps), oc.false_verdict_rate
    assert oc.variants[0].mean_seeds > 11  # nothing to find: they run to the end


def _both(effects, noise="normal", reps=20_000, seed=0):
    """The new and the old design (and the fixed one) on the same simulated ablations."""
    x = S.draw(effects, 12, reps, noise, np.random.default_rng(seed))
    mu, looks = np.asarray(effects, dtype=np.float64), DESIGN.looks
    summary = {}
    for name, (code, at) in {"new": S.run(DESIGN, x), "old": S.legacy_run(looks, x)}.items():
        summary[name] = S.characteristics(mu, code, at, looks, name)
    return summary


def test_the_goals_of_issue_34_against_the_old_design():
    """4 variants, seeds 3..12, alpha 0.05, normal noise, 20,000 ablations. The old design's
    figures are the issue's (28% at 1 sd after 11.1 seeds; 96% at 2 sd after 7.8; false
    verdicts 3.3% normal, 2.2% t(3)), the new one meets every goal (with margins of 3-5 SE)."""
    reps = 20_000
    one, two = _both((1, 0, 0, 0), seed=1), _both((2, 0, 0, 0), seed=2)
    big, none = _both((20, 0, 0, 0), seed=3), _both((0, 0, 0, 0), seed=4)
    heavy = _both((0, 0, 0, 0), "t3", seed=5)
    # two simulations of 20,000 each (the issue's and this one), figures rounded to 1%/0.1
    tol = lambda p: 3 * math.sqrt(2 * p * (1 - p) / reps) + 0.005  # noqa: E731
    old = {k: v["old"] for k, v in {"1": one, "2": two, "20": big, "0": none, "t3": heavy}.items()}
    assert abs(old["1"].variants[0].better - 0.28) <= tol(0.28)
    assert abs(old["1"].variants[0].mean_seeds - 11.1) <= 0.05 + 3 * math.sqrt(2) * 0.02
    assert abs(old["2"].variants[0].better - 0.96) <= tol(0.96)
    assert abs(old["2"].variants[0].mean_seeds - 7.8) <= 0.05 + 3 * math.sqrt(2) * 0.02
    assert abs(old["0"].false_verdict_rate - 0.033) <= tol(0.033) - 0.004  # 0.1% rounding
    assert abs(old["t3"].false_verdict_rate - 0.022) <= tol(0.022) - 0.004
    assert old["20"].variants[0].at_first >= 0.99
    new = {k: v["new"] for k, v in {"1": one, "2": two, "20": big, "0": none, "t3": heavy}.items()}
    assert new["1"].variants[0].better >= 0.57 and new["1"].variants[0].mean_seeds <= 11
    assert new["2"].variants[0].better >= 0.99 and new["2"].variants[0].mean_seeds <= 7.9
    assert new["20"].variants[0].at_first >= 0.95
    assert new["0"].false_verdict_rate <= bound(ALPHA, reps)
    assert new["t3"].false_verdict_rate <= bound(ALPHA, reps)


def test_skewed_differences_break_the_t_test_and_are_warned_about():
    """Skewness 1.75 of the paired differences: false verdicts well above alpha, in the fixed
    t-test too; the pooled skewness of an ablation warns in most such ablations and in few
    normal ones."""
    reps = 6000
    oc = S.plan((0.0,) * 4, noise="skewed", reps=reps, seed=11)
    assert oc.false_verdict_rate > bound(ALPHA, reps)
    assert oc.fixed is not None and oc.fixed.false_verdict_rate > bound(ALPHA, reps)
    warned = {}
    for noise in ("normal", "skewed"):
        x = S.draw((0.0,) * 4, 12, 300, noise, np.random.default_rng(12))
        warned[noise] = np.mean([skew_warning(*pooled_skewness(xi), 0.5) for xi in x])
    assert warned["normal"] <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 300)
    assert warned["skewed"] >= 0.4, warned


def test_identical_values_decide_without_dividing_by_zero():
    """Every seed moved by the same amount: called at the first look, with an interval of
    zero width; no difference at all: equivalent. No warning, no division by zero."""
    design = SeqDesign.plan(3, 6, margin=0.1)
    diffs = np.array([[0.5] * 6, [-0.25] * 6, [0.0] * 6, [0.9 - 0.8 - 0.1] + [0.0] * 5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            out = decide(design, diffs)
    v = out.variants
    assert [x.verdict for x in v] == ["better", "worse", "equivalent", "equivalent"]
    assert all(x.look == 1 and x.low == x.high == x.mean for x in v)
    assert v[0].p_adjusted is not None and v[0].p_adjusted == 0.0 and v[2].p_adjusted == 1.0


def test_alpha_passes_on_to_the_open_variants():
    """A variant called better at the first look passes its alpha on (Holm): the others are
    tested at alpha/3 from then on, where Bonferroni keeps alpha/4."""
    x = S.draw((30.0, 0.0, 0.0, 0.0), 12, 1, "normal", np.random.default_rng(3))[0]
    holm = decide(DESIGN, x, p_values=False)
    bonf = decide(SeqDesign.plan(3, 12, passing=False), x, p_values=False)
    assert holm.variants[0].verdict == "better" and holm.variants[0].look == 1
    assert holm.variants[0].level == pytest.approx(ALPHA / 4)
    assert all(v.level == pytest.approx(ALPHA / 3) for v in holm.variants[1:])
    assert all(v.level == pytest.approx(ALPHA / 4) for v in bonf.variants[1:])
    assert "Holm" in holm.procedure and bonf.procedure == "Bonferroni"


def test_a_failed_run_or_a_raised_maximum_gives_the_boundaries_of_the_looks_taken():
    """Seed 3 failed (nan): after 3, 4, 5, 6 seeds the variant has 3, 3, 4, 5 pairs, so its
    looks are 3, 4, 5 (the second look brings nothing new) and its boundary is the one of
    those looks, spent by information, everything left at the last; a maximum raised from 6
    to 8 on resume spends the rest over the new information."""
    design = SeqDesign.plan(3, 6)
    x = S.draw((0.0,), 6, 1, "normal", np.random.default_rng(9))[0].copy()
    x[0, 3] = np.nan
    out = decide(design, x, p_values=False)
    own = B.critical_values((3, 4, 5), ALPHA, design.spending, (6, 6, 5))
    assert out.variants[0].n == 5 and out.variants[0].crit == pytest.approx(own[-1])
    raised = SeqDesign.plan(3, 8)
    y = S.draw((0.0,), 8, 1, "normal", np.random.default_rng(10))[0]
    out = decide(raised, y, looks=(3, 4, 5, 6, 7, 8), plan_max=(6, 6, 6, 8, 8, 8),
                 p_values=False)
    own = B.critical_values((3, 4, 5, 6, 7, 8), ALPHA, raised.spending, (6, 6, 6, 8, 8, 8))
    assert out.variants[0].crit == pytest.approx(own[out.variants[0].look - 1])
    assert np.isinf(own[3])  # 6 of 8 seeds is less information than 5 of 6: nothing to spend


def test_the_values_of_a_grid_race():
    design = SeqDesign.plan(3, 12)
    x = np.zeros((2, 12))
    x[0] = 5.0 + np.linspace(-0.3, 0.3, 12)      # far ahead
    x[1] = -2.0 + 0.433 * np.resize([-1.0, 0.0, 1.0], 12)  # behind it, not clearly below 0
    out = decide(design, x, groups=[0, 0], p_values=False)
    assert out.variants[0].verdict == "better"
    assert out.variants[1].verdict == "dropped" and out.variants[1].behind == 0


def test_plan_json_has_the_issue_schema():
    oc = S.plan((1.0, 0.0), reps=500, seed=1)
    doc = json.loads(json.dumps(oc.as_json()))
    assert list(doc) == ["variants", "false_verdict_rate", "fixed", "reps"]
    assert list(doc["variants"][0]) == ["effect", "better", "worse", "equivalent",
                                        "inconclusive", "mean_seeds"]
    assert doc["reps"] == 500 and doc["fixed"]["variants"][0]["mean_seeds"] == 12
    assert sum(doc["variants"][1][k] for k in ("better", "worse", "equivalent",
                                                "inconclusive")) == pytest.approx(1.0)


def test_moments_ignore_failed_runs():
    x = np.array([[[1.0, np.nan, 3.0, 5.0]]])
    (n, mean, sd, flat), = moments(x, [4])
    assert n[0, 0] == 3 and mean[0, 0] == pytest.approx(3.0) and sd[0, 0] == pytest.approx(2.0)
    assert not flat[0, 0]


def test_seeds_needed_is_the_fixed_design_count_of_the_power_asked():
    reps, power = 20_000, 0.8
    n = S.seeds_needed(1.0, ALPHA, power)
    assert n is not None and S.seeds_needed(0.0, ALPHA) is None
    tol = 3 * math.sqrt(power * (1 - power) / reps)
    for seeds, ok in ((n, lambda p: p >= power - tol), (n - 1, lambda p: p < power + tol)):
        x = S.draw((1.0,), seeds, reps, "normal", np.random.default_rng(seeds))
        assert ok(float(np.mean(S.fixed_run(x, ALPHA) == 1))), seeds

