"""Particle-side tools: a classical RK4 for diffrax, tokens on the sphere, cluster phase diagrams.

transformer_pde.md, "Particle pictures" and issue 5's beta (temperature) sweep. The token-
clustering literature (Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective
on Transformers") studies tokens normalised to the unit sphere (a layer norm), moving by

    dx_i/dt = P_{x_i}^perp ( sum_j softmax_j(beta <x_i, x_j>) x_j ),   P_x^perp = I - x x^T,

i.e. softmax attention with ``A = beta I``, ``V = I`` followed by the projection on the tangent
space of the sphere. :class:`SphereProjected` wraps any attention Module that way, so the
simulators of this package run it unchanged; :class:`SphereSoftmax` is the same velocity
evaluated with the known score bound ``beta`` in place of a row maximum (the fast path of
``sphere_softmax(beta, d, bounded=True)`` for sweeps). [open, our choice] The phase diagram counts
clusters of these spherical dynamics: in R^d without normalisation, softmax with ``A = beta I``
blows up in finite time (transformer_pde.md, Closed forms) and there is nothing to count.
"""

from __future__ import annotations

from typing import ClassVar

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxdyn._status import Status

_rk4_tableau = diffrax.ButcherTableau(
    a_lower=(np.array([0.5]), np.array([0.0, 0.5]), np.array([0.0, 0.0, 1.0])),
    b_sol=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
    b_error=np.zeros(4),  # no embedded method: fixed steps only
    c=np.array([0.5, 0.5, 1.0]),
)


class RK4(diffrax.AbstractERK):
    """The classical 4th-order Runge-Kutta method (4 stages, fixed steps only: no error estimate).

    diffrax ships no classical RK4. With ``diffrax.ConstantStepSize()``, a step ``dt0`` that
    divides ``t1`` and no event (``blowup_norm=None``), :func:`jaxdyn.meanfield.simulate_particles`
    runs it as a plain ``lax`` loop (its fixed-step path): the lean choice for sweeps of many
    fixed-step particle systems.
    """

    tableau: ClassVar[diffrax.ButcherTableau] = _rk4_tableau
    interpolation_cls: ClassVar = diffrax.ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        return 4


def uniform_on_sphere(key, n: int, d: int, dtype=None) -> Float[Array, "n d"]:
    """``n`` points uniform on the unit sphere ``S^{d-1}`` (normalised Gaussians)."""
    z = jax.random.normal(key, (n, d), dtype=dtype or jnp.result_type(float))
    return z / jnp.linalg.norm(z, axis=-1, keepdims=True)


def fixed_steps(t1, dt0) -> int | None:
    """The number of equal steps ``dt0`` that end exactly at ``t1`` (``None`` when either is
    traced or ``t1 / dt0`` is not an integer to rounding)."""
    try:
        t1, dt0 = float(t1), float(dt0)
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return None
    if not (t1 > 0 and dt0 > 0):
        return None
    steps = round(t1 / dt0)
    if steps < 1 or abs(steps * dt0 - t1) > 1e-9 * t1:
        return None
    return int(steps)


def _saves_on_the_step_grid(ts, t1, steps: int) -> tuple[int, int, int] | None:
    """``(first, spacing, count)`` when the saves are the steps ``first + j spacing``
    (``ts = None``: the last step only); ``None`` when ``ts`` or ``t1`` is traced, or a save
    falls between steps or at unequal spacing."""
    if ts is None:
        return (steps, 1, 1)
    try:
        ts = np.asarray(ts, dtype=np.float64)
        t1 = float(t1)
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return None
    if ts.ndim != 1 or ts.size < 1 or not t1 > 0:
        return None
    k = np.rint(ts * steps / t1)
    if np.any(np.abs(k * (t1 / steps) - ts) > 1e-12 * t1) or k[0] < 0 or k[-1] > steps:
        return None
    gaps = np.diff(k)
    if gaps.size and (gaps[0] < 1 or np.any(gaps != gaps[0])):
        return None
    return (int(k[0]), int(gaps[0]) if gaps.size else 1, int(k.size))


def rk4_loop(field, x0, t1, steps, ts, save_fn, save_steps):
    """Classical RK4 at ``steps`` equal steps as ``lax`` loops, saving at the steps
    ``first + j spacing``: ``(save times, saved outputs, final particles, status)``.

    The fixed-step path of :func:`jaxdyn.meanfield.simulate_particles` (:class:`RK4` with a
    constant step size and no event): the same arithmetic as ``RK4`` to rounding, forward and
    reverse differentiable, with a fraction of ``diffrax.diffeqsolve``'s compilation. (It cannot
    call ``RK4().step`` instead of restating its four stages: diffrax's step is a
    ``custom_vjp``, which forward mode (``jax.jacfwd``, the flow Jacobians of the stability
    checks) cannot differentiate.)"""
    first, spacing, count = save_steps
    dtype = x0.dtype
    h = t1 / steps
    save = (lambda t, x: x) if save_fn is None else save_fn

    def step(k, x):
        t = k * h
        k1 = field.velocity(x, x, t=t)
        y = x + (0.5 * h) * k1
        k2 = field.velocity(y, y, t=t + 0.5 * h)
        y = x + (0.5 * h) * k2
        k3 = field.velocity(y, y, t=t + 0.5 * h)
        y = x + h * k3
        k4 = field.velocity(y, y, t=t + h)
        return x + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4)

    def run(k0, k1, x):
        return x if k1 == k0 else jax.lax.fori_loop(k0, k1, step, x)

    x = run(0, first, x0)
    saved0 = save(first * h, x)

    def segment(x, j):
        k0 = first + j * spacing
        x = jax.lax.fori_loop(0, spacing, lambda i, y: step(k0 + i, y), x)
        return x, save((k0 + spacing) * h, x)

    x, rest = jax.lax.scan(segment, x, jnp.arange(count - 1))
    xs = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), saved0, rest)
    final_x = run(first + (count - 1) * spacing, steps, x)
    save_ts = (
        jnp.asarray(ts, dtype) if ts is not None else jnp.reshape(jnp.asarray(t1, dtype), (1,))
    )
    # no event fills slots with inf here: any non-finite final state is a failure
    finite = jnp.all(jnp.isfinite(final_x))
    status = Status.where(finite, Status.successful, Status.nonfinite)
    return save_ts, xs, final_x, status
