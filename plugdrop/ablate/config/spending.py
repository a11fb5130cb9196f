"""How an adaptive design spends each variant's alpha over its rounds: the ``spending`` setting's
typed value, :class:`Spending` (the exact boundaries that use it are the report's,
:mod:`plugdrop.ablate.report.boundaries`, which re-exports it).

Spending functions of the information fraction ``tau`` (seeds so far over the maximum):
O'Brien-Fleming-type ``2 - 2 Phi(z_{1-level/2}/sqrt(tau))``, Pocock-type
``level ln(1 + (e - 1) tau)``, Hwang-Shih-DeCani ``level (1 - e^{-gamma tau}) / (1 - e^{-gamma})``
and ``first(share)+hsd(gamma)``: ``share`` of the level at the first look, the rest by
Hwang-Shih-DeCani over the remaining information (:data:`DEFAULT_SPENDING`).

    >>> Spending.parse("first(0.21)+hsd(-3.25)") == DEFAULT_SPENDING
    True
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["DEFAULT_SPENDING", "GAMMA_LIMIT", "KINDS", "Spending"]

#: the kinds of spending function, as :meth:`Spending.parse` reads them
KINDS = ("obf", "pocock", "hsd", "first")
#: the largest ``|gamma|`` of Hwang-Shih-DeCani taken (beyond it the function overflows, and
#: it is a step at the first or the last look anyway)
GAMMA_LIMIT = 40.0


@dataclass(frozen=True)
class Spending:
    """How a hypothesis' level is spent over the information fraction ``tau`` in ``[0, 1]``.

    Args:
        kind: ``"obf"`` (O'Brien-Fleming-type, Lan-DeMets), ``"pocock"`` (Pocock-type),
            ``"hsd"`` (Hwang-Shih-DeCani with ``gamma``) or ``"first"`` (``share`` at the
            first look, the rest by Hwang-Shih-DeCani with ``gamma``).
        gamma: Hwang-Shih-DeCani's parameter (negative: late spending; 1 is about Pocock), in
            ``[-40, 40]``.
        share: for ``"first"``, the share of the level spent by information fraction
            ``first``.
        first: for ``"first"``, the information fraction of that share; ``None`` (default):
            the first look's.

    Raises:
        ValueError: for an unknown kind, a share outside ``(0, 1)`` or a gamma outside
        ``[-40, 40]``. Fields a kind does not use are set to 0, so equal spending functions
        compare (and cache) equal.
    """

    kind: str = "first"
    gamma: float = -3.25
    share: float = 0.21
    first: float | None = None

    #: what :meth:`parse` takes, for error messages
    WHAT = "obf, pocock, hsd(GAMMA) or first(SHARE)+hsd(GAMMA)"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"spending must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "first" and not 0.0 < self.share < 1.0:
            raise ValueError(f"the first look's share must lie in (0, 1), got {self.share!r}")
        if self.kind in ("hsd", "first") and not abs(self.gamma) <= GAMMA_LIMIT:
            raise ValueError(f"gamma must lie in [-{GAMMA_LIMIT:g}, {GAMMA_LIMIT:g}], got "
                             f"{self.gamma!r}")
        if self.kind != "first":
            object.__setattr__(self, "share", 0.0)
            object.__setattr__(self, "first", None)
            object.__setattr__(self, "gamma", self.gamma if self.kind == "hsd" else 0.0)

    @classmethod
    def parse(cls, text: str) -> Spending:
        """``"obf"``, ``"pocock"``, ``"hsd(-4)"`` or ``"first(0.2)+hsd(-4)"`` (what
        ``str()`` gives back). Raises ``ValueError`` for anything else."""
        s, num = text.strip().lower().replace(" ", ""), r"([-+]?\d*\.?\d+(?:e[-+]?\d+)?)"
        m = re.fullmatch(rf"(?:first\({num}\)\+)?hsd\({num}\)", s)
        if s in ("obf", "pocock") or m:
            return cls(s) if not m else cls("first" if m.group(1) else "hsd",
                                            float(m.group(2)), float(m.group(1) or 0.2))
        raise ValueError(f"unknown spending {text!r}: use {cls.WHAT}")

    def __str__(self) -> str:
        hsd = f"hsd({self.gamma:g})"
        return {"hsd": hsd, "first": f"first({self.share:g})+{hsd}"}.get(self.kind, self.kind)

    def plain(self) -> str:
        """The setting's value as the resolved config writes it (``str()``)."""
        return str(self)

    def cumulative(self, level: float, tau: float, first: float | None = None) -> float:
        """The level spent by information fraction ``tau`` (``first``: the first look's
        fraction, used when :attr:`first` is ``None``)."""
        if tau <= 0.0 or tau >= 1.0:
            return 0.0 if tau <= 0.0 else level
        if self.kind == "obf":
            from scipy import special  # the report's dependency; the config reads no scipy

            z = special.ndtri(1.0 - level / 2.0)
            return float(min(level, 2.0 * special.ndtr(-z / math.sqrt(tau))))
        if self.kind == "pocock":
            return level * math.log1p((math.e - 1.0) * tau)
        if self.kind == "hsd":
            return level * _hsd(self.gamma, tau)
        t1 = self.first if self.first is not None else (first if first is not None else tau)
        if tau <= t1:
            return level * self.share * tau / t1
        rest = _hsd(self.gamma, (tau - t1) / (1.0 - t1)) if t1 < 1.0 else 1.0
        return level * (self.share + (1.0 - self.share) * rest)


def _hsd(gamma: float, tau: float) -> float:
    return tau if abs(gamma) < 1e-12 else math.expm1(-gamma * tau) / math.expm1(-gamma)


#: The default: 21% of the level at the first look, the rest late (chosen by simulation).
DEFAULT_SPENDING = Spending("first", gamma=-3.25, share=0.21)
