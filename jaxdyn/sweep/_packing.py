"""Packing the unfinished members of a segmented sweep into groups of a few fixed widths.

A group of ``w`` members costs one compiled program's step, modelled as ``w + fixed`` lanes:
``fixed`` is the per-step cost every group pays whatever its width (loop control, one kernel
launch per operation), taken as ``narrow`` lanes. On 2-core CPUs the member of
``benchmarks/probe_segment_widths.py`` measures 4.5-5 lanes with ``narrow = 4`` (a straight
line through its step costs at widths 4 and 32) under XLA's default threading, and about 20
lanes with single-threaded matrix kernels (``xla_cpu_setup``, jaxdyn's setting).
The model is not re-tuned to the latter: what the widths cost in practice is measured by
``benchmarks/bench_sweep_heterogeneous.py`` (docs/benchmarks.md). The cheapest cover of
``n`` members by groups of the allowed widths is found by dynamic programming over ``n``; it
depends only on ``n`` and the widths, so a sweep's grouping, and hence its bits, is the same in
every run.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np


def segment_width(requested: int, vmap_width: int, platform: str, state_shape) -> int:
    """Width of the narrowest groups of unfinished members (``SweepOptions.segment_width``).

    Automatic on CPUs: the SIMD lane count of the member state's floating dtype (4 when every
    floating leaf is float64, else 8), the narrowest width that runs XLA's vectorised code
    rather than its scalar remainder loop; elsewhere ``vmap_width``.
    """
    if requested:
        return min(requested, vmap_width)
    if platform != "cpu":
        return vmap_width
    floating = [
        x.dtype for x in jax.tree.leaves(state_shape) if jnp.issubdtype(x.dtype, jnp.inexact)
    ]
    lanes = 4 if floating and all(d == jnp.float64 for d in floating) else 8
    return min(lanes, vmap_width)


def group_widths(narrow: int, wide: int, count: int) -> tuple[int, ...]:
    """The group widths of ``SweepOptions.segment_widths = count``: ``narrow`` doubled
    ``0 .. count - 2`` times while below ``wide``, and ``wide``, in increasing order."""
    widths = {wide}
    width = narrow
    for _ in range(count - 1):
        if width >= wide:
            break
        widths.add(width)
        width *= 2
    return tuple(sorted(widths))


@functools.lru_cache(maxsize=64)
def cheapest_cover(n: int, widths: tuple[int, ...]) -> tuple[int, ...]:
    """Group widths (widest first) covering ``n`` members at the least modelled cost, each
    group costing ``width + widths[0]`` lanes per step (see the module docstring)."""
    fixed = widths[0]
    cost = np.zeros(n + 1)
    choice = np.zeros(n + 1, int)
    for m in range(1, n + 1):
        options = [(w + fixed + cost[max(m - w, 0)], -w) for w in widths]
        best, negative_width = min(options)
        cost[m], choice[m] = best, -negative_width
    cover, m = [], n
    while m > 0:
        cover.append(int(choice[m]))
        m -= choice[m]
    return tuple(sorted(cover, reverse=True))


def cover_lanes(n: int, widths: tuple[int, ...], fixed: int) -> int:
    """Modelled lanes per step of the cheapest cover of ``n`` members by ``widths``, each
    group costing ``width + fixed`` lanes."""
    return sum(w + fixed for w in cheapest_cover(n, widths))


def pack(active: np.ndarray, widths: tuple[int, ...]) -> list[np.ndarray]:
    """Member indices of the groups that cover ``active`` (:func:`cheapest_cover`). Only the
    last group can be short of members; it is padded with copies of its first member (their
    results are discarded), fewer than its width."""
    groups, start = [], 0
    for width in cheapest_cover(int(active.size), widths):
        idx = active[start : start + width]
        if idx.size < width:
            idx = np.concatenate([idx, np.full(width - idx.size, idx[0])])
        groups.append(idx)
        start += width
    return groups
