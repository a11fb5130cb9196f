"""The runner's adaptive seed design (``sequential.Design.replay``). The exact group-sequential
design decides through ``verdicts.decide``, whose statistics (false verdicts at alpha under
normal and t(3) noise, power and seeds against the old and a fixed design) are proven by
simulation in ``test_simulate.py``: here, that the runner's replay makes the very decisions of
the planner's vectorised path on the same values, asks for the seeds those decisions imply, and
keeps its rules one by one (on both designs). The legacy design (folders an older plugdrop
started) keeps its own simulation tests: with no true effect and heavy-tailed seed noise, false
better/worse verdicts over 2000 simulated ablations looked at after every round stay at alpha;
with a true effect it decides with fewer seeds than a fixed design of the same power."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from plugdrop.ablate.config import METRICS, DecisionRule, SeedPlan, Spending
from plugdrop.ablate.decide import legacy as L
from plugdrop.ablate.decide import design as S
from plugdrop.ablate.decide import simulate
from plugdrop.ablate.decide.verdicts import CODES, SeqDesign, decide

BOTH = pytest.mark.parametrize("legacy", [False, True], ids=["exact", "legacy"])


def Plan(min: int, max: int, step: int = 1) -> SeedPlan:
    return SeedPlan(min=min, max=max, step=step)


def Design(plan: SeedPlan, base: str, variants: tuple[str, ...], *, alpha: float = 0.05,
           margin: float = 0.5, higher_is_better: bool = True, legacy: bool = False,
           **rule) -> S.Design:
    """A design deciding on accuracy (percentage points), or on a loss (nats) when lower is
    better; ``legacy``: the design of folders an older plugdrop started."""
    metric = METRICS["val_acc" if higher_is_better else "val_nll"]
    return S.Design(plan, base, variants, DecisionRule(metric, alpha, margin, **rule), legacy)


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
    """The legacy design's (share of ablations with a false or any better/worse verdict, mean
    seeds per variant, share of variants called better): its decisions (``legacy.replay``),
    without the forecasts and skewness the runner's replay adds to them."""
    rule = DecisionRule(METRICS["val_acc"], 0.05, 0.5)
    rng = np.random.default_rng(seed)
    wrong = better = 0
    used: list[int] = []
    for _ in range(SIMS):
        rep = L.replay(PLAN, "base", tuple(effects), rule, _values(rng, effects))
        assert rep.complete
        verdicts = {v: d.verdict for v, d in rep.decisions.items()}
        wrong += any((verdicts[v] in (S.BETTER, S.WORSE)) and effects[v] == 0.0
                     or (verdicts[v] == S.WORSE and effects[v] > 0) for v in effects)
        better += sum(verdicts[v] == S.BETTER for v in effects)
        used += [rep.seeds_used(v) for v in effects]
    return wrong / SIMS, float(np.mean(used)), better / (SIMS * len(effects))


@pytest.mark.slow
def test_legacy_no_effect_false_verdicts_stay_at_alpha_under_repeated_looks():
    rate, _, _ = _simulate({v: 0.0 for v in VARIANTS})
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / SIMS)
    assert rate <= bound, f"false verdict rate {rate:.4f} > {bound:.4f}"


def _fixed_power(n: int, effect: float, m: int, rng: np.random.Generator) -> float:
    """Power of the fixed design with ``n`` seeds: a paired t-test at level alpha / m on the
    same heavy-tailed noise."""
    d = effect + (rng.standard_t(3, (SIMS, n)) - rng.standard_t(3, (SIMS, n))) / math.sqrt(3)
    t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(n))
    return float(np.mean(2 * stats.t.sf(np.abs(t), n - 1) < 0.05 / m) * 1.0)


def test_legacy_a_true_effect_is_decided_with_fewer_seeds_than_a_fixed_design_of_its_power():
    """With a true effect of 3 percentage points on two variants (the difference of two runs
    has sd 1.4 pp), the legacy design needs about 6 seeds on average where a fixed design of
    the same power needs 8."""
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


@BOTH
def test_rules_better_worse_equivalent_at_the_first_look_and_the_baseline_runs_on(legacy):
    rep = _design(legacy=legacy).replay(_vals({"good": 0.05, "bad": -0.3, "same": None}, seeds=range(3)))
    assert rep.complete and rep.rounds == [3]
    v = {k: d.verdict for k, d in rep.decisions.items()}
    assert v == {"good": S.BETTER, "bad": S.WORSE, "same": S.EQUIVALENT}
    assert all(d.round == 1 and d.n == 3 for d in rep.decisions.values())
    assert [e["variant"] for e in rep.events] == ["good", "bad", "same"]
    assert rep.decisions["bad"].p is not None and rep.decisions["bad"].p < 0.05


@BOTH
def test_an_open_variant_gets_more_seeds_and_an_undecided_one_ends_inconclusive(legacy):
    d = Design(Plan(min=3, max=5), "base", ("noisy",), margin=0.1, legacy=legacy)
    base = {s: 0.90 for s in range(5)}
    noisy = {s: 0.90 + (0.02 if s % 2 else -0.02) for s in range(5)}
    rep = d.replay({"base": {0: 0.9, 1: 0.9, 2: 0.9}, "noisy": {0: 0.88, 1: 0.92, 2: 0.88}})
    assert not rep.complete and rep.needed == [("base", 3), ("noisy", 3)]  # round 2
    rep = d.replay({"base": base, "noisy": noisy})
    assert rep.complete and rep.rounds == [3, 4, 5]
    dec = rep.decisions["noisy"]
    assert dec.verdict == S.INCONCLUSIVE and dec.n == 5 and dec.round == 3
    assert dec.low is not None and dec.low < 0 < dec.high  # type: ignore[operator]


@BOTH
def test_the_values_of_a_grid_race_and_other_variants_do_not(legacy):
    top, low, other = "g[p=0.1]", "g[p=0.3]", "other"
    d = Design(Plan(min=3, max=8), "base", (top, low, other), margin=0.01, legacy=legacy)
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


@BOTH
def test_failed_runs_count_as_ended_and_lower_is_better_metrics(legacy):
    d = Design(Plan(min=3, max=3), "base", ("v",), higher_is_better=False,
               margin=0.01, legacy=legacy)
    rep = d.replay({"base": {0: 1.0, 1: 1.1, 2: None}, "v": {0: 0.5, 1: 0.55, 2: 0.6}})
    assert rep.complete and rep.decisions["v"].n == 2  # seed 2's baseline failed
    assert rep.decisions["v"].mean == pytest.approx(0.525)  # lower loss: positive = better
    # The reasons speak of the interval a user sees: the loss minus the baseline's.
    d3 = Design(Plan(min=3, max=3), "base", ("low", "high"), higher_is_better=False,
                margin=0.01, legacy=legacy)
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


def test_legacy_pocock_spending_adds_up_to_alpha():
    for plan in (Plan(3, 12), Plan(2, 9, step=3), Plan(5, 5)):
        w = L.weights(plan)
        assert len(w) == len(plan.looks()) and sum(w) == pytest.approx(1.0)
        assert all(x > 0 for x in w)
    assert Plan(2, 9, step=3).looks() == [2, 5, 8, 9]


# ---------------------------------------------------------------- the exact design's replay

NAMES = ("a", "b", "c", "d")


def _from_diffs(names: tuple[str, ...], x: np.ndarray, seeds: int | None = None) -> dict:
    """Values whose differences to the baseline are exactly ``x`` (variants x seeds) for a
    design on a loss in nats (scale 1, lower is better: the value is minus the difference)."""
    n = x.shape[1] if seeds is None else seeds
    return {"base": {s: 0.0 for s in range(n)},
            **{v: {s: -float(x[j, s]) for s in range(n)} for j, v in enumerate(names)}}


@pytest.mark.parametrize("margin,grid,effects,want", [
    (0.0, False, (1.0, 0.0, 0.0, 0.0), "worse"),
    (1.0, False, (0.3, 0.0, -0.2, 2.0), "equivalent"),
    (0.3, True, (1.5, 0.2, 0.0, -1.0), "dropped"),
])
def test_the_runner_replay_makes_the_decisions_of_the_planners_vectorised_path(margin, grid,
                                                                              effects, want):
    """``plugdrop plan`` simulates through ``simulate.run``; ``plugdrop ablate`` decides through
    ``Design.replay``: on the same values they give every variant the same verdict at the same
    round (so the planner's figures are the runner's)."""
    names = ("g[p=1]", "g[p=2]", "h[p=1]", "solo") if grid else NAMES
    design = Design(Plan(3, 12), "base", names, margin=margin, higher_is_better=False)
    x = simulate.draw(effects, 12, 40, "normal", np.random.default_rng(7))
    code, at = simulate.run(design.seq, x, [0, 0, 1, -1] if grid else None)
    seen = set()
    for r in range(len(x)):
        rep = design.replay(_from_diffs(names, x[r]))
        assert rep.complete and not rep.needed
        assert [CODES.index(rep.decisions[v].verdict) for v in names] == list(code[r]), r
        assert [rep.decisions[v].round for v in names] == list(at[r]), r
        seen |= {d.verdict for d in rep.decisions.values()}
    assert {"better", "inconclusive", want} <= seen  # the cases are not trivial


def test_the_runner_trains_exactly_the_seeds_the_decisions_imply():
    """Round after round as the runner does (replay, train what it needs, replay): the design
    asks a variant for seeds until it is decided, the baseline while any is open, and ends
    with the decisions of the whole values."""
    design = Design(Plan(3, 8), "base", NAMES, margin=0.0, higher_is_better=False)
    x = simulate.draw((3.0, 0.0, -1.5, 0.8), 8, 8, "normal", np.random.default_rng(3))
    for r in range(len(x)):
        full = _from_diffs(NAMES, x[r])
        got: dict[str, dict[int, float]] = {}
        rounds = 0
        while True:
            rep = design.replay(got)
            if rep.complete:
                break
            rounds += 1
            assert rep.needed and rep.rounds[-1] == len(rep.rounds) + 2  # 3, 4, ... seeds
            for v, s in rep.needed:
                got.setdefault(v, {})[s] = full[v][s]
        ref = design.replay(full)
        assert {v: (d.verdict, d.round) for v, d in rep.decisions.items()} == \
            {v: (d.verdict, d.round) for v, d in ref.decisions.items()}
        for v in NAMES:
            assert len(got[v]) == rep.seeds_used(v) == ref.seeds_used(v)
        assert len(got["base"]) == max(rep.seeds_used(v) for v in NAMES) == rep.rounds[-1]
        assert rounds == len(rep.rounds)


def test_a_failed_run_is_a_look_at_fewer_pairs_spent_by_information():
    """A failed run (``None``) is no pair: the variant's looks are the pairs it has, with the
    boundaries of those looks (``decide`` on the differences with ``nan``), and the design
    asks for no rerun of it."""
    design = Design(Plan(3, 6), "base", ("a", "b"), margin=0.0, higher_is_better=False)
    x = simulate.draw((0.9, 0.0), 6, 1, "normal", np.random.default_rng(4))[0].copy()
    values = _from_diffs(("a", "b"), x)
    values["a"][3] = None
    x[0, 3] = np.nan
    rep = design.replay(values)
    out = decide(design.seq, x)
    assert rep.complete
    for v, vd in zip(("a", "b"), out.variants):
        d = rep.decisions[v]
        assert (d.verdict, d.round, d.n) == (vd.verdict, vd.look, vd.n)
        assert (d.low, d.high) == pytest.approx((vd.low, vd.high))
        assert d.p == pytest.approx(vd.p_adjusted)
    assert rep.decisions["a"].n == rep.seeds_used("a") - 1


def test_an_equivalent_variant_shows_the_interval_of_its_two_one_sided_tests():
    design = Design(Plan(3, 6), "base", ("same", "far"), margin=0.5, higher_is_better=False)
    x = np.array([[0.01, -0.02, 0.015, 0.0, -0.01, 0.005], [5.0, 5.1, 4.9, 5.05, 4.95, 5.0]])
    rep = design.replay(_from_diffs(("same", "far"), x))
    same = rep.decisions["same"]
    vd = decide(design.seq, x).variants[0]
    assert same.verdict == S.EQUIVALENT and (same.low, same.high) == (vd.eq_low, vd.eq_high)
    assert -0.5 < same.low < same.high < 0.5  # type: ignore[operator]
    assert "within +-0.5" in same.reason and rep.decisions["far"].verdict == S.BETTER


def test_spending_and_passing_come_from_the_rule_and_name_the_procedure():
    x = simulate.draw((30.0, 1.2, 0.0, 0.0), 12, 1, "normal", np.random.default_rng(3))[0]
    holm = Design(Plan(3, 12), "base", NAMES, margin=0.0, higher_is_better=False)
    bonf = Design(Plan(3, 12), "base", NAMES, margin=0.0, higher_is_better=False,
                  passing="bonferroni", spending=Spending("obf"))
    assert holm.seq == SeqDesign.plan(3, 12)
    assert bonf.seq == SeqDesign.plan(3, 12, spending=Spending("obf"), passing=False)
    a, b = holm.replay(_from_diffs(NAMES, x)), bonf.replay(_from_diffs(NAMES, x))
    assert "first(0.21)+hsd(-3.25)" in a.procedure and "Holm" in a.procedure
    assert "obf" in b.procedure and "Bonferroni" in b.procedure
    assert all(d.procedure == a.procedure for d in a.decisions.values())
    assert a.decisions["a"].round == 1 and b.decisions["a"].round > 1  # obf spends little early
    legacy = Design(Plan(3, 12), "base", NAMES, legacy=True).replay(_from_diffs(NAMES, x))
    assert legacy.procedure == L.PROCEDURE and "Bonferroni" in legacy.procedure


def test_identical_values_and_forecasts_in_the_replay():
    """No spread: decided at the first look without dividing by zero; an undecided variant's
    forecast is the fixed design's count for the effect observed at its level."""
    design = Design(Plan(3, 5), "base", ("flat", "noisy"), margin=0.0, higher_is_better=False)
    x = np.array([[0.5] * 5, [0.3, -0.2, 0.25, -0.1, 0.2]])
    with np.errstate(all="raise"):
        rep = design.replay(_from_diffs(("flat", "noisy"), x))
    flat, noisy = rep.decisions["flat"], rep.decisions["noisy"]
    assert (flat.verdict, flat.round, flat.low, flat.high) == (S.BETTER, 1, 0.5, 0.5)
    assert flat.forecast is None and noisy.verdict == S.INCONCLUSIVE
    level = decide(design.seq, x).variants[1].level
    d = x[1]
    assert noisy.forecast == simulate.seeds_needed(d.mean() / d.std(ddof=1), level, 0.8) > 5
    assert noisy.skewness == pytest.approx(stats.skew(d, bias=False))
    assert rep.events[-1]["forecast_seeds"] == noisy.forecast
