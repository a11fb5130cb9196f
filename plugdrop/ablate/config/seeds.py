"""The check of ``seeds``: a fixed design's list of distinct seeds or an adaptive design's
``{min, max, step, first}``, within what ``torch.manual_seed`` takes and a count a real
config never reaches.

    >>> seeds(Value("seeds", [0, 1, 2], None))
    (0, 1, 2)
"""

from __future__ import annotations

import collections
import contextvars
from collections.abc import Mapping
from typing import Any

from .checks import Value, is_int
from .locations import fail, suggest
from .types import SeedPlan

__all__ = ["MOST_SEEDS", "SEED_LIMIT", "STORED", "seeds"]

#: set while a folder's stored config is read back: what an earlier version accepted is
#: read as it meant then (``seeds: 3``, the one seed 3)
STORED: contextvars.ContextVar[bool] = contextvars.ContextVar("STORED", default=False)
#: the most seeds a variant may have: far beyond what an ablation trains, a bound on the time
#: and memory a config can ask of the planner and the driver before any run
MOST_SEEDS = 100_000
#: seeds lie in [-SEED_LIMIT, SEED_LIMIT): what ``torch.manual_seed`` takes
SEED_LIMIT = 2**63


def seeds(v: Value) -> Any:
    """A list of distinct seeds (a fixed design: a tuple), or ``{min, max, step, first}`` (an
    adaptive one: a :class:`~.types.SeedPlan`)."""
    if isinstance(v.value, Mapping):
        keys = SeedPlan.KEYS
        unknown = [k for k in v.value if k not in keys]
        if unknown:
            raise fail(v.at(unknown[0]), f"seeds has no setting {unknown[0]!r}"
                                         f"{suggest(unknown[0], keys)}; an adaptive design "
                                         f"takes min, max, step and first")
        for k, low in keys.items():
            given = v.value.get(k)
            if (k in v.value or k == "max") and (not is_int(given) or given < low):
                raise fail(v.at(k), f"seeds {k} must be an integer >= {low}, got {given!r}"
                                    + (" (give the most seeds a variant may get)"
                                       if k == "max" and given is None else ""))
        plan = SeedPlan(**{k: v.value[k] for k in keys if k in v.value})
        if plan.max > MOST_SEEDS:
            raise fail(v.at("max"), f"seeds max {plan.max:,}: at most {MOST_SEEDS:,} seeds per "
                                    f"variant")
        if plan.first + plan.max > SEED_LIMIT:
            raise fail(v.at("first"), f"seeds first {plan.first}: its seeds go beyond 2**63, "
                                      f"what torch.manual_seed takes")
        if plan.max < plan.min:
            raise fail(v.at("max"), f"seeds max ({plan.max}) is less than min "
                                    f"({plan.min}); give max >= min")
        return plan
    if is_int(v.value):
        n = v.value
        if not STORED.get():  # a folder's stored config keeps what it meant when written
            raise v.fail(f"seeds: {n} is one seed, the seed {n}, not {n} seeds: write seeds: "
                         f"[{n}] for that seed, seeds: [{', '.join(map(str, range(min(n, 3))))}"
                         f"{', ...' if n > 3 else ''}] for {n} seeds, or {{min: 3, max: 8}} "
                         f"for an adaptive design")
        v.value = [n]
    v.need(isinstance(v.value, list) and len(v.value) > 0 and all(is_int(s) for s in v.value),
           "a list of integers, or {min: N, max: N} for an adaptive design")
    if len(v.value) > MOST_SEEDS:
        raise v.fail(f"seeds: {len(v.value):,} seeds; at most {MOST_SEEDS:,} per variant (an "
                     f"adaptive design, seeds: {{min: 3, max: 20}}, adds seeds only while they "
                     f"are needed)")
    beyond = next((s for s in v.value if not -SEED_LIMIT <= s < SEED_LIMIT), None)
    v.need(beyond is None, "a list of integers each in [-2**63, 2**63) (what torch.manual_seed "
           "takes)", f" ({beyond} is not)" if beyond is not None else "")
    counts = collections.Counter(v.value)
    dup = sorted(s for s, n in counts.items() if n > 1)
    v.need(not dup, "a list of distinct integers", f" ({dup[0]} is listed twice)" if dup else "")
    return tuple(v.value)
