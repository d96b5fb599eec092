"""The state of a segmented diffrax solve before its first step.

``DiffeqMember.init(params, key, 0)`` builds the state from which the first segment starts
without solving anything: the sweep engine's ``init`` program is then cheap to compile, and
every step of every member is taken by the one segment program. The state is what
``diffrax.diffeqsolve`` computes before its loop (diffrax 0.7, ``_integrate.py``): times in
the solve's dtype and normalised by the direction of integration, the step-size
controller's first step and state (``controller.init``) and the solver's state
(``solver.init``) on direction-wrapped terms, the ``t0`` saves. Continuing from it takes
bitwise the steps of the uninterrupted solve (tests/test_sweep_segmented.py).
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from diffrax._term import WrapTerm  # diffeqsolve's own wrapper for the direction of time

from ._continuation import tracked
from ._diffeq_state import DiffeqState, direction_of, subsaves


def _time_dtype(problem):
    timelikes = [problem.t0, problem.t1, problem.dt0]
    timelikes += [s.ts for s in subsaves(problem.saveat)]
    with jax.numpy_dtype_promotion("standard"):
        dtype = jnp.result_type(*[x for x in timelikes if x is not None])
    return dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.result_type(float)


def _wrap_terms(terms, direction):
    return jtu.tree_map(
        lambda term: WrapTerm(term, direction),
        terms,
        is_leaf=lambda x: (
            isinstance(x, diffrax.AbstractTerm) and not isinstance(x, diffrax.MultiTerm)
        ),
    )


def _empty_saves(problem, subs, t0, y0):
    """Each sub-save's ``(ts, ys)`` buffers before the first step: the ``t0`` slot filled
    (``fn(t0, y0, args)``), every other slot ``inf`` as diffrax allocates them."""
    saved = []
    for sub in subs:
        size = int(sub.t0) + (0 if sub.ts is None else sub.ts.shape[0]) + int(sub.t1)
        y_shape = jax.eval_shape(sub.fn, t0, y0, problem.args)
        ts = jnp.full(size, jnp.inf, t0.dtype)
        ys = jax.tree.map(lambda s, n=size: jnp.full((n,) + s.shape, jnp.inf, s.dtype), y_shape)
        if sub.t0:
            value = sub.fn(t0, y0, problem.args)
            ts = ts.at[0].set(t0)
            ys = jax.tree.map(lambda b, v: b.at[0].set(v), ys, value)
        saved.append((ts, ys))
    return saved


def start_state(problem) -> DiffeqState:
    """The :class:`DiffeqState` of ``problem`` before its first step (module docstring)."""
    direction = direction_of(problem)
    dtype = _time_dtype(problem)
    t0 = jnp.asarray(problem.t0, dtype)
    t0n, t1n = t0 * direction, jnp.asarray(problem.t1, dtype) * direction
    dt0n = None if problem.dt0 is None else jnp.asarray(problem.dt0, dtype) * direction

    def promote(y):
        with jax.numpy_dtype_promotion("standard"):
            return jnp.asarray(y, jnp.result_type(y, dtype))

    y0 = jtu.tree_map(promote, problem.y0)
    terms = _wrap_terms(problem.terms, direction)
    solver = problem.solver
    controller = tracked(problem.stepsize_controller, problem.t1, problem.max_steps)
    controller = controller.wrap(direction)
    tnext, track = controller.init(
        terms, t0n, t1n, y0, dt0n, problem.args, solver.func, solver.error_order(terms)
    )
    tnext = jnp.minimum(tnext, t1n)
    event = problem.event
    event_mask = (
        None
        if event is None
        else jtu.tree_map(lambda _: jnp.asarray(False), event.cond_fn, is_leaf=callable)
    )
    zero = jnp.asarray(0, jnp.int32)
    return DiffeqState(
        t=t0n,
        tnext=tnext,
        y=y0,
        solver_state=solver.init(terms, t0n, tnext, y0, problem.args),
        controller_state=track.inner,
        made_jump=jnp.asarray(False),
        result=jnp.asarray(diffrax.RESULTS.successful._value, jnp.int32),
        num_steps=zero,
        num_accepted_steps=zero,
        num_rejected_steps=zero,
        saved=_empty_saves(problem, subsaves(problem.saveat), t0, y0),
        event_mask=event_mask,
        done=jnp.asarray(False),
    )
