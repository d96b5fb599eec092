"""Input validation, written once: concrete values fail in Python, traced ones at run time.

Every ``require_*`` function takes the input's name and value and returns the value. When the
value is concrete (a Python number, a NumPy array, a JAX array outside a trace) a violation
raises ``ValueError`` with a one-line message naming the input, before anything is compiled.
When the value is traced (inside ``jit``/``vmap``/a sweep member) the same condition becomes
an ``eqx.error_if`` on the returned value, so a bad value fails at run time instead of being
skipped. Inside ``jaxdyn.sweep`` members prefer validating the grid in Python and reporting
numerical failures as a :class:`jaxdyn.Status`.

Validation rejects what is mathematically invalid (a non-positive time, a non-stochastic
matrix, a non-PSD covariance); it never rejects a region where a theory's claim does not hold.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

_STOCHASTIC_ATOL = 1e-6


def is_traced(*values: Any) -> bool:
    """Whether any leaf of ``values`` is a JAX tracer (inside ``jit``, ``vmap``, ``grad``)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(values))


def _fail_or_error_if(value, bad, message: str):
    """Raise now if ``bad`` is concrete and true; attach ``eqx.error_if`` if traced."""
    if is_traced(value, bad):
        return eqx.error_if(value, bad, message)
    if bool(np.any(np.asarray(bad))):
        raise ValueError(message)
    return value


def require_positive(name: str, value: Any, *, allow_inf: bool = False) -> Any:
    """``value > 0`` elementwise; infinity is allowed only with ``allow_inf`` (NaN never)."""
    if is_traced(value):
        x = jnp.asarray(value)
        bad = ~(x > 0) | (~jnp.isfinite(x) if not allow_inf else jnp.isnan(x))
        return _fail_or_error_if(value, jnp.any(bad), f"{name} must be positive")
    x = np.asarray(value, dtype=np.float64)
    ok = (x > 0) & (np.isfinite(x) | (allow_inf & ~np.isnan(x)))
    if not np.all(ok):
        shown = value if np.ndim(value) == 0 else np.asarray(value).tolist()
        kind = "positive" if allow_inf else "positive and finite"
        raise ValueError(f"{name} must be {kind}, got {shown}")
    return value


def require_in_interval(
    name: str, value: Any, low: float, high: float, *, closed: str = "both"
) -> Any:
    """``low <= value <= high``; ``closed``: ``"both"``, ``"left"``, ``"right"``, ``"neither"``."""
    if closed not in ("both", "left", "right", "neither"):
        raise ValueError(f"closed must be 'both', 'left', 'right' or 'neither', got {closed!r}")
    xp = jnp if is_traced(value) else np
    x = xp.asarray(value)
    above = x >= low if closed in ("both", "left") else x > low
    below = x <= high if closed in ("both", "right") else x < high
    left = "[" if closed in ("both", "left") else "("
    right = "]" if closed in ("both", "right") else ")"
    shown = "" if is_traced(value) else f", got {np.asarray(value).tolist()}"
    return _fail_or_error_if(
        value, xp.any(~(above & below)), f"{name} must be in {left}{low}, {high}{right}{shown}"
    )


def require_probability_vector(name: str, p: Any, *, strictly_positive: bool = False) -> Any:
    """A vector of non-negative (or strictly positive) finite entries summing to one."""
    if np.ndim(p) != 1 or np.shape(p)[0] < 1:
        raise ValueError(f"{name} must be a non-empty vector, got shape {np.shape(p)}")
    xp = jnp if is_traced(p) else np
    x = xp.asarray(p)
    negative = xp.any(x <= 0) if strictly_positive else xp.any(x < 0)
    sign = "strictly positive" if strictly_positive else "non-negative"
    p = _fail_or_error_if(
        p, ~xp.all(xp.isfinite(x)) | negative, f"{name} must have {sign} finite entries"
    )
    total = xp.sum(x)
    shown = "" if is_traced(p) else f", got sum {float(total):.8g}"
    return _fail_or_error_if(
        p, xp.abs(total - 1.0) > _STOCHASTIC_ATOL, f"{name} must sum to 1{shown}"
    )


def require_stochastic(name: str, P: Any) -> Any:
    """A square matrix with non-negative finite entries whose rows sum to one."""
    if np.ndim(P) != 2 or np.shape(P)[0] != np.shape(P)[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {np.shape(P)}")
    xp = jnp if is_traced(P) else np
    m = xp.asarray(P)
    P = _fail_or_error_if(
        P,
        ~xp.all(xp.isfinite(m)) | xp.any(m < 0),
        f"{name} must have non-negative finite entries",
    )
    rows = xp.sum(m, axis=1)
    shown = (
        ""
        if is_traced(P)
        else f": row sums range over [{float(rows.min()):.6g}, {float(rows.max()):.6g}]"
    )
    return _fail_or_error_if(
        P, xp.max(xp.abs(rows - 1.0)) > _STOCHASTIC_ATOL, f"{name} is not row-stochastic{shown}"
    )


def require_psd(name: str, S: Any, *, rtol: float = 1e-8) -> Any:
    """A symmetric positive semi-definite matrix (eigenvalues >= -rtol * max |S_ij|)."""
    if np.ndim(S) != 2 or np.shape(S)[0] != np.shape(S)[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {np.shape(S)}")
    if is_traced(S):
        m = jnp.asarray(S)
        scale = jnp.maximum(jnp.max(jnp.abs(m)), 1.0)
        asym = jnp.max(jnp.abs(m - m.T)) > rtol * scale
        low = jnp.linalg.eigvalsh(0.5 * (m + m.T))[0] < -rtol * scale
        return _fail_or_error_if(
            S, asym | low | ~jnp.all(jnp.isfinite(m)), f"{name} must be symmetric PSD"
        )
    m = np.asarray(S, dtype=np.float64)
    if not np.all(np.isfinite(m)):
        raise ValueError(f"{name} contains NaN or infinity")
    scale = max(float(np.abs(m).max()), 1.0)
    if np.max(np.abs(m - m.T)) > rtol * scale:
        raise ValueError(f"{name} must be symmetric")
    smallest = float(np.linalg.eigvalsh(0.5 * (m + m.T))[0])
    if smallest < -rtol * scale:
        raise ValueError(
            f"{name} must be positive semi-definite, smallest eigenvalue {smallest:.3g}"
        )
    return S


__all__ = [
    "is_traced",
    "require_in_interval",
    "require_positive",
    "require_probability_vector",
    "require_psd",
    "require_stochastic",
]
