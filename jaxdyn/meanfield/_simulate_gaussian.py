"""Simulate the closed Gaussian ODE of the mean-field Transformer PDE ("Gaussian closure").

For a Gaussian-closed field the measure ``N(alpha, Sigma)`` stays Gaussian, with
``d alpha/dt = B alpha + c`` and ``d Sigma/dt = B Sigma + Sigma B^T`` (``Gamma(x) = B x + c``).
:func:`simulate_gaussian` solves it with diffrax (adaptive Tsit5 by default, its stages
unrolled: :class:`jaxdyn.UnrolledERK`; any diffrax solver and step-size controller object on
request; ``throw=False``) and stops at the first event,
each a real-valued condition of the state that is negative before the event and crosses zero
at it:

- blow-up, ``tr Sigma / blowup_trace - 1`` (status ``Status.blowup``); the blow-up time is then
  extrapolated from the pole ``tr Sigma ~ c / (t* - t)``:
  ``t* ~ t_event + tr Sigma / (d tr Sigma/dt)``;
- steady state, ``1 - (|dSigma/dt|_F^2 + |dalpha/dt|^2)^{1/2} / steady_tol`` (the paper's
  ``tol_low``; status ``Status.steady_state``);
- loss of definiteness, ``lambda_min(Sigma) < -psd_tol tr Sigma`` (``Status.not_psd``),
  decided by the smallest LDL^T pivot of ``Sigma + psd_tol tr(Sigma) I`` (:func:`smallest_pivot`:
  it vanishes where that eigenvalue crosses ``-psd_tol tr Sigma``, at a fraction of an
  ``eigvalsh``'s cost per step). The exact flow is a congruence of ``Sigma_0`` and never loses
  definiteness, so this flags a genuine failure only when ``psd_tol`` is well above the
  solver's relative error;
- user events ``condition(t, mean, cov)`` (status ``Status.event_occurred``, and
  ``GaussianSolution.events[name]`` says which one fired).

All conditions are merged into one (their maximum), whose upward crossing is located by
bisection on the step's interpolant; the event time is differentiable (implicit function
theorem). The problem is built first (:func:`gaussian_ode`) and solved separately
(:meth:`GaussianODE.solve`, :meth:`GaussianODE.solution`), so a sweep can solve it in segments.

**Shared form.** Inside ``jaxdyn.sweep.run_sweep`` a problem whose field is softmax or L2
attention with array weights (and no user event) is solved in a shared form
(:meth:`GaussianODE.shared_form`): the field as one class for both kinds (scores
``y^T A x - y^T M y``; softmax, marked by a static flag, in :class:`Softmax`'s own operations,
L2 as ``QuadraticKeySoftmax``'s average) with ``A``, ``M``, ``V`` computed once, and the
problem padded with zero blocks to dimension 2 or 5 when ``d <= 5`` (larger problems are not
padded: padding costs work in every step, measured only for d <= 5). The zero blocks stay exactly
zero, the step-size controller's RMS norm counts only the real components, and the padded
directions are kept out of the definiteness check, so the padded solve takes the steps of the
unpadded one up to round-off: the solutions agree to the solver's tolerance, and unpadded
(``d`` = 2, 5 or above 5) the shared form is bitwise the problem itself
(tests/test_sweep_shared.py). Then one compiled start and segment program serves the softmax
members of d = 3, 4 and 5, and one the L2 members, whatever the member function (on the
rank figure's panels, d = 3, 4, 5, half the compilation and a third more warm time).
``QuadraticKeySoftmax`` problems (e.g. ``QuadraticKeySoftmax.softmax_or_l2``, softmax and L2
in one program) are solved as written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import diffrax
import equinox as eqx
import jax.numpy as jnp
import optimistix as optx
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxdyn._printing import AbstractResult
from jaxdyn._solvers import default_solver
from jaxdyn._status import Status, mark_nonfinite
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
from .fields._heads import L2, Softmax, quadratic_key_average
from .fields._quadratic import QuadraticKeySoftmax

EventCondition = Callable[[Float[Array, ""], Float[Array, " d"], Float[Array, "d d"]], Array]

# The defaults of every Gaussian solve (simulate_gaussian, gaussian_ode, solver_blowup_time,
# solver_final_covariance): one threshold and one tolerance pair, so one problem has one t*.
BLOWUP_TRACE = 1e6
RTOL = 1e-8
ATOL = 1e-10

# Built-in conditions and the status each one sets when it fires.
_BUILTIN_STATUS = {"blowup": Status.blowup, "steady": Status.steady_state, "psd": Status.not_psd}


def smallest_pivot(matrix: Float[Array, "d d"]) -> Float[Array, ""]:
    """The smallest pivot of the symmetric ``matrix``'s LDL^T factorisation without pivoting:
    positive exactly when the matrix is positive definite, and zero where a path of matrices
    that starts positive definite first becomes singular (the determinant, the pivots'
    product, vanishes there while the leading minors before it stay positive), which is where
    its smallest eigenvalue crosses zero. About ``d^3 / 6`` multiplications, unrolled: the
    definiteness event of a small covariance at a fraction of an ``eigvalsh`` per step.

    After a pivot that is not positive the later ones are not pivots of anything; they are
    kept finite (a non-positive pivot divides as the smallest positive number) and the
    minimum is already that pivot or below."""
    d = matrix.shape[0]
    tiny = jnp.finfo(matrix.dtype).tiny
    bound = 1 / jnp.sqrt(jnp.asarray(tiny, matrix.dtype))
    lower = [[None] * d for _ in range(d)]
    pivots = []
    for j in range(d):
        pivot = matrix[j, j] - sum((lower[j][k] ** 2 * pivots[k] for k in range(j)), 0.0)
        pivots.append(pivot)
        safe = jnp.where(pivot > 0, pivot, tiny)
        for i in range(j + 1, d):
            off = matrix[i, j] - sum((lower[i][k] * lower[j][k] * pivots[k] for k in range(j)), 0.0)
            lower[i][j] = jnp.clip(off / safe, -bound, bound)
    return jnp.min(jnp.stack(pivots))


class GaussianSolution(AbstractResult):
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
        size: in a padded problem (:meth:`shared_form`), the real dimension (``None``: not
            padded).
        adjoint: how the solve is differentiated (a ``diffrax`` adjoint).
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
    size: Int[Array, ""] | None = None
    adjoint: diffrax.AbstractAdjoint = diffrax.RecursiveCheckpointAdjoint()

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
            sym = 0.5 * (cov + cov.T)
            if self.size is not None:  # padded directions: eigenvalues above every real one
                padded = jnp.arange(cov.shape[0]) >= self.size
                sym = sym + jnp.diag(jnp.where(padded, 1.0 + jnp.abs(jnp.trace(cov)), 0.0))
            scale = self.psd_tol * jnp.maximum(jnp.trace(cov), 1e-300)
            shifted = sym + scale * jnp.eye(cov.shape[0], dtype=cov.dtype)
            out["psd"] = -smallest_pivot(shifted) / scale
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
            adjoint=self.adjoint,
        )

    def diffeq_problem(self) -> DiffeqProblem:
        """:meth:`diffeqsolve_arguments` as a :class:`jaxdyn.sweep.DiffeqProblem` (a
        :class:`jaxdyn.sweep.DiffeqMember` then solves it in segments)."""
        return DiffeqProblem(**self.diffeqsolve_arguments())

    def solve(self) -> diffrax.Solution:
        """One uninterrupted ``diffeqsolve`` of :meth:`diffeqsolve_arguments` (``throw=False``),
        through :meth:`jaxdyn.sweep.DiffeqProblem.solve`: inside ``run_sweep`` the engine
        continues it in segments, solving :meth:`shared_form` where there is one (the same
        solution to the solver's tolerance)."""
        shared = None
        if self._shareable():
            shared = lambda: (self.shared_form().diffeq_problem(), self.restrict)  # noqa: E731
        return self.diffeq_problem().solve(shared=shared)

    def _shareable(self) -> bool:
        controller = self.controller
        adaptive = isinstance(controller, diffrax.PIDController)
        return (
            self.size is None
            and not self.user_events
            and _quadratic_key(self.field) is not None
            and (adaptive or isinstance(controller, diffrax.ConstantStepSize))
            and (not adaptive or controller.norm is optx.rms_norm)
        )

    def shared_form(self) -> GaussianODE:
        """The same problem in the form that softmax (or L2) problems of every dimension up
        to a padded size share (module docstring): the field's matrices computed once, every
        array padded with zero blocks to :func:`shared_size`, the RMS norm of the step-size
        controller over the real components only. :meth:`restrict` maps its solution back."""
        if not self._shareable():
            raise ValueError(
                "shared_form: only softmax or L2 fields with array "
                "weights, no user events, PID or constant steps"
            )
        mean, cov = self.y0
        d, dtype = cov.shape[0], cov.dtype
        size = shared_size(d)

        def pad(x):
            return jnp.zeros((size,) * x.ndim, x.dtype).at[(slice(0, d),) * x.ndim].set(x)

        A, M, V, softmax = _quadratic_key(self.field)
        controller = self.controller
        if isinstance(controller, diffrax.PIDController):
            count = jnp.asarray(d + d * d, dtype)  # the real components of (mean, cov)
            controller = eqx.tree_at(lambda c: c.norm, controller, _RealRMSNorm(count))
        requested, final = self.saveat.subs
        saveat = diffrax.SaveAt(
            subs=[diffrax.SubSaveAt(t1=requested.t1, ts=requested.ts, fn=_state), final]
        )
        return GaussianODE(
            field=_SharedHead(pad(A), None if M is None else pad(M), pad(V), softmax),
            y0=(pad(mean), pad(cov)),
            t1=self.t1,
            dt0=self.dt0,
            blowup_trace=self.blowup_trace,
            steady_tol=self.steady_tol,
            psd_tol=self.psd_tol,
            solver=self.solver,
            controller=controller,
            saveat=saveat,
            max_steps=self.max_steps,
            user_events={},
            size=jnp.asarray(d, jnp.int32),
            adjoint=self.adjoint,
        )

    def restrict(self, sol: diffrax.Solution) -> diffrax.Solution:
        """The solution of :meth:`shared_form` as this problem's (the padding dropped)."""
        d = self.y0[1].shape[0]
        (means, covs), (final_means, final_covs) = sol.ys
        ys = [(means[..., :d], covs[..., :d, :d]), (final_means[..., :d], final_covs[..., :d, :d])]
        return eqx.tree_at(lambda s: s.ys, sol, ys)

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


_SHARED_SIZES = (2, 5)


def shared_size(d: int) -> int:
    """The dimension of :meth:`GaussianODE.shared_form` (module docstring): 2 or 5 for
    ``d <= 5``, ``d`` itself above."""
    for size in _SHARED_SIZES:
        if d <= size:
            return size
    return d


def _state(t, y, args):
    return y


class _RealRMSNorm(eqx.Module):
    """diffrax's default RMS norm over ``count`` components (of a padded state, whose padding
    is zero)."""

    count: Float[Array, ""]

    def __call__(self, x):
        return optx.two_norm(x) / jnp.sqrt(self.count)


class _SharedHead(AbstractGaussianClosed):
    """The field of :meth:`GaussianODE.shared_form`: scores ``y^T A x - y^T M y``
    (:class:`QuadraticKeySoftmax`); softmax fields (``softmax``, a static flag: ``M`` is
    ``None``) in :class:`Softmax`'s own operations. The flag is static so that a softmax
    problem never computes the quadratic-key average: one compiled program per kind."""

    A: Float[Array, "d d"]
    M: Float[Array, "d d"] | None
    V: Float[Array, "d d"]
    softmax: bool = eqx.field(static=True)

    def velocity(self, x, tokens, *, t=0.0):
        M = jnp.zeros_like(self.A) if self.M is None else self.M
        return QuadraticKeySoftmax(self.A, M, self.V).velocity(x, tokens, t=t)

    def affine_velocity(self, mean, cov, *, t=0.0):
        if self.softmax:
            return self.V @ cov @ self.A, self.V @ mean
        return quadratic_key_average(self.A, self.M, self.V, mean, cov)


def _quadratic_key(field) -> tuple[Array, Array | None, Array, bool] | None:
    """``(A, M, V, softmax)`` of a softmax or L2 field with array weights, in the operations
    of the field's own ``affine_velocity``; ``None`` otherwise."""
    if type(field) not in (Softmax, L2) or any(callable(w) for w in (field.Q, field.K, field.V)):
        return None
    if type(field) is Softmax:
        return field.A(), None, field.V, True
    return 2.0 * field.A(), field.K.T @ field.K, field.V, False


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
    adjoint: diffrax.AbstractAdjoint | None = None,
) -> GaussianODE:
    """Validate the inputs and build the problem that :func:`simulate_gaussian` solves.

    Args:
        field: a Gaussian-closed velocity field (``field.gaussian_rhs`` is the ODE).
        mean0: initial mean ``alpha_0``.
        cov0: initial covariance ``Sigma_0`` (symmetric PSD).
        t1: final time.
        ts: save times (default: only ``t1``).
        solver: a diffrax solver (default ``jaxdyn.UnrolledERK(diffrax.Tsit5())``: Tsit5 with
            its stages unrolled, the same method at a fraction of the cost per step).
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
        psd_tol: loss-of-definiteness threshold (``None``: no check; saves an LDL^T
            factorisation of Sigma per step).
        events: named user events, ``condition(t, mean, cov)`` negative before the event and
            crossing zero at it (e.g. ``lambda t, m, c: 0.5 - jnp.linalg.eigvalsh(c)[0]``).
        adjoint: how gradients through the solve are computed (a diffrax adjoint; default
            ``diffrax.RecursiveCheckpointAdjoint()``). ``diffrax.BacksolveAdjoint()`` takes no
            event: pass ``blowup_trace=None``, ``psd_tol=None`` (and no ``steady_tol`` or
            ``events``).

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
        solver=default_solver() if solver is None else solver,
        controller=controller,
        saveat=requested_and_final_saveat(ts, None, dtype),
        max_steps=int(max_steps),
        user_events=events,
        adjoint=diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint,
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
    adjoint: diffrax.AbstractAdjoint | None = None,
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
        adjoint=adjoint,
    )
    return ode.solution(ode.solve())
