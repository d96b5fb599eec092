"""Members whose cost varies, computed in segments of bounded work.

A vmapped ``while_loop`` runs until its slowest member is done, so a group of members of
widely different cost (adaptive ODE solves, event termination, convergence loops) costs
``width x (largest step count)``. A segmented member exposes its loop instead: the sweep
engine advances every unfinished member by at most ``segment_steps`` steps at a time and,
between segments, packs the unfinished members into narrower groups, so a sweep costs about
the sum of its members' work.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
from jaxtyping import Array, Bool, PyTree


class AbstractSegmentedMember(eqx.Module):
    """A sweep member computed in bounded segments.

    Subclasses implement four pure JAX methods of one member (the engine vmaps them):

    - ``init(params, key, max_steps) -> state``: start the member and take at most
      ``max_steps`` steps (``None``: run to completion; ``0``: only start it, which is how
      the sweep engine calls it, so that all the work is done by ``advance``);
    - ``advance(params, key, state, max_steps) -> state``: at most ``max_steps`` more steps;
    - ``done(state) -> bool``: whether the member is finished (``advance`` is never called
      on a finished member);
    - ``finish(params, key, state) -> dict``: the member's outputs, as a plain sweep member
      returns them (arrays, and an optional ``"status"``, a :class:`jaxdyn.Status` item).

    ``params`` is one member's dict of hyperparameters (traced arrays), ``key`` its PRNG key
    (the same key in every call). ``state`` is a PyTree of arrays whose shapes and dtypes do
    not change between segments; the engine keeps it between calls. ``max_steps`` is a Python
    int (a compile-time constant) or ``None``.

    A member's result must not depend on where its work is cut into segments; for ODE
    solves a plain member calling :meth:`jaxdyn.sweep.DiffeqProblem.solve` once needs no
    class: the engine segments it and guarantees this (docs/sweep.md). ``run_sweep`` and
    :meth:`jaxdyn.runs.Run.sweep` accept a segmented member wherever they accept a member
    function.
    """

    @abc.abstractmethod
    def init(self, params: dict[str, Array], key: Array, max_steps: int | None) -> PyTree:
        """Start one member and take at most ``max_steps`` steps."""

    @abc.abstractmethod
    def advance(
        self, params: dict[str, Array], key: Array, state: PyTree, max_steps: int | None
    ) -> PyTree:
        """Continue one unfinished member by at most ``max_steps`` steps."""

    @abc.abstractmethod
    def done(self, state: PyTree) -> Bool[Array, ""]:
        """Whether the member is finished."""

    @abc.abstractmethod
    def finish(self, params: dict[str, Array], key: Array, state: PyTree) -> dict[str, Any]:
        """The member's outputs (a dict of arrays, optionally with ``"status"``)."""


class _Unsegmented(eqx.Module):
    """``member`` run to completion as a plain member function (see :func:`unsegmented`);
    equal for equal members, so the engine's compiled-program cache recognises it."""

    member: AbstractSegmentedMember

    def __call__(self, params: dict[str, Array], key: Array) -> dict[str, Any]:
        member = self.member
        state = member.init(params, key, None)
        state = jax.lax.while_loop(
            lambda s: ~member.done(s), lambda s: member.advance(params, key, s, None), state
        )
        return member.finish(params, key, state)


def unsegmented(
    member: AbstractSegmentedMember,
) -> Callable[[dict[str, Array], Array], dict[str, Any]]:
    """A plain member function that runs ``member`` to completion in one call.

    ``init`` with no step bound, then ``advance`` in a ``while_loop`` until ``done`` (for a
    ``DiffeqMember`` ``init`` already completes the solve), then
    ``finish``. Vmapped, this costs what the engine's plain path costs: ``width x`` the
    slowest member; it is what ``SweepOptions(segment_steps=0)`` runs.
    """
    if not isinstance(member, AbstractSegmentedMember):
        raise TypeError(
            f"unsegmented needs an AbstractSegmentedMember, got {type(member).__name__}"
        )
    return _Unsegmented(member)
