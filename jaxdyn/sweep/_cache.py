"""What the sweep engine remembers between sweeps: :class:`SweepCache`."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import jax
import jax.numpy as jnp
import jax.tree_util as jtu

from ._diffeq import MemberPlan, plan_member


class SweepCache:
    """The sweep engine's memory: a repeated sweep of the same member and shapes traces and
    compiles nothing.

    It holds, for each plain member function and input shapes, the engine's decision whether
    its one :meth:`~jaxdyn.sweep.DiffeqProblem.solve` is continued in segments (and, if not,
    why), and the compiled programs of segmented sweeps (those of one problem structure are
    shared by every member function that solves it). ``run_sweep`` uses
    ``SweepCache.default`` unless given one; :meth:`clear` forgets everything, so that the
    next sweep decides, traces and compiles as the first one did. Plain sweeps' programs live
    in ``jax.jit``'s own cache (``jax.clear_caches()``).

    Attributes:
        plans: ``{(member, input shapes): MemberPlan}``.
        programs: the compiled programs of segmented sweeps, by member, device and shapes.
        shared: compiled start and segment programs, by problem structure and shapes.
        max_entries: the most entries of each table (the oldest is dropped first).
    """

    default: ClassVar[SweepCache]

    def __init__(self, max_entries: int = 256):
        self.plans: dict = {}
        self.programs: dict = {}
        self.shared: dict = {}
        self.max_entries = int(max_entries)

    def clear(self) -> None:
        """Forget every decision and compiled program."""
        self.plans.clear()
        self.programs.clear()
        self.shared.clear()

    def __repr__(self) -> str:
        return (
            f"SweepCache(plans={len(self.plans)}, programs={len(self.programs)}, "
            f"shared={len(self.shared)})"
        )

    def remember(self, table: dict, key, value):
        """``table[key] = value``, dropping the oldest entry when the table is full."""
        if len(table) >= self.max_entries:
            table.pop(next(iter(table)))
        table[key] = value
        return value

    def plan(self, fn: Callable, params: dict, seed, width: int = 1) -> tuple[MemberPlan, bool]:
        """``(plan, new)``: the engine's decision for ``fn`` with one member's ``params`` and
        ``seed`` (made now when ``new``, by tracing ``fn`` as a plain group of ``width``
        members, and once more alone if it calls ``solve()``)."""
        shapes = jax.tree.map(lambda x: (jnp.shape(x), jnp.result_type(x)), (params, seed))
        key = (fn, jtu.tree_structure(shapes), tuple(jtu.tree_leaves(shapes)),
               jax.config.jax_enable_x64)  # fmt: skip
        try:
            plan = self.plans.get(key)
        except TypeError:  # an unhashable member function: decided at every sweep
            return plan_member(fn, params, seed, width), True
        if plan is not None:
            return plan, False
        return self.remember(self.plans, key, plan_member(fn, params, seed, width)), True


SweepCache.default = SweepCache()
