"""Population gradient flow ``d theta / dt = -grad L(theta)`` (focus_dilution.md, "Population
loss") solved by diffrax with an adaptive step and a log-spaced save grid, since the stages
span decades of time (condensation at t ~ 10, focus at t ~ 100, new directions at t ~ 500).
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optimistix as optx

from jaxdyn._printing import AbstractResult

from .._custom_types import Array, ArrayLike, Float, Int
from .._status import Status, mark_nonfinite
from ..sweep import DiffeqProblem
from ._markov import MarkovChain
from ._model import OneLayerTransformer, _population_loss


class FlowSolution(AbstractResult):
    """Saved trajectory of a population flow.

    ``ts``: save times; ``models``: the parameters at each save time (leading time axis on every
    leaf); ``status``: a :class:`jaxdyn.Status`; ``num_steps``: accepted + rejected
    solver steps.
    """

    ts: Float[Array, " T"]
    models: OneLayerTransformer
    status: Status
    num_steps: Int[Array, ""]


def log_time_grid(t1: float, num: int, t_first: float = 0.05) -> np.ndarray:
    """``0`` followed by ``num - 1`` log-spaced times from ``t_first`` to ``t1``."""
    if not t1 > t_first > 0:
        raise ValueError(f"need t1 > t_first > 0, got t1={t1}, t_first={t_first}")
    if num < 3:
        raise ValueError(f"num must be at least 3, got {num}")
    return np.concatenate([[0.0], np.geomspace(t_first, t1, num - 1)])


def gradient_field(t, model: OneLayerTransformer, args) -> OneLayerTransformer:
    """The vector field ``-grad L(theta)`` (args = ``(pi, P)``)."""
    pi, P = args
    g = jax.grad(_population_loss)(model, pi, P)
    return jax.tree_util.tree_map(jnp.negative, g)


def stiff_solver() -> diffrax.AbstractSolver:
    """Kvaerno5 (L-stable ESDIRK 5(4)) for the stiff late stages of text flows, where Tsit5's
    steps are limited by stability rather than accuracy; its stage equations are solved by
    Newton's method with matrix-free GMRES on Hessian-vector products. Pass it as
    ``population_flow(..., solver=stiff_solver())`` (the default ``diffrax.Tsit5()`` is the
    cheapest per step while the flow is non-stiff)."""
    # Kvaerno5's default (a chord method with a dense LU) re-forms the full Hessian by jacfwd
    # at every stage: ~600 gradients for a 640-parameter text model, 60x slower than
    # Newton-GMRES there (focus_dilution.md, "[open] modelling choices"). I - h a J is well
    # conditioned for the step sizes taken, so unpreconditioned GMRES converges quickly. The
    # Newton tolerances follow the step controller's.
    gmres = lx.GMRES(rtol=1e-8, atol=1e-12, restart=40, stagnation_iters=40, max_steps=400)
    newton = diffrax.with_stepsize_controller_tols(optx.Newton)(linear_solver=gmres)
    return diffrax.Kvaerno5(root_finder=newton)


def flow_problem(
    model0: OneLayerTransformer,
    chain: MarkovChain,
    ts: Float[ArrayLike, " T"],
    *,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    max_steps: int = 100_000,
    solver: diffrax.AbstractSolver | None = None,
    adjoint: diffrax.AbstractAdjoint | None = None,
) -> DiffeqProblem:
    """The population flow of :func:`population_flow` as a :class:`jaxdyn.sweep.DiffeqProblem`:
    ``d theta/dt = -grad L(theta)`` from ``model0`` over ``[ts[0], ts[-1]]``, saved at ``ts``,
    with a PID step-size controller (``solver`` default ``diffrax.Tsit5()``) and ``adjoint``
    (default ``diffrax.RecursiveCheckpointAdjoint()``) for gradients through the solve.

    ``flow_problem(...).solve()`` is the flow's uninterrupted solve (``throw=False``); inside
    :func:`jaxdyn.sweep.run_sweep` the engine continues it in segments, with the same solution
    (:func:`analyse_flow`'s main flow is solved this way when its ``t1`` is given).
    :func:`flow_solution` turns the ``diffrax.Solution`` into a :class:`FlowSolution`.
    """
    ts = jnp.asarray(ts)
    return DiffeqProblem(
        terms=diffrax.ODETerm(gradient_field),
        solver=diffrax.Tsit5() if solver is None else solver,
        t0=ts[0],
        t1=ts[-1],
        dt0=None,
        y0=model0,
        args=(chain.pi, chain.P),
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=int(max_steps),
        adjoint=diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint,
    )


def flow_solution(sol: diffrax.Solution) -> FlowSolution:
    """The :class:`FlowSolution` of a solve of :func:`flow_problem` (status ``nonfinite`` when
    a saved state has a NaN)."""
    return FlowSolution(
        ts=sol.ts,
        models=sol.ys,
        status=mark_nonfinite(Status.promote(sol.result), sol.ys),
        num_steps=sol.stats["num_steps"],
    )


@eqx.filter_jit
def population_flow(
    model0: OneLayerTransformer,
    chain: MarkovChain,
    ts: Float[ArrayLike, " T"],
    *,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    max_steps: int = 100_000,
    throw: bool = False,
    adjoint: diffrax.AbstractAdjoint | None = None,
    solver: diffrax.AbstractSolver | None = None,
) -> FlowSolution:
    """Solve ``d theta/dt = -grad L(theta)`` on the :class:`MarkovChain` ``chain`` from
    ``model0`` over ``[ts[0], ts[-1]]``.

    ``solver``: a diffrax solver (default ``diffrax.Tsit5()``; :func:`stiff_solver` gives the
    implicit Kvaerno5 set up for stiff flows) with a PID step-size controller;
    ``rtol``/``atol`` control accuracy. With
    ``throw=False`` (the default, as inside sweeps) solver failures become ``status`` codes;
    a NaN in the saved states gives ``Status.nonfinite``. Differentiable through the solve
    (``RecursiveCheckpointAdjoint`` by default). The problem is :func:`flow_problem`'s, solved
    by one ``diffrax.diffeqsolve`` here (never continued in segments by a sweep engine).
    """
    problem = flow_problem(
        model0, chain, ts, rtol=rtol, atol=atol, max_steps=max_steps, solver=solver
    )
    sol = diffrax.diffeqsolve(
        problem.terms,
        problem.solver,
        t0=problem.t0,
        t1=problem.t1,
        dt0=None,
        y0=problem.y0,
        args=problem.args,
        saveat=problem.saveat,
        stepsize_controller=problem.stepsize_controller,
        max_steps=problem.max_steps,
        throw=throw,
        adjoint=adjoint if adjoint is not None else diffrax.RecursiveCheckpointAdjoint(),
    )
    return flow_solution(sol)
