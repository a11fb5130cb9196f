"""The adaptive seed design's statistics, validated by simulation (numpy only, seconds): with no
true effect and heavy-tailed seed noise, false better/worse verdicts over 2000 simulated
ablations looked at after every round stay at alpha; with a true effect the design decides with
fewer seeds than a fixed design of the same power. Then its rules one by one."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from plugdrop.ablate.config import METRICS, DecisionRule, SeedPlan
from plugdrop.ablate.report import sequential as S


def Plan(min: int, max: int, step: int = 1) -> SeedPlan:
    return SeedPlan(min=min, max=max, step=step)


def Design(plan: SeedPlan, base: str, variants: tuple[str, ...], *, alpha: float = 0.05,
           margin: float = 0.5, higher_is_better: bool = True) -> S.Design:
    """A design deciding on accuracy (percentage points), or on a loss (nats) when lower is
    better."""
    metric = METRICS["val_acc" if higher_is_better else "val_nll"]
    return S.Design(plan, base, variants, DecisionRule(metric, alpha, margin))


PLAN = Plan(min=3, max=12)
VARIANTS = ("a", "b", "c")
SIMS = 2000


def _values(rng: np.random.Generator, effects: dict[str, float]) -> dict[str, dict[int, float]]:
    """One simulated ablation: per seed a shared level (the seed's luck) plus, per run,
    heavy-tailed noise (Student t with 3 degrees of freedom, scaled to sd 1), in percent."""
    seeds = PLAN.seeds()
    luck = rng.normal(90.0, 2.0, len(seeds))
    noise = lambda: rng.standard_t(3, len(seeds)) / math.sqrt(3.0)  # noqa: E731
    out = {"base": dict(zip(seeds, (luck + noise()) / 100))}
    for v, effect in effects.items():
        out[v] = dict(zip(seeds, (luck + effect + noise()) / 100))
    return out


def _simulate(effects: dict[str, float], seed: int = 0) -> tuple[float, float, float]:
    """(share of ablations with a false or any better/worse verdict, mean seeds per variant,
    share of variants called better)."""
    design = Design(PLAN, "base", tuple(effects), alpha=0.05, margin=0.5)
    rng = np.random.default_rng(seed)
    wrong = better = 0
    used: list[int] = []
    for _ in range(SIMS):
        rep = design.replay(_values(rng, effects))
        assert rep.complete
        verdicts = {v: d.verdict for v, d in rep.decisions.items()}
        wrong += any((verdicts[v] in (S.BETTER, S.WORSE)) and effects[v] == 0.0
                     or (verdicts[v] == S.WORSE and effects[v] > 0) for v in effects)
        better += sum(verdicts[v] == S.BETTER for v in effects)
        used += [rep.seeds_used(v) for v in effects]
    return wrong / SIMS, float(np.mean(used)), better / (SIMS * len(effects))


def test_no_effect_false_verdicts_stay_at_alpha_under_repeated_looks():
    rate, _, _ = _simulate({v: 0.0 for v in VARIANTS})
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / SIMS)
    assert rate <= bound, f"false verdict rate {rate:.4f} > {bound:.4f}"


def _fixed_power(n: int, effect: float, m: int, rng: np.random.Generator) -> float:
    """Power of the fixed design with ``n`` seeds: a paired t-test at level alpha / m on the
    same heavy-tailed noise."""
    d = effect + (rng.standard_t(3, (SIMS, n)) - rng.standard_t(3, (SIMS, n))) / math.sqrt(3)
    t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(n))
    return float(np.mean(2 * stats.t.sf(np.abs(t), n - 1) < 0.05 / m) * 1.0)


def test_a_true_effect_is_decided_with_fewer_seeds_than_a_fixed_design_of_its_power():
    """With a true effect of 3 percentage points on two variants (the difference of two runs
    has sd 1.4 pp), the design needs about 6 seeds on average where a fixed design of the same
    power needs 8 (simulated figures in the README)."""
    effect = 3.0
    _, mean_seeds, power = _simulate({"a": effect, "b": effect}, seed=1)
    rng = np.random.default_rng(2)
    fixed = next(n for n in range(3, 40) if _fixed_power(n, effect, 2, rng) >= power)
    assert power > 0.9 and mean_seeds < fixed - 1, (power, mean_seeds, fixed)


def _design(**kw) -> S.Design:
    return Design(Plan(min=3, max=6), "base", ("good", "bad", "same"), **kw)


def _vals(offsets: dict[str, float | None], seeds=range(6), spread=0.01) -> dict:
    """Per seed the baseline's value and each variant's at ``offset`` from it with a little
    noise; ``None``: exactly the baseline's (a variant that trains identically)."""
    base = {s: 0.9 + spread * ((s * 7) % 5) / 5 for s in seeds}
    return {"base": base, **{v: {s: base[s] if off is None else
                                 base[s] + off + 0.001 * ((s * 3) % 4 - 1.5)
                                 for s in seeds} for v, off in offsets.items()}}


def test_rules_better_worse_equivalent_at_the_first_look_and_the_baseline_runs_on():
    rep = _design().replay(_vals({"good": 0.05, "bad": -0.3, "same": None}, seeds=range(3)))
    assert rep.complete and rep.rounds == [3]
    v = {k: d.verdict for k, d in rep.decisions.items()}
    assert v == {"good": S.BETTER, "bad": S.WORSE, "same": S.EQUIVALENT}
    assert all(d.round == 1 and d.n == 3 for d in rep.decisions.values())
    assert [e["variant"] for e in rep.events] == ["good", "bad", "same"]
    assert rep.decisions["bad"].p is not None and rep.decisions["bad"].p < 0.05


def test_an_open_variant_gets_more_seeds_and_an_undecided_one_ends_inconclusive():
    d = Design(Plan(min=3, max=5), "base", ("noisy",), margin=0.1)
    base = {s: 0.90 for s in range(5)}
    noisy = {s: 0.90 + (0.02 if s % 2 else -0.02) for s in range(5)}
    rep = d.replay({"base": {0: 0.9, 1: 0.9, 2: 0.9}, "noisy": {0: 0.88, 1: 0.92, 2: 0.88}})
    assert not rep.complete and rep.needed == [("base", 3), ("noisy", 3)]  # round 2
    rep = d.replay({"base": base, "noisy": noisy})
    assert rep.complete and rep.rounds == [3, 4, 5]
    dec = rep.decisions["noisy"]
    assert dec.verdict == S.INCONCLUSIVE and dec.n == 5 and dec.round == 3
    assert dec.low is not None and dec.low < 0 < dec.high  # type: ignore[operator]


def test_the_values_of_a_grid_race_and_other_variants_do_not():
    top, low, other = "g[p=0.1]", "g[p=0.3]", "other"
    d = Design(Plan(min=3, max=8), "base", (top, low, other), margin=0.01)
    seeds = range(3)
    base = {s: 0.90 + 0.01 * (s % 2) for s in seeds}
    noise = [0.005, 0.007, 0.006]  # above 0, not clearly: open against the baseline
    vals = {"base": base,
            top: {s: base[s] + [0.04, 0.045, 0.042][s] for s in seeds},
            low: {s: base[s] + noise[s] for s in seeds},
            other: {s: base[s] + noise[s] for s in seeds}}
    rep = d.replay(vals)
    assert rep.decisions[top].verdict == S.BETTER
    dropped = rep.decisions[low]
    assert dropped.verdict == S.DROPPED and dropped.behind == top and "behind g[p=0.1]" in \
        dropped.reason
    assert rep.decisions[other].verdict == S.OPEN and rep.needed == [("base", 3), (other, 3)]


def test_failed_runs_count_as_ended_and_lower_is_better_metrics():
    d = Design(Plan(min=3, max=3), "base", ("v",), higher_is_better=False,
               margin=0.01)
    rep = d.replay({"base": {0: 1.0, 1: 1.1, 2: None}, "v": {0: 0.5, 1: 0.55, 2: 0.6}})
    assert rep.complete and rep.decisions["v"].n == 2  # seed 2's baseline failed
    assert rep.decisions["v"].mean == pytest.approx(0.525)  # lower loss: positive = better
    # The reasons speak of the interval a user sees: the loss minus the baseline's.
    d3 = Design(Plan(min=3, max=3), "base", ("low", "high"), higher_is_better=False,
                margin=0.01)
    base = {0: 1.0, 1: 1.1, 2: 1.05}
    rep = d3.replay({"base": base, "low": {s: x - 0.5 + 0.01 * s for s, x in base.items()},
                     "high": {s: x + 0.5 - 0.01 * s for s, x in base.items()}})
    low, high = rep.decisions["low"], rep.decisions["high"]
    assert (low.verdict, high.verdict) == (S.BETTER, S.WORSE)
    assert "lies below 0" in low.reason and "lies above 0" in high.reason
    # decisions.jsonl and results.json show the loss minus the baseline's, as the table does.
    assert high.mean is not None and high.mean < 0  # oriented: positive = better
    shown = high.as_dict()
    assert shown["mean"] == pytest.approx(-high.mean) and 0 < shown["low"] < shown["high"]
    assert shown["low"] == pytest.approx(-high.high) and rep.events[1]["low"] > 0


def test_spending_adds_up_to_alpha():
    for plan in (Plan(3, 12), Plan(2, 9, step=3), Plan(5, 5)):
        w = S.weights(plan)
        assert len(w) == len(plan.looks()) and sum(w) == pytest.approx(1.0)
        assert all(x > 0 for x in w)
    assert Plan(2, 9, step=3).looks() == [2, 5, 8, 9]
