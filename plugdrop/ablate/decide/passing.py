"""Alpha passed on between variants: the graphical approach of Bretz et al. (2009) in its
group-sequential form (Maurer and Bretz, 2013), numpy only.

Each variant ``j`` holds a share ``w_j`` of the family's ``alpha`` (its *weight*) and is tested
by its own group-sequential t-test at level ``w_j * alpha``. When a variant is called better
or worse (its null hypothesis, no difference, is rejected) its weight is passed on along the
graph's transitions ``G[j, l]`` and the graph is updated (Bretz et al., Algorithm 1):
``w_l += w_j G[j, l]`` and ``G[l, k] = (G[l, k] + G[l, j] G[j, k]) / (1 - G[l, j] G[j, l])``.
The open variants are then tested again, at the same look, against the boundaries of their new
level (computed for the whole design at that level, Lan-DeMets spending at the looks taken).
:meth:`Graph.holm` (equal weights, a rejected variant's weight split evenly over the others)
is Holm's procedure; :meth:`Graph.bonferroni` passes nothing on.

Why the family-wise error rate stays at ``alpha``: this is the shortcut of a closed test whose
intersection hypothesis ``H_J`` is tested by the group-sequential tests of its members at the
weights ``w_j(J)`` the graph gives ``J`` (consonant: the weights of ``J`` are at least those of
any superset). Let ``I0`` be the variants with no true difference. At the first false rejection,
of some ``i`` in ``I0`` at look ``k``, every variant rejected before had a true difference, so
the open set contains ``I0`` and ``w_i`` at that moment is at most ``w_i(I0)``; the boundaries
fall as the level rises (checked for every spending function by the tests), so ``|t_ik|`` also
crossed ``i``'s boundary at level ``w_i(I0) * alpha``. Each of these events has probability at
most ``w_i(I0) * alpha`` whatever the looks (the boundaries of each level are fixed in advance),
so the probability of any false rejection is at most ``sum_i w_i(I0) alpha <= alpha``.
Rejections are made at the current look only (no look back at earlier looks with the higher
level, which Maurer and Bretz also allow): fewer rejections, the same bound, and the interval
shown always agrees with the verdict. An *equivalent* or *dropped* variant passes nothing on:
its hypothesis was not rejected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Graph", "adjusted_p", "pass_on"]


@dataclass(frozen=True)
class Graph:
    """Weights and transitions of a graphical multiple test procedure.

    Args:
        weights: each hypothesis' initial share of alpha (non-negative, summing to at most 1).
        transitions: ``transitions[j][l]``, the share of ``j``'s weight that goes to ``l`` when
            ``j`` is rejected (non-negative, zero diagonal, rows summing to at most 1).
        name: what the tables call the procedure.

    Raises:
        ValueError: for weights or transitions that break these rules.
    """

    weights: tuple[float, ...]
    transitions: tuple[tuple[float, ...], ...]
    name: str = "graphical"

    def __post_init__(self) -> None:
        w = np.asarray(self.weights, dtype=np.float64)
        g = np.asarray(self.transitions, dtype=np.float64).reshape(len(w), -1)
        if (w < 0).any() or w.sum() > 1 + 1e-12:
            raise ValueError(f"weights must be >= 0 and sum to at most 1, got {self.weights}")
        if g.shape != (len(w), len(w)) or (g < 0).any() or (g.sum(1) > 1 + 1e-12).any() \
                or np.diag(g).any():
            raise ValueError("transitions must be a square matrix of shares >= 0 with a zero "
                             "diagonal and rows summing to at most 1")

    @classmethod
    def holm(cls, m: int) -> Graph:
        """Holm's procedure over ``m`` hypotheses: ``1/m`` each, passed on evenly."""
        share = 1.0 / (m - 1) if m > 1 else 0.0
        return cls(tuple(1.0 / m for _ in range(m)),
                   tuple(tuple(0.0 if i == j else share for j in range(m)) for i in range(m)),
                   "Holm (graphical, Maurer-Bretz)")

    @classmethod
    def bonferroni(cls, m: int) -> Graph:
        """``1/m`` each, nothing passed on."""
        return cls(tuple(1.0 / m for _ in range(m)),
                   tuple(tuple(0.0 for _ in range(m)) for _ in range(m)), "Bonferroni")

    def arrays(self, reps: int) -> tuple[np.ndarray, np.ndarray]:
        """The weights ``(reps, m)`` and transitions ``(reps, m, m)`` of ``reps`` copies."""
        m = len(self.weights)
        w = np.broadcast_to(np.asarray(self.weights, dtype=np.float64), (reps, m)).copy()
        g = np.asarray(self.transitions, dtype=np.float64).reshape(m, m)
        return w, np.broadcast_to(g, (reps, m, m)).copy()


def pass_on(weights: np.ndarray, trans: np.ndarray, rejected: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Remove hypothesis ``rejected[r]`` from copy ``r`` of the graph (``-1``: none), passing
    its weight on. ``weights``: ``(R, m)``, ``trans``: ``(R, m, m)``; returns new arrays."""
    rows = np.flatnonzero(rejected >= 0)
    if not len(rows):
        return weights, trans
    w, g = weights.copy(), trans.copy()
    j = rejected[rows]
    wr, gr = w[rows], g[rows]
    out_j = gr[np.arange(len(rows)), j, :]            # G[j, l]
    in_j = gr[np.arange(len(rows)), :, j]             # G[l, j]
    wj = wr[np.arange(len(rows)), j]
    wr = wr + wj[:, None] * out_j
    den = 1.0 - in_j * out_j                          # 1 - G[l, j] G[j, l], per l
    num = gr + in_j[:, :, None] * out_j[:, None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        gr = np.where(den[:, :, None] > 0, num / den[:, :, None], 0.0)
    m = w.shape[1]
    eye = np.eye(m, dtype=bool)
    gone = np.arange(m)[None, :] == j[:, None]        # (rows, m): the rejected one
    gr = np.where(eye[None] | gone[:, :, None] | gone[:, None, :], 0.0, gr)
    wr = np.where(gone, 0.0, wr)
    w[rows], g[rows] = wr, gr
    return w, g


def adjusted_p(p: Sequence[float], graph: Graph) -> np.ndarray:
    """Adjusted p-values of the graphical procedure (Bretz et al. 2009, Algorithm 2): the
    smallest family-wise alpha at which each hypothesis would be rejected given the
    (unadjusted) ``p``. ``nan`` in ``p`` counts as 1."""
    q = np.nan_to_num(np.asarray(p, dtype=np.float64), nan=1.0)
    m = len(q)
    w, g = graph.arrays(1)
    out = np.ones(m)
    todo = np.ones(m, dtype=bool)
    floor = 0.0
    while todo.any():
        with np.errstate(divide="ignore"):
            ratio = np.where(todo & (w[0] > 0), q / np.where(w[0] > 0, w[0], 1.0), np.inf)
        j = int(np.argmin(np.where(todo, ratio, np.inf)))
        floor = max(floor, min(1.0, float(ratio[j])))
        out[j] = floor
        todo[j] = False
        w, g = pass_on(w, g, np.array([j]))
    return out
