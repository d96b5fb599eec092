"""An explicit Runge-Kutta solver whose stages are unrolled: :class:`UnrolledERK`.

diffrax's Runge-Kutta solvers take their stages in a loop (one trace of the vector field,
whatever the number of stages). On a CPU, for the small states of jaxdyn's covariance ODEs,
that loop costs more than the vector field: each stage rewrites the whole stage buffer and
copies it for the tableau contraction, so a vmapped step costs as much per member as a
single solve (measured on the softmax covariance ODE at ``d = 5``, one core, a Tsit5 step
of 32 members in a group: 144 us in the stage loop, 40 us unrolled; Dopri8 560 and 103 us).
:class:`UnrolledERK` takes the same tableau's stages in straight-line code, which XLA fuses.
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jax.custom_batching import custom_vmap


@custom_vmap
def _any_member(flag):
    """``flag`` itself; under ``vmap``, whether it holds for any member (an unbatched scalar),
    so that a ``lax.cond`` on it stays a branch instead of evaluating both sides."""
    return flag


@_any_member.def_vmap
def _any_member_rule(axis_size, in_batched, flag):
    del axis_size
    [batched] = in_batched
    return (jnp.any(flag) if batched else flag), False


def _combination(coefficients, ks, base=None):
    """``base + sum_j c_j k_j`` over the non-zero ``c_j`` (``base`` ``None``: the sum alone;
    zeros when every ``c_j`` is zero, as the error row of a fixed-step tableau), in the
    stages' dtype."""
    out = base
    for c, k in zip(coefficients, ks, strict=False):
        if c == 0:
            continue
        term = jtu.tree_map(lambda kj, c=c: jnp.asarray(c, kj.dtype) * kj, k)
        out = term if out is None else jtu.tree_map(jnp.add, out, term)
    return jtu.tree_map(jnp.zeros_like, ks[0]) if out is None else out


class UnrolledERK(diffrax.AbstractAdaptiveSolver, diffrax.AbstractWrappedSolver):
    """An explicit Runge-Kutta solver of diffrax (``Tsit5``, ``Dopri5``, ``Dopri8``, ``Bosh3``,
    ...) with its stages unrolled: the same Butcher tableau, error estimate and dense output
    (the wrapped solver's interpolation of the same stage increments), for ODE terms. A
    fixed-step tableau (a zero error row, as :class:`jaxdyn.meanfield.RK4`) works with
    ``diffrax.ConstantStepSize``.

    Use it like the wrapped solver, e.g. ``diffrax.diffeqsolve(term, UnrolledERK(
    diffrax.Tsit5()), ...)``; :func:`jaxdyn.meanfield.simulate_gaussian` and the solves built
    on it use ``UnrolledERK(Tsit5())`` by default. The solution agrees with the wrapped
    solver's to rounding (the stage sums are taken over the non-zero tableau entries, in
    another order); the step sizes are the same unless rounding flips an accept/reject
    decision. The price is compilation: the vector field is traced once per stage instead of
    once, which for small fields (covariance ODEs) compiles about as fast, and for large ones
    (attention over many tokens, a field selecting among several) makes the program larger
    while saving little, since there the vector field dominates a step.

    The first-same-as-last stage is kept across steps as diffrax keeps it; after a jump of the
    step-size controller (``made_jump``) it is evaluated again, in a branch taken only when a
    member jumped.

    Attributes:
        solver: the wrapped explicit Runge-Kutta solver (its ``tableau`` is used).
    """

    solver: diffrax.AbstractSolver

    def __check_init__(self):
        tableau = getattr(self.solver, "tableau", None)
        if not isinstance(tableau, diffrax.ButcherTableau):
            raise ValueError(
                f"UnrolledERK wraps an explicit Runge-Kutta solver with one Butcher tableau, "
                f"got {type(self.solver).__name__}"
            )
        if tableau.implicit:
            raise ValueError(f"UnrolledERK: {type(self.solver).__name__}'s tableau is not explicit")

    # The wrapped solver's properties, as diffrax's own wrapped solvers (HalfSolver) give them.
    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # pyright: ignore
        return self.solver.interpolation_cls

    @property
    def term_compatible_contr_kwargs(self):
        return self.solver.term_compatible_contr_kwargs

    def order(self, terms):
        return self.solver.order(terms)

    def strong_order(self, terms):
        return self.solver.strong_order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

    def init(self, terms, t0, t1, y0, args):
        """The vector field at the start for a first-same-as-last tableau (``None``
        otherwise)."""
        del t1
        if self.solver.tableau.fsal:
            return terms.vf(t0, y0, args)
        return None

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        tableau = self.solver.tableau
        dt = t1 - t0
        control = terms.contr(t0, t1)
        if tableau.fsal:
            f0 = jax.lax.cond(
                _any_member(jnp.asarray(made_jump, bool)),
                lambda: terms.vf(t0, y0, args),
                lambda: solver_state,
            )
        else:
            f0 = terms.vf(t0, y0, args)
        ks = [terms.prod(f0, control)]
        yi, fi = y0, f0
        for c_i, a_i in zip(tableau.c, tableau.a_lower, strict=True):
            yi = _combination(a_i, ks, base=y0)
            # diffrax's stage times: exactly t1 where c = 1.
            ti = t1 if c_i == 1 else t0 + jnp.asarray(c_i, jnp.result_type(dt)) * dt
            fi = terms.vf(ti, yi, args)
            ks.append(terms.prod(fi, control))
        y1 = yi if tableau.ssal else _combination(tableau.b_sol, ks, base=y0)
        y_error = _combination(tableau.b_error, ks)
        dense_info = dict(y0=y0, y1=y1, k=jtu.tree_map(lambda *k: jnp.stack(k), *ks))
        new_state = fi if tableau.fsal else None
        return y1, y_error, dense_info, new_state, diffrax.RESULTS.successful


def default_solver() -> UnrolledERK:
    """The solver of :func:`jaxdyn.meanfield.simulate_gaussian` when none is given: Tsit5,
    unrolled."""
    return UnrolledERK(diffrax.Tsit5())
