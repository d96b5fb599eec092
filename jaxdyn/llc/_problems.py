"""The calibration problems of copy-head-llc (docs/llc.md, "Calibration"): a loss, a minimum
w*, data and the exact learning coefficient for each.

* linear regression (noisy, w* the least-squares fit): lambda = d / 2;
* reduced-rank regression y = B A x (noiseless teacher of rank r, w* the teacher): Aoyagi's
  lambda;
* the copy-head network f(X) = A(G) X W (jaxdyn.copyhead's heads and task; noiseless teacher at
  finite weights, w* the teacher): lambda = (d - k) / 2 with k the directions its symmetries
  remove (linear attention: G -> c G, W -> W / c, k = 1; softmax: a constant added to a row of
  G, k = L).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .. import copyhead as ch
from ._exact import quadratic_llc, reduced_rank_rlct


class Problem(NamedTuple):
    loss_fn: object
    w_star: object
    data: tuple
    exact: float
    alternatives: tuple
    hessian: np.ndarray
    removed: int


def _hessian(loss_fn, w_star, data) -> np.ndarray:
    flat, unravel = ravel_pytree(w_star)
    return np.asarray(jax.hessian(lambda w: loss_fn(unravel(w), data))(flat))


def flat_directions(hessian: np.ndarray, *, rtol: float = 1e-8) -> int:
    """Eigenvalues of the Hessian below rtol x the largest: the directions a symmetry removes
    (an independent count from the Hessian's spectrum)."""
    h = np.linalg.eigvalsh(hessian)
    return int(np.sum(h < rtol * np.max(np.abs(h))))


def _mse(pred, y):
    return 0.5 * jnp.mean(jnp.sum((y - pred) ** 2, axis=tuple(range(1, y.ndim))))


def linear_regression(key, d: int, samples: int) -> Problem:
    kx, kw, ke = jax.random.split(key, 3)
    x = jax.random.normal(kx, (samples, d))
    y = x @ jax.random.normal(kw, (d,)) + jax.random.normal(ke, (samples,))
    w = jnp.linalg.lstsq(x, y)[0]

    def loss(w, batch):
        return _mse(batch[0] @ w, batch[1])

    H = _hessian(loss, w, (x, y))
    return Problem(loss, w, (x, y), d / 2, ((d - 1) / 2, (d + 1) / 2), H, 0)


def reduced_rank(
    key, M: int, N: int, H: int, r: int, samples: int, *, singular: bool = True
) -> Problem:
    """A noiseless rank-r teacher y = B0 A0 x; w* = (A0, B0).

    ``singular=True``: the redundant hidden units are zero in both layers (the most singular
    point of the true set), where the local learning coefficient is Aoyagi's global lambda
    (alternative: the regular count H (M + N) / 2). ``singular=False``: A0 random (full rank
    when H <= M), only B0's redundant columns zero: a point where the true set is a smooth
    manifold, so lambda is its codimension / 2 = rank(Hessian) / 2 (alternatives: Aoyagi's lambda
    when it differs, and the regular count)."""
    kx, ka, kb = jax.random.split(key, 3)
    x = jax.random.normal(kx, (samples, M))
    A0 = jax.random.normal(ka, (H, M))
    if singular:
        A0 = A0.at[r:, :].set(0.0)
    B0 = jax.random.normal(kb, (N, H)).at[:, r:].set(0.0)
    y = x @ (B0 @ A0).T

    def loss(w, batch):
        A, B = w
        return _mse(batch[0] @ (B @ A).T, batch[1])

    lam, _ = reduced_rank_rlct(M, N, H, r)
    Hs = _hessian(loss, (A0, B0), (x, y))
    regular = H * (M + N) / 2
    if singular:
        return Problem(loss, (A0, B0), (x, y), float(lam), (regular,), Hs, 0)
    flat = flat_directions(Hs)
    local = (H * (M + N) - flat) / 2
    alts = tuple(a for a in (float(lam), regular) if a != local)
    return Problem(loss, (A0, B0), (x, y), local, alts, Hs, flat)


def copy_head_network(key, head, L: int, V: int, P: int, *, gap: float = 1.0) -> Problem:
    """A teacher copy head at finite weights: G0 = gap S + N(0, 1/4) noise, W0 = I + N(0, 1/4)
    noise; targets Y = A(G0) X W0 on P sequences of the copy task's tokens."""
    if head not in ("linear", "softmax"):
        raise ValueError(f"head must be 'linear' or 'softmax', got {head!r}")
    net = ch.SoftmaxCopyHead() if head == "softmax" else ch.LinearCopyHead()
    kt, kg, kw = jax.random.split(key, 3)
    X, _ = ch.copy_task(kt, P, L, V)
    S = jnp.roll(jnp.eye(L), -1, axis=1)  # ones at (l, l - 1), cyclic
    G0 = gap * S + 0.5 * jax.random.normal(kg, (L, L))
    W0 = jnp.eye(V) + 0.5 * jax.random.normal(kw, (V, V))
    Y = net(G0, X, W0)

    def loss(w, batch):
        G, W = w
        return _mse(net(G, batch[0], W), batch[1])

    removed = L if head == "softmax" else 1
    d = L * L + V * V
    Hs = _hessian(loss, (G0, W0), (X, Y))
    return Problem(loss, (G0, W0), (X, Y), (d - removed) / 2, (d / 2,), Hs, removed)


def sampler_bias(problem: Problem, *, n, beta, step_size, localization) -> float:
    """|E[lambda_hat] - lambda| of the quadratic expansion at w* (exact for a quadratic loss,
    :func:`jaxdyn.llc.quadratic_llc`): the localisation's and the step size's bias."""
    expected = quadratic_llc(
        problem.hessian, n=n, beta=beta, step_size=step_size, localization=localization
    )
    return abs(expected - problem.exact)
