"""Simulate the mean-field Transformer PDE: n particles, or the closed Gaussian ODE
(transformer_pde.md, "The model", "Gaussian closure", "The paper's numerical experiments").

Both simulators are pure functions of arrays (jit/vmap-able, usable inside
``jaxdyn.sweep.run_sweep``), solve with diffrax (adaptive Tsit5 by default, fixed-step on
request) with ``throw=False``, and stop on events:

- blow-up: the real-valued ``tr Sigma - blowup_trace`` (Gaussian) or
  ``max_i |x_i| - blowup_norm`` (particles) changes sign; the crossing time is located
  exactly by a Newton root finder, and the blow-up time itself is extrapolated from the pole
  ``tr Sigma ~ c / (t* - t)``: ``t* ~ t_event + tr Sigma / (d tr Sigma/dt)``;
- loss of positive definiteness: ``lambda_min(Sigma) < -psd_tol tr Sigma`` (root found). The
  exact flow preserves definiteness (``Sigma(t)`` is a congruence of ``Sigma_0``), so this
  flags a genuine failure only when ``psd_tol`` is well above the solver's relative error;
- steady state: ``|d Sigma/dt|_F + |d alpha/dt| < steady_tol`` (the paper's ``tol_low``).

Each run carries a :class:`jaxdyn.Status` and, for Gaussians, which event fired.
"""

from __future__ import annotations

import enum

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jaxdyn._status import Status, mark_nonfinite

from ._fields import AbstractGaussianClosed
from ._solve_common import _check_times, _controller, _root_finder


class GaussianEvent(enum.IntEnum):
    """Which event stopped a Gaussian solve (``GaussianSolution.event``)."""

    NONE = 0
    BLOWUP = 1
    STEADY = 2
    NOT_PSD = 3


class GaussianSolution(eqx.Module):
    """Result of :func:`simulate_gaussian`.

    ``ts``, ``means``, ``covs``: the requested save times and states (``inf`` after an
    event, as diffrax fills them); ``final_mean``/``final_cov`` at ``t_final`` (the event time
    if one fired, else ``t1``); ``t_event`` (``inf`` if none) and ``event``
    (:class:`GaussianEvent`); ``t_blowup``: pole-extrapolated blow-up time (``inf`` unless the
    blow-up event fired); ``status`` (:class:`Status`); ``num_steps``.
    """

    ts: Float[Array, " s"]
    means: Float[Array, "s d"]
    covs: Float[Array, "s d d"]
    final_mean: Float[Array, " d"]
    final_cov: Float[Array, "d d"]
    t_final: Float[Array, ""]
    t_event: Float[Array, ""]
    t_blowup: Float[Array, ""]
    event: Int[Array, ""]
    status: Status
    num_steps: Int[Array, ""]


def _check_covariance(name, cov) -> None:
    """Symmetric and PSD (when concrete; traced covariances are the config's to check)."""
    try:
        c = np.asarray(cov, dtype=float)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return
    scale = max(float(np.abs(c).max()), 1e-300)
    if not np.allclose(c, c.T, atol=1e-10 * scale):
        raise ValueError(f"{name}: cov0 must be symmetric")
    if np.linalg.eigvalsh(0.5 * (c + c.T))[0] < -1e-10 * scale:
        raise ValueError(f"{name}: cov0 must be positive semi-definite")


def simulate_gaussian(
    attention: AbstractGaussianClosed,
    mean0: Float[ArrayLike, " d"],
    cov0: Float[ArrayLike, "d d"],
    t1: Float[ArrayLike, ""],
    *,
    ts: Float[ArrayLike, " s"] | None = None,
    adaptive: bool = True,
    dt0: Float[ArrayLike, ""] | None = None,
    solver: diffrax.AbstractSolver | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-8,
    max_steps: int = 4096,
    blowup_trace: Float[ArrayLike, ""] = 1e3,
    steady_tol: Float[ArrayLike, ""] | None = None,
    psd_tol: Float[ArrayLike, ""] = 1e-6,
) -> GaussianSolution:
    """Solve ``d alpha/dt = B alpha + c``, ``d Sigma/dt = B Sigma + Sigma B^T`` from ``t = 0``.

    The right-hand side is ``attention.gaussian_rhs`` (transformer_pde.md, Gaussian closure).
    Stops at ``t1`` or at the first event (blow-up, steady state if ``steady_tol`` is given,
    loss of definiteness). Pure and jit/vmap-able; never raises at run time.
    """
    name = "simulate_gaussian"
    if not isinstance(attention, AbstractGaussianClosed):
        raise ValueError(f"{name}: {type(attention).__name__} attention is not Gaussian-closed")
    mean0 = jnp.asarray(mean0)
    cov0 = jnp.asarray(cov0)
    d = mean0.shape[-1]
    if mean0.shape != (d,) or cov0.shape != (d, d):
        raise ValueError(
            f"{name}: mean0 must be (d,) and cov0 (d, d), got {mean0.shape}, {cov0.shape}"
        )
    _check_times(name, t1, ts, dt0)
    _check_covariance(name, cov0)
    dtype = jnp.result_type(mean0, cov0, float)
    t1 = jnp.asarray(t1, dtype)

    def rhs(t, y, args):
        mean, cov = y
        return attention.gaussian_rhs(mean, cov, t=t)

    # Each condition is negative before its event and crosses zero upwards at it. They are
    # merged into one real-valued condition (their maximum) so that a scalar bracketing root
    # finder locates the first crossing; which one fired is read off the final state.
    def conditions(t, y):
        mean, cov = y
        out = {
            "blowup": jnp.trace(cov) / blowup_trace - 1.0,
            # Relative to the trace, so round-off of a huge or tiny Sigma never fires it.
            "psd": -jnp.linalg.eigvalsh(0.5 * (cov + cov.T))[0]
            / (psd_tol * jnp.maximum(jnp.trace(cov), 1e-300))
            - 1.0,
        }
        if steady_tol is not None:
            dmean, dcov = rhs(t, y, None)
            out["steady"] = 1.0 - jnp.sqrt(jnp.sum(dcov**2) + jnp.sum(dmean**2)) / steady_tol
        return out

    def merged_cond(t, y, args, **kw):
        return jnp.max(jnp.stack(list(conditions(t, y).values())))

    event = diffrax.Event(merged_cond, root_finder=_root_finder(), direction=True)

    controller, dt0 = _controller(adaptive, rtol, atol, dt0, 0.0, t1, name)
    # Requested saves and the final state are separate sub-saves (after an event diffrax
    # fills the remaining requested slots with inf; the final state is at the event time).
    saved_at = (
        diffrax.SubSaveAt(t1=True) if ts is None else diffrax.SubSaveAt(ts=jnp.asarray(ts, dtype))
    )
    saveat = diffrax.SaveAt(subs=[saved_at, diffrax.SubSaveAt(t1=True)])
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        solver if solver is not None else diffrax.Tsit5(),
        t0=jnp.zeros((), dtype),
        t1=t1,
        dt0=dt0,
        y0=(mean0.astype(dtype), cov0.astype(dtype)),
        saveat=saveat,
        stepsize_controller=controller,
        event=event,
        max_steps=max_steps,
        throw=False,
    )
    (means, covs), (final_means, final_covs) = sol.ys
    final_mean, final_cov = final_means[-1], final_covs[-1]
    t_final = sol.ts[1][-1]
    fired = sol.event_mask
    values = conditions(t_final, (final_mean, final_cov))
    names = list(values)
    which = jnp.argmax(jnp.stack([values[k] for k in names]))
    codes = jnp.array(
        [
            {
                "blowup": GaussianEvent.BLOWUP,
                "psd": GaussianEvent.NOT_PSD,
                "steady": GaussianEvent.STEADY,
            }[k]
            for k in names
        ],
        jnp.int32,
    )
    event_code = jnp.where(fired, codes[which], GaussianEvent.NONE).astype(jnp.int32)
    fired_blowup = event_code == GaussianEvent.BLOWUP
    fired_psd = event_code == GaussianEvent.NOT_PSD
    any_event = event_code != GaussianEvent.NONE
    status = Status.promote(sol.result)
    status = Status.where(fired_blowup, Status.blowup, status)
    status = Status.where(fired_psd, Status.not_psd, status)
    status = Status.where(event_code == GaussianEvent.STEADY, Status.steady_state, status)
    status = mark_nonfinite(status, (final_mean, final_cov))

    # Pole extrapolation: tr Sigma = c / (t* - t) + O(1) gives t* - t = tr / (d tr/dt) + O(1/tr^2).
    dtrace = jnp.trace(rhs(t_final, (final_mean, final_cov), None)[1])
    t_blowup = jnp.where(fired_blowup, t_final + jnp.trace(final_cov) / dtrace, jnp.inf)
    return GaussianSolution(
        ts=sol.ts[0],
        means=means,
        covs=covs,
        final_mean=final_mean,
        final_cov=final_cov,
        t_final=t_final,
        t_event=jnp.where(any_event, t_final, jnp.inf),
        t_blowup=t_blowup,
        event=event_code,
        status=status,
        num_steps=sol.stats["num_steps"],
    )
