"""``plugdrop plan``: an adaptive design's operating characteristics before any compute is spent.

    plugdrop plan --seeds 3..12 --effects 1,0,0,0            # power, seeds, false verdicts
    plugdrop plan --seeds 3..12 --effects 2,0 --spending obf --json
    plugdrop plan --from runs/digits --effect 0.5             # seeds an effect would need

It simulates ablations whose variants have the given true effects (in sd of the paired
difference) through the runner's own decision rule (the vectorised path of
``plugdrop.ablate.decide.simulate``, which a test holds to the decisions of ``plugdrop
ablate``), and the fixed design with the maximum seeds on the same simulated values. Exit
status: 0; 2 for a bad argument or folder (one line).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import Any

#: the largest number of seeds a design may plan here (its boundaries take longer beyond)
MAX_SEEDS = 100
#: the most simulated values one command draws (reps x variants x seeds)
MAX_VALUES = 50_000_000


class _Bad(Exception):
    """A bad argument: its one-line message."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "plan", help="simulate an adaptive design before training: power, seeds, false "
                     "verdicts",
        description="Simulate ablations through the decision rule of plugdrop ablate: per "
                    "variant the shares of better / worse / equivalent / inconclusive / "
                    "dropped verdicts and the mean seeds, the false-verdict rate, and the same "
                    "for a fixed design with the maximum seeds. With --from: the seeds an "
                    "effect would need, from the spread an ablation folder has seen.")
    p.add_argument("--seeds", default="3..12", metavar="MIN..MAX",
                   help="the adaptive design's seeds (seeds: {min, max}; default 3..12)")
    p.add_argument("--step", default="1", metavar="N", help="seeds added per round (default 1)")
    p.add_argument("--effects", default="1,0,0,0", metavar="E1,E2,...",
                   help="each variant's true difference to the baseline, in sd of the paired "
                        "difference, positive: better (default 1,0,0,0; a negative first: "
                        "--effects=-1,0)")
    p.add_argument("--alpha", default=None, help="the family-wise error rate (default 0.05; "
                                                 "with --from, the folder's)")
    p.add_argument("--noise", default="normal", metavar="{normal,t3,skewed}",
                   help="the law of the seed noise: normal, Student t(3) (heavy tails) or a "
                        "lognormal with skewness 1.75 (default normal)")
    p.add_argument("--reps", default=None, metavar="N",
                   help="simulated ablations (default 20000; with --from, 4000 per maximum "
                        "tried)")
    p.add_argument("--spending", default=None, metavar="SPENDING",
                   help="obf, pocock, hsd(GAMMA) or first(SHARE)+hsd(GAMMA) (default: the "
                        "spending setting's, first(0.21)+hsd(-3.25); with --from, the folder's)")
    p.add_argument("--passing", default=None, metavar="{holm,bonferroni}",
                   help="alpha passing between variants (default holm; with --from, the "
                        "folder's)")
    p.add_argument("--margin", default="0", metavar="SD",
                   help="the equivalence margin, in sd of the paired difference (default 0: "
                        "no equivalence verdicts)")
    p.add_argument("--design", default="exact", metavar="{exact,legacy}",
                   help="legacy: the design of plugdrop before the exact one (Bonferroni, "
                        "Pocock-type, union bound), for comparison")
    p.add_argument("--seed", default="0", metavar="N", help="the random seed of the simulation")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    g = p.add_argument_group("from an ablation folder")
    g.add_argument("--from", dest="source", metavar="OUT",
                   help="an ablation folder: the spread of the paired differences it has seen")
    g.add_argument("--effect", metavar="X",
                   help="with --from: the effect to plan for, in the decision metric's units "
                        "as the table shows them (percentage points for accuracies, nats for "
                        "losses)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..ablate.errors import ConfigError, Exit

    try:
        if args.source is not None:
            doc, text = _from_folder(args)
        else:
            doc, text = _simulate(args)
    except (_Bad, ConfigError) as e:
        print(f"plugdrop plan: {e}", file=sys.stderr)
        return Exit.MISTAKE
    print(json.dumps(doc, indent=1) if args.json else text)
    return Exit.OK


# ------------------------------------------------------------------------ the arguments

def _number(flag: str, text: str, what: str, ok: Any) -> float:
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and ok(x)):
        raise _Bad(f"{flag} must be {what}, got {text!r}")
    return x


def _whole(flag: str, text: str, low: int, high: int | None = None) -> int:
    ok = re.fullmatch(r"\d+", text.strip()) is not None
    n = int(text) if ok else -1
    if not ok or n < low or (high is not None and n > high):
        span = f">= {low}" if high is None else f"in {low}..{high}"
        raise _Bad(f"{flag} must be a whole number {span}, got {text!r}")
    return n


def _choice(flag: str, text: str, options: tuple[str, ...]) -> str:
    from ..ablate.config.locations import suggest

    if text not in options:
        raise _Bad(f"{flag} must be {' | '.join(options)}, got {text!r}{suggest(text, options)}")
    return text


def _design(args: argparse.Namespace, rule: Any = None) -> dict[str, Any]:
    """The settings of the design both modes share (a folder's ``rule`` gives the defaults)."""
    from ..ablate.config import DEFAULT_SPENDING, PASSING
    from ..ablate.config.checks import Value, spending

    sp = rule.spending if rule is not None and args.spending is None else \
        spending(Value("--spending", args.spending or str(DEFAULT_SPENDING), None))
    passing = _choice("--passing", args.passing or (rule.passing if rule else "holm"), PASSING)
    alpha = rule.alpha if rule is not None and args.alpha is None else \
        _number("--alpha", args.alpha or "0.05", "a number in [1e-9, 0.5)",
                lambda v: 1e-9 <= v < 0.5)
    return {"spending": sp, "passing": passing == "holm", "alpha": alpha,
            "step": _whole("--step", args.step, 1)}


def _seeds(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*\.\.\s*(\d+)\s*", text)
    lo, hi = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    if not m or not 2 <= lo <= hi or hi > MAX_SEEDS:
        raise _Bad(f"--seeds must be MIN..MAX with 2 <= MIN <= MAX <= {MAX_SEEDS} (e.g. "
                   f"3..12), got {text!r}")
    return lo, hi


#: the largest effect or margin the simulation takes, in sd of the paired difference: beyond
#: it every design decides at once, and the simulation's sums would overflow
MOST_SD = 1000.0


def _effects(text: str) -> tuple[float, ...]:
    try:
        out = tuple(float(x) for x in text.split(","))
    except ValueError:
        out = ()
    if not out or not all(math.isfinite(x) for x in out):
        raise _Bad(f"--effects must be numbers separated by commas (each variant's true effect "
                   f"in sd of the paired difference, e.g. 1,0,0,0), got {text!r}")
    big = next((x for x in out if abs(x) > MOST_SD), None)
    if big is not None:
        raise _Bad(f"--effects {big:g}: an effect is at most {MOST_SD:g} sd of the paired "
                   f"difference (one that large is decided in the first round already)")
    return out


# ------------------------------------------------------------------------ the simulation

def _simulate(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from ..ablate.decide import simulate

    if args.effect is not None:
        raise _Bad("--effect needs --from OUT (an ablation folder); without one, give the "
                   "effects in sd: --effects 1,0,0,0")
    lo, hi = _seeds(args.seeds)
    effects = _effects(args.effects)
    d = _design(args)
    noise = _choice("--noise", args.noise, simulate.NOISES)
    design = _choice("--design", args.design, ("exact", "legacy"))
    margin = _number("--margin", args.margin, f"a number in [0, {MOST_SD:g}] (in sd)",
                     lambda v: 0 <= v <= MOST_SD)
    reps = _whole("--reps", args.reps or "20000", 1)
    if reps * len(effects) * hi > MAX_VALUES:
        raise _Bad(f"--reps {reps} with {len(effects)} variants and {hi} seeds draws "
                   f"{reps * len(effects) * hi:,} values, more than {MAX_VALUES:,}; give "
                   f"fewer --reps")
    oc = simulate.plan(effects, (lo, hi), d["step"], d["alpha"], noise, reps, d["spending"],
                       margin, d["passing"], "legacy" if design == "legacy" else "sequential",
                       _whole("--seed", args.seed, 0))
    head = (f"plugdrop plan: {reps} simulated ablations of {len(effects)} variant(s) against a "
            f"baseline, seeds {lo}..{hi} (step {d['step']}), alpha {d['alpha']:g}, {noise} "
            f"noise" + (f", margin {margin:g} sd" if margin else "") + ".")
    lines = [head, "", f"adaptive design: {oc.design}"]
    lines += _table(oc, True) + ["", _false(oc, d["alpha"]), "",
                                 f"fixed design: {hi} seeds, paired t-tests, Holm over the "
                                 f"variants"]
    assert oc.fixed is not None
    lines += _table(oc.fixed, False) + ["", _false(oc.fixed, d["alpha"])]
    return oc.as_json(), "\n".join(lines)


def _table(oc: Any, adaptive: bool) -> list[str]:
    head = ["effect (sd)", "better", "worse", "equivalent", "inconclusive", "dropped",
            "mean seeds"] + (["decided at min"] if adaptive else [])
    rows = [[f"{v.effect:+.2f}", f"{v.better:.3f}", f"{v.worse:.3f}", f"{v.equivalent:.3f}",
             f"{v.inconclusive:.3f}", f"{v.dropped:.3f}", f"{v.mean_seeds:.2f}"]
            + ([f"{v.at_first:.3f}"] if adaptive else []) for v in oc.variants]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
            for r in [head, ["-" * w for w in widths], *rows]]


def _false(oc: Any, alpha: float) -> str:
    return (f"false verdicts: {oc.false_verdict_rate:.4f} (SE {oc.false_se:.4f}) of the "
            f"ablations call a variant without effect better or worse, or one with an effect "
            f"the wrong way (alpha {alpha:g}).")


# ------------------------------------------------------------------------ from a folder

def _from_folder(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from ..ablate.decide import simulate
    from ..ablate.results import load_ablation
    from ..ablate.decide.forecast import adaptive_seeds, spread_of

    if args.effect is None:
        raise _Bad("--from needs --effect X: the effect to plan for, in the decision metric's "
                   "units as the table shows them (e.g. --effect 0.5)")
    effect = _number("--effect", args.effect, "a number other than 0 (in the metric's units "
                     "as the table shows them)", lambda v: v != 0)
    ab = load_ablation(args.source)
    rule = ab.config.decision
    if ab.baseline is None:
        raise _Bad(f"--from {args.source}: the ablation has no baseline to compare with")
    sp = spread_of(ab)
    if sp is None:
        raise _Bad(f"--from {args.source}: no variant has 2 seeds finished together with the "
                   f"baseline (or they do not vary): no spread to plan from yet")
    d = _design(args, rule)
    m = max(sp.variants, 1)
    size = abs(effect) / sp.sd
    if size > MOST_SD:
        raise _Bad(f"--effect {effect:g} is {size:.3g} sd of the paired difference (sd "
                   f"{sp.sd:.3g} in {args.source}): at most {MOST_SD:g}; one that large is "
                   f"decided in the first round already")
    level = d["alpha"] / m
    fixed = simulate.seeds_needed(size, level, 0.8)
    plan = ab.config.plan
    lo, step = (plan.min, plan.step) if plan is not None else (3, 1)
    adaptive = adaptive_seeds(size, m, lo, step, d["alpha"], d["spending"], d["passing"],
                              reps=_whole("--reps", args.reps or "4000", 100),
                              start=fixed or lo) if fixed is not None and fixed <= 40 else None
    doc = {"from": str(args.source), "metric": sp.metric, "unit": sp.unit, "sd": sp.sd,
           "pairs": sp.pairs, "variants": m, "effect": effect, "effect_sd": size,
           "alpha": d["alpha"], "power": 0.8, "seeds_fixed": fixed,
           "seeds_adaptive": adaptive[0] if adaptive else None,
           "adaptive_mean_seeds": adaptive[2] if adaptive else None}
    unit = f" {sp.unit}" if sp.unit else ""  # a program's metric given no unit: none
    text = [f"plugdrop plan: {args.source}: the paired differences of {sp.metric} (each "
            f"variant minus the baseline, per seed) spread with sd {sp.sd:.4g}{unit} "
            f"(pooled over {sp.variants} variant(s), {sp.pairs} pairs).",
            f"An effect of {abs(effect):g}{unit} is {size:.3g} sd: "
            + (f"a fixed design needs about {fixed} seeds" if fixed else
               "a fixed design needs more than 10,000 seeds")
            + f" to call it better or worse with 80% power at alpha {d['alpha']:g} / {m} (a "
              f"variant's share)."]
    if adaptive:
        text.append(f"The adaptive design ({d['spending']}, from {lo} seeds) reaches 80% with "
                    f"seeds: {{min: {lo}, max: {adaptive[0]}}} ({adaptive[1]:.0%} in "
                    f"simulation; {adaptive[2]:.1f} seeds on average for that variant).")
    elif fixed is not None:
        text.append("The adaptive design needs more than 40 seeds for it: plan it with "
                    f"plugdrop plan --seeds {lo}..N --effects {size:.3g}"
                    + ",0" * (m - 1) + ".")
    return doc, "\n".join(text)
