"""The runs of the d = 2 cone pictures (``pde-cone``; transformer_pde.md, "The paper's numerical
experiments"): five cases x four attention variants as one sweep member, and the measurements
its checks read (closed forms in ``_cone``, the case ``either``'s limits in ``_cone_limits``).
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn._status import item_code

from ._blowup import l2_growth_excess
from ._cone import cone_outcome, disk_coordinates, two_lines_covariance
from ._paper_inputs import CONE_CASES
from ._simulate_gaussian import simulate_gaussian
from .fields import L2, MultiHead, SelectField, Sinkhorn, Softmax

CONE_VARIANTS = ("softmax", "l2", "multihead", "sinkhorn")


def cone_params(cases: dict, covs0: np.ndarray) -> dict[str, np.ndarray]:
    """Sweep params of every (case, variant, initial covariance), in that order."""
    n0, nc, nv = len(covs0), len(CONE_CASES), len(CONE_VARIANTS)
    case_of = np.repeat(np.arange(nc), nv * n0)
    params = {k: np.stack([cases[CONE_CASES[c]][k] for c in case_of]) for k in ("Q", "K", "V")}
    params["Sigma0"] = np.tile(covs0, (nc * nv, 1, 1))
    params["variant"] = np.tile(np.repeat(np.arange(nv), n0), nc)
    return params


def cone_save_times(t1: float, saves: int) -> np.ndarray:
    """``0`` and ``saves - 1`` log-spaced times up to ``t1`` (the blow-ups and the turns towards
    lines happen early)."""
    ts = np.concatenate([[0.0], np.geomspace(1e-3 * t1, t1, saves - 1)])
    ts[-1] = t1
    return ts


def cone_member(ts, *, t1, rtol, atol, max_steps, blowup_trace, converged_tol):
    """Sweep member of one cone run: params ``Q, K, V, Sigma0`` and ``variant`` (an index into
    ``CONE_VARIANTS``); outputs the saves, the final state, the event time and the
    :func:`cone_outcome` code."""

    def member(p, key):
        Q, K, V = p["Q"], p["K"], p["V"]
        variants = (
            Softmax(Q=Q, K=K, V=V),
            L2(Q=Q, K=K, V=V),
            MultiHead(Q=Q, K=K, V=V, heads=2),
            Sinkhorn(Q=Q, K=K, V=V),
        )
        field = SelectField(variants, p["variant"])
        sol = simulate_gaussian(
            field,
            jnp.zeros(2, Q.dtype),
            p["Sigma0"],
            t1,
            ts=ts,
            rtol=rtol,
            atol=atol,
            max_steps=max_steps,
            # L2 grows at most exponentially: only an overflow-level trace counts for it.
            blowup_trace=jnp.where(p["variant"] == 1, 1e200, blowup_trace),
            # diffrax's Tsit5, whose stage loop traces the four-way SelectField once: unrolled
            # stages (the default) compile it once per stage, for runs of a few hundred steps.
            solver=diffrax.Tsit5(),
        )
        _, dcov = field.gaussian_rhs(sol.final_mean, sol.final_cov, t=sol.t_final)
        outcome = cone_outcome(sol.status, sol.final_cov, jnp.sqrt(jnp.sum(dcov**2)), converged_tol)
        return {
            "covs": sol.covs,
            "final_cov": sol.final_cov,
            "t_final": sol.t_final,
            "t_event": sol.t_event,
            "outcome": item_code(outcome),
            "status": sol.status,
        }

    return member


def continue_blowups(field, covs, *, t1, rtol, atol, max_steps, trace):
    """Each ``cov`` (at a blow-up event) solved on until ``tr = trace``: ``(final covariances,
    steps, reached)``; a continuation that did not get there has ``reached`` false and its
    event state in place of its final one."""

    def one(cov):
        sol = simulate_gaussian(
            field, jnp.zeros(2, cov.dtype), cov, t1,
            rtol=rtol, atol=atol, max_steps=max_steps, blowup_trace=trace,
        )  # fmt: skip
        return sol.final_cov, sol.num_steps, sol.t_event

    final, steps, t_event = map(np.asarray, jax.jit(jax.vmap(one))(jnp.asarray(covs)))
    # NaN states (which eigh rejects) are replaced so the measurement still runs.
    reached = np.isfinite(t_event) & np.all(np.isfinite(final), axis=(1, 2))
    return np.where(reached[:, None, None], final, covs), steps, reached


def trace_decreases(covs, final, middle: int) -> np.ndarray:
    """Trace 1 initially, smaller at the save ``middle``, smaller still at the end."""
    tr_end = np.trace(final, axis1=-2, axis2=-1)
    tr_mid = np.trace(covs[..., middle, :, :], axis1=-2, axis2=-1)
    return (tr_end < tr_mid) & (tr_mid < 1.0)


def sinkhorn_growth_excess(cases, covs0, covs, final, t_event, runs, ts) -> np.ndarray:
    """The Sinkhorn runs' ``log tr Sigma(t) - log(d |Sigma_0|_2 e^{2 |V|_2 t})`` at every save
    ``0 < t <=`` the solve's end and at the end, for the runs ``runs`` ((cases, initial)).

    [derived] ``dSigma/dt = V S phi(A~) S + transpose`` with ``S = Sigma^{1/2}``, ``A~ = S A S``
    and ``phi(A~) = 2 A~ (I + (I + 4 A~^T A~)^{1/2})^{-1}``, whose singular values are
    ``2 s / (1 + (1 + 4 s^2)^{1/2}) < 1``: ``|dSigma/dt|_2 < 2 |V|_2 |Sigma|_2``, so no
    finite-time blow-up (Gronwall). For symmetric ``V > 0`` and symmetric ``A < 0``,
    ``phi(A~)`` is negative definite and ``d/dt tr(V^-1 Sigma) = 2 tr(S phi(A~) S) < 0``.
    """
    t_end = np.where(np.isfinite(t_event), t_event, ts[-1])
    # t = 0 is left out: there the bound is an identity for an isotropic Sigma_0 (tr = d |.|_2)
    reached = (ts[None, None, :] <= t_end[..., None]) & (ts[None, None, :] > 0)
    times = np.concatenate([np.where(reached, ts, np.inf), t_end[..., None]], axis=-1)
    traces = np.concatenate(
        [np.trace(covs, axis1=-2, axis2=-1), np.trace(final, axis1=-2, axis2=-1)[..., None]],
        axis=-1,
    )
    rates = np.array([2 * np.linalg.norm(cases[c]["V"], 2) for c in CONE_CASES])
    return l2_growth_excess(
        times[runs],
        traces[runs],
        np.broadcast_to(covs0, covs.shape[:2] + (2, 2))[runs],
        np.broadcast_to(rates[:, None], runs.shape)[runs],
    )


def sigma_11_drift(covs) -> float:
    """Multi-head on the to-line weights: head 1 has ``Q_1 = 0`` and head 0 ``A_0 = -q^T q``,
    ``C_0 = e_0 e_0^T``, so ``dSigma/dt = C_0 Sigma A_0 Sigma + transpose`` has a zero second
    row and column: ``Sigma_11`` is conserved and the trace does not increase. The largest
    ``|Sigma_11(t) - Sigma_11(0)|`` and rise of ``tr Sigma`` between saves of ``covs``
    ((runs, saves, 2, 2))."""
    drift = np.abs(covs[:, :, 1, 1] - covs[:, :1, 1, 1])
    rise = np.diff(np.trace(covs, axis1=-2, axis2=-1), axis=1)
    return float(max(drift.max(initial=0.0), np.maximum(rise, 0.0).max(initial=0.0)))


def two_lines_distances(covs0, ends, t1: float):
    """Two lines: the exact ``Sigma(t1)`` of every start and, for the off-axis starts
    (``c0 != 0``), the disk distances of ``ends`` and of the exact flow to the line of
    ``sign(c0)``. Returns ``(exact, off, distance, exact_distance)``."""
    c0 = covs0[:, 0, 1]
    off = np.abs(c0) > 1e-12
    exact = np.stack([two_lines_covariance(c, t1) for c in covs0])
    line = np.stack([np.zeros_like(c0), np.sign(c0)], -1)[off]
    distance = np.linalg.norm(disk_coordinates(ends[off]) - line, axis=-1)
    exact_distance = np.linalg.norm(disk_coordinates(exact[off]) - line, axis=-1)
    return exact, off, distance, exact_distance


def signs_reached(values) -> np.ndarray:
    """``[-1, 1]`` if both signs occur in ``values``, else the one that does, padded with 0."""
    signs = sorted(set(np.sign(np.asarray(values)).tolist()) - {0.0})
    return np.array((signs + [0.0, 0.0])[:2]) if len(signs) < 2 else np.array(signs)
