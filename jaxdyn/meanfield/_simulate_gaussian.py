"""Simulate the closed Gaussian ODE of the mean-field Transformer PDE ("Gaussian closure").

For a Gaussian-closed field the measure ``N(alpha, Sigma)`` stays Gaussian, with
``d alpha/dt = B alpha + c`` and ``d Sigma/dt = B Sigma + Sigma B^T`` (``Gamma(x) = B x + c``).
:func:`simulate_gaussian` solves it with diffrax (adaptive Tsit5 by default; any diffrax solver
and step-size controller object on request; ``throw=False``) and stops at the first event,
each a real-valued condition of the state that is negative before the event and crosses zero
at it:

- blow-up, ``tr Sigma / blowup_trace - 1`` (status ``Status.blowup``); the blow-up time is then
  extrapolated from the pole ``tr Sigma ~ c / (t* - t)``:
  ``t* ~ t_event + tr Sigma / (d tr Sigma/dt)``;
- steady state, ``1 - (|dSigma/dt|_F^2 + |dalpha/dt|^2)^{1/2} / steady_tol`` (the paper's
  ``tol_low``; status ``Status.steady_state``);
- loss of definiteness, ``lambda_min(Sigma) < -psd_tol tr Sigma`` (``Status.not_psd``). The
  exact flow is a congruence of ``Sigma_0`` and never loses definiteness, so this flags a genuine
  failure only when ``psd_tol`` is well above the solver's relative error;
- user events ``condition(t, mean, cov)`` (status ``Status.event_occurred``, and
  ``GaussianSolution.events[name]`` says which one fired).

All conditions are merged into one (their maximum), whose upward crossing is located by
bisection on the step's interpolant; the event time is differentiable (implicit function
theorem). The problem is built first (:func:`gaussian_ode`) and solved separately
(:meth:`GaussianODE.solve`, :meth:`GaussianODE.solution`), so a sweep can solve it in segments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import diffrax
import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxdyn import Status, mark_nonfinite
from jaxdyn.sweep import DiffeqProblem

from ._solve_common import (
    _check_gaussian_inputs,
    _check_times,
    _controller,
    _root_finder,
    check_events,
    requested_and_final_saveat,
)
from .fields._base import AbstractGaussianClosed

EventCondition = Callable[[Float[Array, ""], Float[Array, " d"], Float[Array, "d d"]], Array]

# The defaults of every Gaussian solve (simulate_gaussian, gaussian_ode, solver_blowup_time,
# solver_final_covariance): one threshold and one tolerance pair, so one problem has one t*.
BLOWUP_TRACE = 1e6
RTOL = 1e-8
ATOL = 1e-10

# Built-in conditions and the status each one sets when it fires.
_BUILTIN_STATUS = {"blowup": Status.blowup, "steady": Status.steady_state, "psd": Status.not_psd}


class GaussianSolution(eqx.Module):
    """Result of :func:`simulate_gaussian`.

    Attributes:
        ts: requested save times (``inf`` after an event, as diffrax fills them).
        means: means at ``ts``.
        covs: covariances at ``ts``.
        final_mean: mean at ``t_final``.
        final_cov: covariance at ``t_final``.
        t_final: the event time if an event fired, else ``t1`` (or where the solve stopped).
        t_event: the event time (``inf`` if none fired).
        t_blowup: pole-extrapolated blow-up time (``inf`` unless the blow-up event fired).
        status: a :class:`jaxdyn.Status`: ``blowup``, ``steady_state``, ``not_psd``,
            ``event_occurred`` (a user event), ``successful`` (reached ``t1``) or a failure.
        events: for each user event, whether it is the one that stopped the solve.
        num_steps: solver steps taken.
    """

    ts: Float[Array, " s"]
    means: Float[Array, "s d"]
    covs: Float[Array, "s d d"]
    final_mean: Float[Array, " d"]
    final_cov: Float[Array, "d d"]
    t_final: Float[Array, ""]
    t_event: Float[Array, ""]
    t_blowup: Float[Array, ""]
    status: Status
    events: dict[str, Bool[Array, ""]]
    num_steps: Int[Array, ""]


class GaussianODE(eqx.Module):
    """The diffrax problem solved by :func:`simulate_gaussian` (built by :func:`gaussian_ode`).

    Attributes:
        field: the Gaussian-closed velocity field.
        y0: ``(mean0, cov0)``.
        t1: final time.
        dt0: initial (or fixed) step, ``None`` to let the controller choose.
        blowup_trace: trace at which the blow-up event fires (``None``: no such event).
        steady_tol: rate below which the steady-state event fires (``None``: no such event).
        psd_tol: relative negative eigenvalue at which ``not_psd`` fires (``None``: no check).
        solver: the diffrax solver.
        controller: the step-size controller.
        saveat: requested saves, then the final state.
        max_steps: solver steps before ``max_steps_reached``.
        user_events: named conditions ``(t, mean, cov) -> real``, crossing zero at the event.
    """

    field: AbstractGaussianClosed
    y0: tuple[Float[Array, " d"], Float[Array, "d d"]]
    t1: Float[Array, ""]
    dt0: Float[Array, ""] | None
    blowup_trace: Float[Array, ""] | None
    steady_tol: Float[Array, ""] | None
    psd_tol: Float[Array, ""] | None
    solver: diffrax.AbstractSolver
    controller: diffrax.AbstractStepSizeController
    saveat: diffrax.SaveAt
    max_steps: int = eqx.field(static=True)
    user_events: Mapping[str, EventCondition] = eqx.field(static=True)

    def rhs(self, t, y, args=None):
        """``(d alpha/dt, d Sigma/dt)`` of the field (the diffrax vector field)."""
        mean, cov = y
        return self.field.gaussian_rhs(mean, cov, t=t)

    def conditions(self, t, y) -> dict[str, Float[Array, ""]]:
        """Every event condition at ``(t, y)``: negative before its event, zero at it."""
        mean, cov = y
        out = {}
        if self.blowup_trace is not None:
            out["blowup"] = jnp.trace(cov) / self.blowup_trace - 1.0
        if self.steady_tol is not None:
            dmean, dcov = self.rhs(t, y)
            out["steady"] = 1.0 - jnp.sqrt(jnp.sum(dcov**2) + jnp.sum(dmean**2)) / self.steady_tol
        if self.psd_tol is not None:
            # Relative to the trace, so round-off of a huge or tiny Sigma never fires it.
            smallest = jnp.linalg.eigvalsh(0.5 * (cov + cov.T))[0]
            scale = self.psd_tol * jnp.maximum(jnp.trace(cov), 1e-300)
            out["psd"] = -smallest / scale - 1.0
        for name, condition in self.user_events.items():
            out[f"user:{name}"] = jnp.asarray(condition(t, mean, cov), cov.dtype)
        return out

    def _merged_condition(self, t, y, args, **kwargs):
        return jnp.max(jnp.stack(list(self.conditions(t, y).values())))

    def has_events(self) -> bool:
        """Whether any event is defined (without one, the solve holds no root finder)."""
        return bool(self.user_events) or any(
            tol is not None for tol in (self.blowup_trace, self.steady_tol, self.psd_tol)
        )

    def fired_at_start(self) -> Bool[Array, ""]:
        """Whether a condition is already at or past its event at ``t = 0`` (the solve then
        stops at once: an event that has happened cannot be crossed)."""
        if not self.has_events():
            return jnp.zeros((), bool)
        return self._merged_condition(jnp.zeros((), self.t1.dtype), self.y0, None) >= 0

    def diffeqsolve_arguments(self) -> dict:
        """The arguments of ``diffrax.diffeqsolve`` (without ``throw``): ``t1`` is ``0`` if
        :meth:`fired_at_start`. A sweep engine may solve them in segments."""
        t0 = jnp.zeros((), self.t1.dtype)
        return dict(
            terms=diffrax.ODETerm(self.rhs),
            solver=self.solver,
            t0=t0,
            t1=jnp.where(self.fired_at_start(), t0, self.t1),
            dt0=self.dt0,
            y0=self.y0,
            saveat=self.saveat,
            stepsize_controller=self.controller,
            event=(
                diffrax.Event(self._merged_condition, root_finder=_root_finder(), direction=True)
                if self.has_events()
                else None
            ),
            max_steps=self.max_steps,
        )

    def diffeq_problem(self) -> DiffeqProblem:
        """:meth:`diffeqsolve_arguments` as a :class:`jaxdyn.sweep.DiffeqProblem` (a
        :class:`jaxdyn.sweep.DiffeqMember` then solves it in segments)."""
        return DiffeqProblem(**self.diffeqsolve_arguments())

    def solve(self) -> diffrax.Solution:
        """One uninterrupted ``diffeqsolve`` of :meth:`diffeqsolve_arguments` (``throw=False``),
        through :meth:`jaxdyn.sweep.DiffeqProblem.solve`: inside ``run_sweep`` the engine
        continues it in segments, with the same solution."""
        return self.diffeq_problem().solve()

    def solution(self, sol: diffrax.Solution) -> GaussianSolution:
        """Post-process a solve: final state, which event fired, status, blow-up time."""
        (means, covs), (final_means, final_covs) = sol.ys
        final = (final_means[-1], final_covs[-1])
        t_final = sol.ts[1][-1]
        values = self.conditions(t_final, final)
        names = list(values)
        winner = jnp.argmax(jnp.stack([values[k] for k in names])) if names else 0
        event_mask = sol.event_mask if names else jnp.zeros((), bool)
        any_fired = event_mask | self.fired_at_start()
        fired = {k: any_fired & (winner == i) for i, k in enumerate(names)}
        status = Status.where(any_fired, Status.event_occurred, Status.promote(sol.result))
        for name, item in _BUILTIN_STATUS.items():
            if name in fired:
                status = Status.where(fired[name], item, status)
        status = mark_nonfinite(status, final)
        # Pole extrapolation: tr Sigma = c / (t* - t) + O(1) gives t* - t = tr / (d tr/dt).
        dtrace = jnp.trace(self.rhs(t_final, final)[1])
        blew_up = fired.get("blowup", jnp.zeros((), bool))
        t_blowup = jnp.where(blew_up, t_final + jnp.trace(final[1]) / dtrace, jnp.inf)
        return GaussianSolution(
            ts=sol.ts[0],
            means=means,
            covs=covs,
            final_mean=final[0],
            final_cov=final[1],
            t_final=t_final,
            t_event=jnp.where(any_fired, t_final, jnp.inf),
            t_blowup=t_blowup,
            status=status,
            events={k: fired[f"user:{k}"] for k in self.user_events},
            num_steps=sol.stats["num_steps"],
        )


def gaussian_ode(
    field: AbstractGaussianClosed,
    mean0: Float[ArrayLike, " d"],
    cov0: Float[ArrayLike, "d d"],
    t1: Float[ArrayLike, ""],
    *,
    ts: Float[ArrayLike, " s"] | None = None,
    solver: diffrax.AbstractSolver | None = None,
    stepsize_controller: diffrax.AbstractStepSizeController | None = None,
    dt0: Float[ArrayLike, ""] | None = None,
    rtol: Float[ArrayLike, ""] = RTOL,
    atol: Float[ArrayLike, ""] = ATOL,
    max_steps: int = 4096,
    blowup_trace: Float[ArrayLike, ""] | None = BLOWUP_TRACE,
    steady_tol: Float[ArrayLike, ""] | None = None,
    psd_tol: Float[ArrayLike, ""] | None = 1e-6,
    events: Mapping[str, EventCondition] | None = None,
) -> GaussianODE:
    """Validate the inputs and build the problem that :func:`simulate_gaussian` solves.

    Args:
        field: a Gaussian-closed velocity field (``field.gaussian_rhs`` is the ODE).
        mean0: initial mean ``alpha_0``.
        cov0: initial covariance ``Sigma_0`` (symmetric PSD).
        t1: final time.
        ts: save times (default: only ``t1``).
        solver: a diffrax solver (default ``diffrax.Tsit5()``).
        stepsize_controller: a diffrax step-size controller (default
            ``diffrax.PIDController(rtol=rtol, atol=atol)``; ``diffrax.ConstantStepSize()``
            needs ``dt0``).
        dt0: initial (or constant) step.
        rtol: relative tolerance of the default controller (traced in a sweep, so one
            compilation serves every tolerance); unused with ``stepsize_controller``.
        atol: absolute tolerance of the default controller.
        max_steps: solver steps before ``Status.max_steps_reached``.
        blowup_trace: trace at which the blow-up event fires (``None``: no blow-up event; with
            no event at all the solve holds no root finder, which compiles in about half the
            time).
        steady_tol: steady-state event threshold on the rate (``None``: no such event).
        psd_tol: loss-of-definiteness threshold (``None``: no check; saves an ``eigvalsh`` per
            step).
        events: named user events, ``condition(t, mean, cov)`` negative before the event and
            crossing zero at it (e.g. ``lambda t, m, c: 0.5 - jnp.linalg.eigvalsh(c)[0]``).

    Returns:
        A :class:`GaussianODE` (``.solve()``, ``.solution(sol)``, ``.diffeq_problem()``).
    """
    name = "simulate_gaussian"
    mean0, cov0 = _check_gaussian_inputs(name, field, mean0, cov0)
    _check_times(name, t1, ts, dt0)
    events = check_events(name, events, "(t, mean, cov)")
    dtype = jnp.result_type(mean0, cov0, float)
    t1 = jnp.asarray(t1, dtype)
    if stepsize_controller is None:
        controller, dt0 = _controller(True, rtol, atol, dt0, 0.0, t1, name)
    else:
        controller = stepsize_controller
        if isinstance(controller, diffrax.ConstantStepSize) and dt0 is None:
            raise ValueError(f"{name}: diffrax.ConstantStepSize needs a constant step dt0")

    def optional(value):
        return None if value is None else jnp.asarray(value, dtype)

    return GaussianODE(
        field=field,
        y0=(mean0.astype(dtype), cov0.astype(dtype)),
        t1=t1,
        dt0=optional(dt0),
        blowup_trace=optional(blowup_trace),
        steady_tol=optional(steady_tol),
        psd_tol=optional(psd_tol),
        solver=diffrax.Tsit5() if solver is None else solver,
        controller=controller,
        saveat=requested_and_final_saveat(ts, None, dtype),
        max_steps=int(max_steps),
        user_events=events,
    )


def simulate_gaussian(
    field: AbstractGaussianClosed,
    mean0: Float[ArrayLike, " d"],
    cov0: Float[ArrayLike, "d d"],
    t1: Float[ArrayLike, ""],
    *,
    ts: Float[ArrayLike, " s"] | None = None,
    solver: diffrax.AbstractSolver | None = None,
    stepsize_controller: diffrax.AbstractStepSizeController | None = None,
    dt0: Float[ArrayLike, ""] | None = None,
    rtol: Float[ArrayLike, ""] = RTOL,
    atol: Float[ArrayLike, ""] = ATOL,
    max_steps: int = 4096,
    blowup_trace: Float[ArrayLike, ""] | None = BLOWUP_TRACE,
    steady_tol: Float[ArrayLike, ""] | None = None,
    psd_tol: Float[ArrayLike, ""] | None = 1e-6,
    events: Mapping[str, EventCondition] | None = None,
) -> GaussianSolution:
    """Solve ``d alpha/dt = B alpha + c``, ``d Sigma/dt = B Sigma + Sigma B^T`` from ``t = 0``.

    Stops at ``t1`` or at the first event (see the module docstring). Pure and jit/vmap-able;
    never raises at run time (failures are the solution's ``status``). Equivalent to
    ``ode = gaussian_ode(...); ode.solution(ode.solve())``; the arguments are those of
    :func:`gaussian_ode`.

    Returns:
        A :class:`GaussianSolution`.
    """
    ode = gaussian_ode(
        field,
        mean0,
        cov0,
        t1,
        ts=ts,
        solver=solver,
        stepsize_controller=stepsize_controller,
        dt0=dt0,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
        blowup_trace=blowup_trace,
        steady_tol=steady_tol,
        psd_tol=psd_tol,
        events=events,
    )
    return ode.solution(ode.solve())
