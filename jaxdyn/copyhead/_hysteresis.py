"""Hysteresis between two starts, read from finished runs (trained networks, samplers, minimisers).

copy_head.md, "Validation protocol": runs started from uniform pooling and from the copy
pattern end in different states where two minima coexist (first order) and in the same state
where one minimum exists. Two runs are in different states when their order parameters differ
by more than a tolerance (e.g. half the theory's jump between the coexisting minima).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from jaxtyping import ArrayLike, Bool, Float, Shaped


@dataclasses.dataclass(frozen=True)
class Hysteresis:
    """Per P, how often runs from the two starts end in different states.

    Attributes:
        P: the distinct P values.
        disagree_fraction: fraction of paired runs (same P and dataset) whose states differ.
        pairs: number of such pairs.
    """

    P: np.ndarray
    disagree_fraction: np.ndarray
    pairs: np.ndarray

    def where(self, mask: np.ndarray) -> dict[str, float]:
        """{P: disagreeing fraction} on the P values selected by ``mask``."""
        return {
            f"{p:g}": float(f)
            for p, f in zip(self.P[mask], self.disagree_fraction[mask], strict=True)
        }


def pair_disagreement(
    P: Float[ArrayLike, " n"],
    seeds: Shaped[ArrayLike, " n"],
    start: Float[ArrayLike, " n"],
    state: Shaped[ArrayLike, " n"],
    ok: Bool[ArrayLike, " n"] | None = None,
    *,
    tolerance: float | None = None,
) -> Hysteresis:
    """Pair runs with equal (P, seed) from start 0 and start 1 and count differing states.

    ``state`` is a label per run, compared for equality; with ``tolerance`` it is a number
    (an order parameter) and two runs differ when their values differ by more. ``ok`` masks
    failed runs.
    """
    P, seeds, start, state = (np.asarray(a) for a in (P, seeds, start, state))
    ok = np.ones(P.shape, bool) if ok is None else np.asarray(ok, bool)
    Ps = np.unique(P)
    frac, pairs = np.full(Ps.shape, np.nan), np.zeros(Ps.shape, int)
    for i, p in enumerate(Ps):
        diffs = []
        for s in np.unique(seeds[P == p]):
            sel = (P == p) & (seeds == s) & ok
            a, b = state[sel & (start == 0)], state[sel & (start != 0)]
            if a.size and b.size:
                differ = a[0] != b[0] if tolerance is None else abs(a[0] - b[0]) > tolerance
                diffs.append(bool(differ))
        pairs[i] = len(diffs)
        if diffs:
            frac[i] = float(np.mean(diffs))
    return Hysteresis(Ps, frac, pairs)


def switch_bracket(
    P: Float[ArrayLike, " k"],
    S_uniform: Float[ArrayLike, " k"],
    S_copy: Float[ArrayLike, " k"],
    *,
    rtol: float = 1e-6,
) -> tuple[float, float] | None:
    """Neighbouring P values between which the lower action passes from the uniform-start
    minimum to the copy-start minimum (the global switch of a first-order transition).

    Actions within ``rtol`` (relative) are ties (both starts in the same minimum). Returns
    None unless every strictly-uniform-lower P lies below every strictly-copy-lower P and
    both kinds occur.
    """
    P = np.asarray(P, float)
    Su, Sc = np.asarray(S_uniform, float), np.asarray(S_copy, float)
    tie = np.abs(Su - Sc) <= rtol * (1.0 + np.abs(Su))
    uniform_lower = np.flatnonzero((Su < Sc) & ~tie)
    copy_lower = np.flatnonzero((Sc < Su) & ~tie)
    if uniform_lower.size == 0 or copy_lower.size == 0:
        return None
    if uniform_lower.max() > copy_lower.min():
        return None
    return float(P[uniform_lower.max()]), float(P[copy_lower.min()])


def switch_brackets(P, start, seeds, action) -> tuple[np.ndarray, list[int]]:
    """Per dataset (``seeds``) with a switch on the P grid (:func:`switch_bracket` of the
    ``action`` of its uniform-start (``start == 0``) and copy-start runs): the (P_lo, P_hi)
    brackets, and the datasets they belong to."""
    Ps = np.unique(P)
    brackets, kept = [], []
    for s in np.unique(seeds):
        per_start = [
            np.array([action[(P == p) & (seeds == s) & (start == b)][0] for p in Ps])
            for b in (0.0, 1.0)
        ]
        bracket = switch_bracket(Ps, *per_start)
        if bracket is not None:
            brackets.append(bracket)
            kept.append(int(s))
    return np.asarray(brackets, float).reshape(-1, 2), kept
