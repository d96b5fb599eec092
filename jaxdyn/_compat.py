"""The one adapter module: every use of another library's internals, organised by library.

Each entry says what it relies on and which public API would replace it; ``pyproject.toml``
bounds each library to the minor versions tested. Nothing else in jaxdyn imports a private
name of equinox, diffrax or jax (``tests/test_public_api.py`` greps for them).

equinox
  - :func:`enumeration_items`: an Enumeration's items by name (``Enumeration._name_to_item``).
  - :func:`enumeration_of`: the Enumeration an item belongs to (``EnumerationItem._enumeration``).
"""

from __future__ import annotations

import jax
import jax.tree_util as jtu


# -- equinox ---------------------------------------------------------------------------------
def enumeration_items(enumeration: type) -> dict:
    """``{name: item}`` of an equinox ``Enumeration`` (inherited items included), in code order.

    Relies on ``Enumeration._name_to_item`` (equinox 0.13). equinox has no public way to list
    an Enumeration's items; iteration over the class (``for item in Status``) or a public
    ``names()`` would replace it. Everything else jaxdyn does with items is public: the code is
    the item's one PyTree leaf, the message is ``enumeration[item]``.
    """
    return dict(enumeration._name_to_item)


def enumeration_of(item) -> type:
    """The equinox ``Enumeration`` class an item belongs to (``EnumerationItem._enumeration``,
    equinox 0.13), so a result can print an item by its public name. A public accessor on
    ``EnumerationItem`` would replace it."""
    return item._enumeration


# --------------------------------------------------------------------------------------------
# The sweep engine (jaxdyn/sweep): what it relies on beyond the public APIs.
#
# A segmented diffrax solve (jaxdyn/sweep/_diffeq.py) must take bitwise the steps of one
# uninterrupted ``diffrax.diffeqsolve``. diffrax's public API continues a solve from a saved
# ``solver_state``, ``controller_state`` and ``made_jump`` (``SaveAt(solver_state=True, ...)``),
# but three things the loop does are not exposed, so they are restated from diffrax 0.7.2
# (``diffrax/_integrate.py``, ``diffrax/_term.py``) with public APIs only:
# 1. the clip of ``tnext`` to ``t1`` within 100 ULP (:func:`clip_floor`, :func:`clip_to_end`);
# 2. the direction-of-time wrapper of the terms, ``WrapTerm`` (:func:`direction_terms`);
# 3. the pre-loop set-up of ``diffeqsolve`` (times in the solve's dtype and ``y0`` promoted
#    to it, ``controller.init`` with ``tnext = min(tnext, t1)``, ``solver.init``, the ``t0``
#    saves), in ``jaxdyn/sweep/_diffeq.py: start_state`` (public solver/controller methods).
# tests/test_sweep_segmented.py compares segmented and uninterrupted solves bitwise and fails
# when a new diffrax changes any of them. A diffrax API that returned the pre-loop state and
# the loop's position (tprev, tnext, y) would replace all three.
# --------------------------------------------------------------------------------------------


def prev_float(x):
    """The floating point number before ``x``: ``equinox.internal.prevbefore``, which diffrax
    uses for its ``t1_clip_floor``, written with ``jnp.nextafter`` (no gradient: the floor only
    enters comparisons)."""
    import jax.numpy as jnp

    x = jax.lax.stop_gradient(x)
    return jnp.where(x == 0, -jnp.finfo(x.dtype).tiny, jnp.nextafter(x, -jnp.inf))


def clip_floor(t1):
    """``t1`` minus 100 ULP: diffrax 0.7's ``t1_clip_floor`` (``diffeqsolve``), the same 100
    steps in a loop (unrolled, they are a hundred operations in every compiled segment)."""
    return jax.lax.fori_loop(0, 100, lambda _, t: prev_float(t), t1)


def clip_to_end(tprev, tnext, t1, t1_floor, keep_step):
    """diffrax 0.7's ``_integrate._clip_to_end``: a ``tnext`` within 100 ULP of ``t1`` is
    ``t1`` (or half-way there after a rejected step)."""
    import jax.numpy as jnp

    clip = tnext > t1_floor
    tclip = jnp.where(keep_step, t1, tprev + 0.5 * (t1 - tprev))
    return jnp.where(clip, tclip, tnext)


def _direction_term_class():
    import diffrax
    import jax.numpy as jnp

    class DirectionTerm(diffrax.AbstractTerm):
        """diffrax 0.7's ``_term.WrapTerm``: ``term`` in normalised time ``t * direction``,
        which ``diffeqsolve`` hands to the controller's and solver's ``init``. Written with
        the public ``AbstractTerm`` interface and the same operations, so that the solver state
        before the first step has the bits diffeqsolve's own has."""

        term: diffrax.AbstractTerm
        direction: jax.Array

        def vf(self, t, y, args):
            return self.term.vf(t * self.direction, y, args)

        def contr(self, t0, t1, **kwargs):
            _t0 = jnp.where(self.direction == 1, t0, -t1)
            _t1 = jnp.where(self.direction == 1, t1, -t0)
            return jax.tree.map(lambda c: self.direction * c, self.term.contr(_t0, _t1, **kwargs))

        def prod(self, vf, control):
            with jax.numpy_dtype_promotion("standard"):
                return self.term.prod(vf, control)

        def vf_prod(self, t, y, args, control):
            return self.term.vf_prod(t * self.direction, y, args, control)

        def is_vf_expensive(self, t0, t1, y, args):
            _t0 = jnp.where(self.direction == 1, t0, -t1)
            _t1 = jnp.where(self.direction == 1, t1, -t0)
            return self.term.is_vf_expensive(_t0, _t1, y, args)

    return DirectionTerm


_DIRECTION_TERM = None


def direction_terms(terms, direction):
    """Every term of ``terms`` in normalised time, as ``diffeqsolve`` wraps them (one
    ``WrapTerm`` per non-``MultiTerm`` term)."""
    import diffrax

    global _DIRECTION_TERM
    if _DIRECTION_TERM is None:
        _DIRECTION_TERM = _direction_term_class()
    return jtu.tree_map(
        lambda term: _DIRECTION_TERM(term, direction),
        terms,
        is_leaf=lambda x: (
            isinstance(x, diffrax.AbstractTerm) and not isinstance(x, diffrax.MultiTerm)
        ),
    )


def own_final_save(sub, ts, ys, event_fired, t_end, y_end, args):
    """A ``SubSaveAt(t1=True)``'s last slot as the solve's own state at the time it reached
    when no event fired: ``(t_end, sub.fn(t_end, y_end, args))`` instead of diffrax's.

    diffrax 0.7.2 runs an event's root find for every member of a vmapped batch as soon as
    one member has an event, and returns, for a member without one, an interpolation at the
    end of its last step rather than its state there: the bits differ from the same member
    solved in a batch without an event. Minimal reproduction (tests/test_sweep_adjoint.py,
    ``test_a_vmapped_solve_with_an_event_in_its_batch_returns_each_members_own_final_state``,
    fails without this correction)::

        solve = lambda s: simulate_gaussian(Softmax(I, I, s * I), zeros(2), cov0, 50.0,
                                            dt0=2.0, max_steps=40, blowup_trace=10.0)
        jax.vmap(solve)(jnp.array([3.0, -1.0]))[1]   # member 1: no event, out of steps
        jax.vmap(solve)(jnp.array([-1.0, -1.0]))[1]  # its final covariance, 1 ULP apart

    ``y_end`` and ``t_end`` come from :func:`jaxdyn.sweep._diffeq.tracked`'s controller
    state (the loop's own ``tprev`` and ``y``). A diffrax that saved the loop's state for
    members without an event would make this unnecessary.
    """
    import jax.numpy as jnp

    own = jax.tree.map(lambda y: y[None], sub.fn(t_end, y_end, args))
    ts = ts.at[-1].set(jnp.where(event_fired, ts[-1], t_end))
    ys = jax.tree.map(lambda s, o: s.at[-1:].set(jnp.where(event_fired, s[-1:], o)), ys, own)
    return ts, ys


def backends_are_initialized() -> bool:
    """Whether JAX has started its backends (after which XLA flags and the CPU device count
    no longer apply). Relies on ``jax._src.xla_bridge.backends_are_initialized`` (jax 0.10);
    jax has no public equivalent."""
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()
