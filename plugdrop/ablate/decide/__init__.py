"""The decisions of a study, as pure functions of the values its runs ended with: below both
the study driver (which asks them which runs come next) and the report (which presents them).

The adaptive design (:mod:`.design`: rounds of seeds until each variant is decided) decides
through the exact group-sequential rule (:mod:`.verdicts`), its boundaries and the spending of
alpha over the looks (:mod:`.boundaries`), alpha passed on between variants (:mod:`.passing`),
a warning for skewed differences (:mod:`.skew`); a decision as the runner keeps it
(:mod:`.decision`); the design of folders an older plugdrop started (:mod:`.legacy`). The fixed
design's Holm procedure (:mod:`.fixed`), the t-intervals and paired tests (:mod:`.stats`), the
search's race and confirmation (:mod:`.race`), and the planner: whole ablations simulated at
once (:mod:`.simulate`) and seeds forecast from a folder's spread (:mod:`.forecast`).
Nothing here reads a file, writes one, or knows the report or the launchers.
"""

from .decision import (BETTER, DROPPED, EQUIVALENT, INCONCLUSIVE, OPEN, WORSE, Decision,
                       Replay)
from .design import Design, design_of
from .fixed import NO_CLEAR, fixed_verdict, holm

__all__ = ["BETTER", "DROPPED", "EQUIVALENT", "INCONCLUSIVE", "NO_CLEAR", "OPEN", "WORSE",
           "Decision", "Design", "Replay", "design_of", "fixed_verdict", "holm"]
