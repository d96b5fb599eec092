"""Per-member outcome codes of a simulation, in the spirit of ``diffrax.RESULTS``.

Every sweep member carries one ``int32`` status. Summaries and plots exclude members whose
status is not ``SUCCESS`` (or an outcome the experiment declares acceptable, such as
``BLOWUP`` where finite-time blow-up is the quantity measured) and report how many they
excluded.
"""

from __future__ import annotations

import enum

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int


class Status(enum.IntEnum):
    """Outcome of one simulation (one sweep member)."""

    SUCCESS = 0
    NAN = 1
    BLOWUP = 2
    MAX_STEPS = 3
    DT_MIN = 4
    NOT_PSD = 5
    NOT_CONVERGED = 6
    SOLVER_FAILED = 7

    @property
    def message(self) -> str:
        return _MESSAGES[self]

    @classmethod
    def describe(cls, code: int) -> str:
        try:
            return cls(int(code)).message
        except ValueError:
            return f"unknown status code {code}"


_MESSAGES = {
    Status.SUCCESS: "finished successfully",
    Status.NAN: "a NaN or infinity appeared in the state or outputs",
    Status.BLOWUP: "the state blew up (norm or trace threshold crossed)",
    Status.MAX_STEPS: "the solver reached its maximum number of steps",
    Status.DT_MIN: "the step size fell to its minimum (likely blow-up or stiffness)",
    Status.NOT_PSD: "a covariance lost positive semi-definiteness",
    Status.NOT_CONVERGED: "the iteration did not converge within its budget",
    Status.SOLVER_FAILED: "the solver failed for another reason",
}


def status_from_diffrax(result) -> Int[Array, ""]:
    """Map a ``diffrax.RESULTS`` value (inside jit, possibly vmapped) to a :class:`Status`.

    ``event_occurred`` maps to ``SUCCESS``: callers that use events to detect blow-up or
    loss of definiteness inspect ``sol.event_mask`` and refine the status themselves.
    """
    import diffrax

    R = diffrax.RESULTS
    code = jnp.asarray(Status.SOLVER_FAILED, jnp.int32)
    code = jnp.where(result == R.successful, Status.SUCCESS, code)
    code = jnp.where(result == R.event_occurred, Status.SUCCESS, code)
    code = jnp.where(result == R.max_steps_reached, Status.MAX_STEPS, code)
    code = jnp.where(result == R.dt_min_reached, Status.DT_MIN, code)
    return code.astype(jnp.int32)


def nonfinite_status(tree, status: Int[Array, ""] | int = Status.SUCCESS) -> Int[Array, ""]:
    """Return ``Status.NAN`` if any floating leaf of ``tree`` is NaN, else ``status``.

    Infinities are left alone: diffrax fills save slots after an event with ``inf``.
    """
    import jax

    leaves = [
        jnp.any(jnp.isnan(x))
        for x in jax.tree_util.tree_leaves(tree)
        if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)
    ]
    status = jnp.asarray(status, jnp.int32)
    if not leaves:
        return status
    bad = jnp.any(jnp.stack(leaves))
    return jnp.where(bad & (status == Status.SUCCESS), jnp.int32(Status.NAN), status)


def count_by_status(status) -> dict[str, int]:
    """Counts of each status name present in an array of codes (for summary.json)."""
    status = np.asarray(status).ravel()
    out: dict[str, int] = {}
    for code in np.unique(status):
        try:
            name = Status(int(code)).name
        except ValueError:
            name = f"CODE_{int(code)}"
        out[name] = int(np.sum(status == code))
    return out
