"""One outcome vocabulary: :class:`Status`, an equinox Enumeration extending ``diffrax.RESULTS``.

Every sweep member carries one status. ``Status`` inherits every item of ``diffrax.RESULTS``
(``successful``, ``max_steps_reached``, ``dt_min_reached``, ``event_occurred``, ``nonfinite``
and the optimistix/lineax failures), so a solver's result becomes a status with
``Status.promote(sol.result)``, and adds the outcomes that jaxdyn's simulations detect
themselves (blow-up, steady state, loss of positive semi-definiteness, non-convergence).

Inside JAX a status is an equinox Enumeration item (it can be traced, vmapped, compared with
``==``, selected with ``Status.where``); it prints with its public name and message, e.g.
``jaxdyn.Status<the state blew up ...>``. On the host, sweeps store statuses as ``int32`` codes
(``results.npz``); :meth:`Status.code`, :meth:`Status.name`, :meth:`Status.message` and
:meth:`Status.count` convert between codes, items and names (the module's free functions are
the same helpers for jaxdyn's own modules), and :meth:`jaxdyn.sweep.SweepResult.ok` selects
members.

Theory-specific outcomes (which event fired, the order of a transition, a cone outcome) are
Enumerations of their own in the theory packages, built the same way; :func:`outcome_names`
names the codes of any of them.
"""

from __future__ import annotations

from typing import Any

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from ._compat import enumeration_items

# the item type of every equinox Enumeration, taken from an item (not from equinox's modules)
_ITEM = type(diffrax.RESULTS.successful)


def item_code(item: Any) -> Any:
    """The integer code of an Enumeration item: its one PyTree leaf (an int32 array, traced
    inside JAX)."""
    (code,) = jax.tree_util.tree_leaves(item)
    return code


def item_with_code(example: Any, code: Any) -> Any:
    """The item of ``example``'s Enumeration whose code is ``code`` (an int32 array, traced
    inside JAX): the PyTree of ``example`` with ``code`` as its leaf (the inverse of
    :func:`item_code`)."""
    return jax.tree.unflatten(jax.tree.structure(example), [code])


class _StatusMethods:
    """The host-side helpers of :class:`Status`, as its classmethods.

    An equinox Enumeration takes every name of its class body as an item, so the methods live
    in this plain base class (equinox accepts a base without Enumeration items)."""

    @classmethod
    def code(cls, status: Any) -> np.ndarray | int:
        """The ``int32`` code(s) of a status item (or of any Enumeration item); an array of
        codes passes through. Sweeps store these in ``results.npz``."""
        return status_code(status)

    @classmethod
    def name(cls, code: Any) -> str:
        """The item name of one status code (or item), e.g. ``"blowup"``."""
        return status_name(code)

    @classmethod
    def message(cls, code: Any) -> str:
        """The message of one status code (or item), e.g. ``"the dynamics reached a steady
        state"`` (``"finished successfully"`` for ``successful``)."""
        return status_message(code)

    @classmethod
    def count(cls, codes: Any) -> dict[str, int]:
        """Counts of each status name present in an array of codes (for summaries)."""
        return count_outcomes(Status, codes)

    @classmethod
    def mark_nonfinite(cls, status: Any, tree: Any) -> Any:
        """``nonfinite`` if a floating leaf of ``tree`` holds a NaN and ``status`` is
        ``successful``; otherwise ``status`` (infinities are left alone: diffrax fills save
        slots after an event with ``inf``)."""
        return mark_nonfinite(status, tree)


class Status(diffrax.RESULTS, _StatusMethods):  # pyright: ignore
    """Outcome of one simulation (one sweep member).

    Extends ``diffrax.RESULTS``, so ``Status.promote(sol.result)`` turns a diffrax result into
    a status without a ``jnp.where`` chain. Items (besides diffrax's own):

    - ``blowup``: the state crossed a norm or trace threshold (finite-time blow-up);
    - ``steady_state``: the dynamics stopped at a steady state (a convergence event fired);
    - ``not_psd``: a covariance lost positive semi-definiteness;
    - ``not_converged``: an iteration (root finder, fixed point, sampler) did not converge.

    On the host, :meth:`code`, :meth:`name`, :meth:`message` and :meth:`count` convert between
    items, ``int32`` codes, names and counts; :meth:`mark_nonfinite` turns a NaN state into
    ``nonfinite``. Items print as ``jaxdyn.Status<message>``.
    """

    __module__ = "jaxdyn"  # items print with the public name, jaxdyn.Status<...>

    blowup = "the state blew up (a norm or trace threshold was crossed)"
    steady_state = "the dynamics reached a steady state"
    not_psd = "a covariance lost positive semi-definiteness"
    not_converged = "the iteration did not converge within its budget"


def _is_item(value: Any) -> bool:
    return isinstance(value, _ITEM)


def status_code(status: Any) -> np.ndarray | int:
    """The ``int32`` code(s) of a status item, or of any Enumeration item (or pass an array of
    codes through)."""
    value = item_code(status) if _is_item(status) else status
    arr = np.asarray(value, dtype=np.int32)
    return int(arr) if arr.ndim == 0 else arr


def outcome_names(enumeration: type, codes) -> np.ndarray:
    """The item name of each code of ``enumeration`` (any equinox Enumeration)."""
    by_index = {int(item_code(item)): name for name, item in enumeration_items(enumeration).items()}
    codes = np.asarray(codes, dtype=np.int64)
    return np.vectorize(lambda c: by_index.get(int(c), f"code_{int(c)}"), otypes=[object])(codes)


def status_name(code) -> str:
    """The name of one status code, e.g. ``"blowup"``."""
    return str(outcome_names(Status, int(status_code(code))))


def status_item(code) -> Any:
    """A host code (or array of codes) as a ``Status`` item, e.g. for ``Status[item]``."""
    return item_with_code(Status.successful, np.asarray(code, dtype=np.int32))


def status_message(code) -> str:
    """The message of one status code, e.g. ``"the dynamics reached a steady state"``."""
    message = Status._index_to_message[int(status_code(code))]
    return message or "finished successfully"


def count_outcomes(enumeration: type, codes) -> dict[str, int]:
    """Counts of each item name of ``enumeration`` present in ``codes`` (for summaries)."""
    codes = np.asarray(codes).ravel()
    names = outcome_names(enumeration, codes)
    return {str(n): int(np.sum(names == n)) for n in dict.fromkeys(names.tolist())}


def count_by_status(codes) -> dict[str, int]:
    """Counts of each status name present in an array of codes (for ``summary.json``)."""
    return count_outcomes(Status, codes)


def as_status(status: Any) -> Any:
    """A :class:`Status` item from a ``Status``/``diffrax.RESULTS`` item.

    Raises ``TypeError`` for anything else: statuses are never bare integers inside JAX.
    """
    if isinstance(status, Status):
        return status
    if _is_item(status):
        try:
            return Status.promote(status)  # an item of diffrax's (or its bases') RESULTS
        except ValueError:
            pass
    raise TypeError(
        f"a status must be a jaxdyn.Status (or diffrax.RESULTS) item, got {type(status).__name__}"
    )


def mark_nonfinite(status: Any, tree: Any) -> Any:
    """``Status.nonfinite`` if a floating leaf of ``tree`` holds a NaN and ``status`` is
    ``successful``; otherwise ``status``.

    Infinities are left alone: diffrax fills save slots after an event with ``inf``.
    """
    status = as_status(status)
    leaves = [
        jnp.any(jnp.isnan(x))
        for x in jax.tree_util.tree_leaves(tree)
        if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)
    ]
    if not leaves:
        return status
    bad = jnp.any(jnp.stack(leaves))
    return Status.where(bad & (status == Status.successful), Status.nonfinite, status)


__all__ = [
    "Status",
    "as_status",
    "count_by_status",
    "item_code",
    "item_with_code",
    "count_outcomes",
    "mark_nonfinite",
    "outcome_names",
    "status_code",
    "status_item",
    "status_message",
    "status_name",
]
