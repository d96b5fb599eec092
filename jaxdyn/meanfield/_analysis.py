"""Distances between token measures, cluster detection and stability (transformer_pde.md).

Everything here compares the output of the mean-field simulators:

- :func:`bures_wasserstein` between Gaussians (the Gaussian ODE, or a cloud's moments);
- :func:`sliced_wasserstein` and :func:`wasserstein2_exact` between particle clouds;
- :func:`detect_clusters` for the clustering of tokens over depth;
- :func:`stability_ratio`, the quantity bounded by the paper's stability estimate
  ``W_p(mu(t), nu(t)) <= C(t, R_0) W_p(mu_0, nu_0)`` ("Mean-field limit and stability").
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from .._custom_types import Key


def _is_concrete(*arrays) -> bool:
    return not any(isinstance(a, jax.core.Tracer) for a in arrays)


def _check_cloud(name: str, x) -> None:
    if jnp.ndim(x) != 2:
        raise ValueError(f"{name} must be a (n, d) particle cloud, got shape {jnp.shape(x)}")


def _check_gaussian(mean_name: str, mean, cov_name: str, cov, psd_tol: float = 1e-8) -> None:
    if jnp.ndim(mean) != 1:
        raise ValueError(f"{mean_name} must be a (d,) vector, got shape {jnp.shape(mean)}")
    d = jnp.shape(mean)[0]
    if jnp.shape(cov) != (d, d):
        raise ValueError(f"{cov_name} must have shape ({d}, {d}), got {jnp.shape(cov)}")
    if _is_concrete(cov):
        c = np.asarray(cov, dtype=np.float64)
        if not np.all(np.isfinite(c)):
            raise ValueError(f"{cov_name} contains NaN or infinity")
        if not np.allclose(c, c.T, atol=1e-8 * max(1.0, float(np.abs(c).max()))):
            raise ValueError(f"{cov_name} must be symmetric")
        lam_min = float(np.linalg.eigvalsh((c + c.T) / 2).min())
        if lam_min < -psd_tol * max(1.0, float(np.abs(c).max())):
            raise ValueError(
                f"{cov_name} must be positive semi-definite, smallest eigenvalue {lam_min:.3g}"
            )


def sqrtm_psd(cov: Float[ArrayLike, "d d"]) -> Float[Array, "d d"]:
    """Symmetric square root ``U diag(sqrt(max(lambda, 0))) U^T`` by ``eigh``.

    eigh rather than a general matrix square root: the argument is symmetric PSD up to
    round-off, and clipping the tiny negative eigenvalues keeps the root real.
    """
    cov = jnp.asarray(cov)
    sym = 0.5 * (cov + cov.T)
    lam, U = jnp.linalg.eigh(sym)
    return (U * jnp.sqrt(jnp.clip(lam, 0.0))) @ U.T


def empirical_mean_cov(
    x: Float[ArrayLike, "n d"],
) -> tuple[Float[Array, " d"], Float[Array, "d d"]]:
    """Mean and covariance of the empirical measure ``(1/n) sum_i delta_{x_i}``.

    The covariance is that of the measure itself, ``(1/n) sum_i (x_i - m)(x_i - m)^T`` (no
    Bessel correction): it is what the Gaussian ODE's ``Sigma`` is compared with.
    """
    _check_cloud("x", x)
    x = jnp.asarray(x)
    mean = jnp.mean(x, axis=0)
    xc = x - mean
    return mean, xc.T @ xc / x.shape[0]


def single_cluster_condition(
    radius: float | Float[ArrayLike, ""],
) -> Callable[[Float[Array, ""], Float[Array, "n d"]], Float[Array, ""]]:
    """Event condition "the tokens have formed one cluster of RMS radius ``radius``":
    ``g(t, x) = radius^2 - (1/n) sum_i |x_i - mean(x)|^2`` (``radius^2 - tr Cov(mu_t)``).

    Negative while the tokens are spread, crossing zero when their RMS distance to their mean
    falls to ``radius``; smooth in the particles, so the crossing time (``t_event`` of
    :func:`jaxdyn.meanfield.simulate_particles` with ``events={"one_cluster": ...}``) is
    differentiable. ``radius`` may be traced.
    """

    def condition(t, x):
        return jnp.asarray(radius, x.dtype) ** 2 - jnp.trace(empirical_mean_cov(x)[1])

    return condition


def bures_wasserstein(
    mean1: Float[ArrayLike, " d"],
    cov1: Float[ArrayLike, "d d"],
    mean2: Float[ArrayLike, " d"],
    cov2: Float[ArrayLike, "d d"],
) -> Float[Array, ""]:
    """Wasserstein-2 distance between ``N(mean1, cov1)`` and ``N(mean2, cov2)``.

    ``W_2^2 = |m_1 - m_2|^2 + tr S_1 + tr S_2 - 2 tr (S_1^{1/2} S_2 S_1^{1/2})^{1/2}``
    (Bures-Wasserstein; transformer_pde.md, "Mean-field limit and stability").
    """
    _check_gaussian("mean1", mean1, "cov1", cov1)
    _check_gaussian("mean2", mean2, "cov2", cov2)
    if jnp.shape(mean1) != jnp.shape(mean2):
        raise ValueError(
            f"mean1 and mean2 differ in shape: {jnp.shape(mean1)} vs {jnp.shape(mean2)}"
        )
    m1, s1, m2, s2 = map(jnp.asarray, (mean1, cov1, mean2, cov2))
    r1 = sqrtm_psd(s1)
    cross = r1 @ (0.5 * (s2 + s2.T)) @ r1
    lam = jnp.linalg.eigvalsh(0.5 * (cross + cross.T))
    bw2 = (
        jnp.sum((m1 - m2) ** 2)
        + jnp.trace(s1)
        + jnp.trace(s2)
        - 2.0 * jnp.sum(jnp.sqrt(jnp.clip(lam, 0.0)))
    )
    return jnp.sqrt(jnp.clip(bw2, 0.0))


def bures_wasserstein_map(
    cov0: Float[ArrayLike, "d d"], cov1: Float[ArrayLike, "d d"]
) -> Float[Array, "d d"]:
    """Linear optimal-transport map between centred Gaussians, ``T S_0 T = S_1``.

    ``T = S_0^{-1/2} (S_0^{1/2} S_1 S_0^{1/2})^{1/2} S_0^{-1/2}`` (``S_0`` positive definite).
    ``x -> m_1 + T (x - m_0)`` is the Bures-Wasserstein geodesic's endpoint map.
    """
    _check_gaussian("mean", jnp.zeros(jnp.shape(cov0)[0]), "cov0", cov0)
    _check_gaussian("mean", jnp.zeros(jnp.shape(cov0)[0]), "cov1", cov1)
    s0 = jnp.asarray(cov0)
    lam, U = jnp.linalg.eigh(0.5 * (s0 + s0.T))
    r0 = (U * jnp.sqrt(lam)) @ U.T
    r0_inv = (U / jnp.sqrt(lam)) @ U.T
    return r0_inv @ sqrtm_psd(r0 @ jnp.asarray(cov1) @ r0) @ r0_inv


def _quantile_w2_squared(px: Float[Array, " n"], py: Float[Array, " m"]) -> Float[Array, ""]:
    """Exact squared W2 between two 1-D empirical measures (uniform weights, any sizes).

    ``W_2^2 = int_0^1 |F^{-1}(u) - G^{-1}(u)|^2 du``; both quantile functions are piecewise
    constant with breaks at ``i/n`` and ``j/m``, so the integral is a finite sum.
    """
    n, m = px.shape[0], py.shape[0]
    sx, sy = jnp.sort(px), jnp.sort(py)
    breaks = jnp.sort(
        jnp.concatenate([jnp.arange(1, n + 1) / n, jnp.arange(1, m + 1) / m]).astype(px.dtype)
    )
    lower = jnp.concatenate([jnp.zeros(1, px.dtype), breaks[:-1]])
    mids = 0.5 * (breaks + lower)
    ix = jnp.clip(jnp.floor(mids * n).astype(jnp.int32), 0, n - 1)
    iy = jnp.clip(jnp.floor(mids * m).astype(jnp.int32), 0, m - 1)
    return jnp.sum((breaks - lower) * (sx[ix] - sy[iy]) ** 2)


def sliced_wasserstein(
    x: Float[ArrayLike, "n d"],
    y: Float[ArrayLike, "m d"],
    key: Key,
    n_projections: int = 128,
) -> Float[Array, ""]:
    """Monte-Carlo sliced Wasserstein-2 distance between two particle clouds.

    ``SW_2^2(mu, nu) = E_theta W_2^2(theta#mu, theta#nu)`` with ``theta`` uniform on the unit
    sphere, estimated with ``n_projections`` directions; each 1-D W2 is exact (quantile
    functions), so clouds may have different sizes. Pure and jit/vmap-able.
    """
    _check_cloud("x", x)
    _check_cloud("y", y)
    if jnp.shape(x)[1] != jnp.shape(y)[1]:
        raise ValueError(
            f"x and y must share the dimension d, got {jnp.shape(x)} and {jnp.shape(y)}"
        )
    if int(n_projections) < 1:
        raise ValueError(f"n_projections must be >= 1, got {n_projections}")
    x, y = jnp.asarray(x), jnp.asarray(y)
    theta = jax.random.normal(key, (int(n_projections), x.shape[1]), dtype=x.dtype)
    theta = theta / jnp.linalg.norm(theta, axis=1, keepdims=True)
    w2 = jax.vmap(_quantile_w2_squared)(theta @ x.T, theta @ y.T)
    return jnp.sqrt(jnp.mean(w2))


def _hungarian(cost: np.ndarray) -> np.ndarray:
    """Optimal assignment (rows to columns, ``n <= m``) by the O(n^2 m) Hungarian method.

    Shortest augmenting paths with dual potentials (Kuhn-Munkres, Jonker-Volgenant form);
    the inner scan over columns is vectorised. Returns ``col[i]`` for each row ``i``.
    """
    n, m = cost.shape
    u = np.zeros(n + 1)
    v = np.zeros(m + 1)
    match = np.zeros(m + 1, dtype=np.int64)  # match[j] = row (1-based) assigned to column j
    way = np.zeros(m + 1, dtype=np.int64)
    for i in range(1, n + 1):
        match[0] = i
        j0 = 0
        minv = np.full(m + 1, np.inf)
        used = np.zeros(m + 1, dtype=bool)
        while True:
            used[j0] = True
            i0 = match[j0]
            reduced = cost[i0 - 1] - u[i0] - v[1:]
            free = ~used[1:]
            better = free & (reduced < minv[1:])
            minv[1:][better] = reduced[better]
            way[1:][better] = j0
            candidates = np.where(free, minv[1:], np.inf)
            j1 = int(np.argmin(candidates)) + 1
            delta = candidates[j1 - 1]
            u[match[used]] += delta
            v[used] -= delta
            minv[1:][free] -= delta
            j0 = j1
            if match[j0] == 0:
                break
        while j0 != 0:
            j1 = way[j0]
            match[j0] = match[j1]
            j0 = j1
    col = np.empty(n, dtype=np.int64)
    for j in range(1, m + 1):
        if match[j] != 0:
            col[match[j] - 1] = j - 1
    return col


def optimal_assignment(
    x: Float[ArrayLike, "n d"], y: Float[ArrayLike, "n d"]
) -> Int[np.ndarray, " n"]:
    """Permutation ``sigma`` minimising ``sum_i |x_i - y_sigma(i)|^2`` (host-side, small n).

    Between two uniform empirical measures with the same number of atoms, optimal transport
    is an assignment (Birkhoff), so ``x_i -> y_sigma(i)`` is the W2-optimal map and
    ``(1 - s) x_i + s y_sigma(i)`` the W2 geodesic.
    """
    _check_cloud("x", x)
    _check_cloud("y", y)
    if np.shape(x) != np.shape(y):
        raise ValueError(
            f"x and y must have the same shape (n, d), got {np.shape(x)} and {np.shape(y)}"
        )
    xn = np.asarray(x, dtype=np.float64)
    yn = np.asarray(y, dtype=np.float64)
    cost = np.sum((xn[:, None, :] - yn[None, :, :]) ** 2, axis=-1)
    return _hungarian(cost)


def wasserstein2_exact(x: Float[ArrayLike, "n d"], y: Float[ArrayLike, "n d"]) -> float:
    """Exact W2 between two uniform empirical measures with the same number of atoms.

    ``W_2^2 = min_sigma (1/n) sum_i |x_i - y_sigma(i)|^2``, solved as an assignment problem
    on the host (O(n^3): meant for n up to a few hundred). Not traceable by jit.
    """
    sigma = optimal_assignment(x, y)
    xn = np.asarray(x, dtype=np.float64)
    yn = np.asarray(y, dtype=np.float64)
    return float(np.sqrt(np.mean(np.sum((xn - yn[sigma]) ** 2, axis=-1))))


def detect_clusters(
    x: Float[ArrayLike, "n d"], radius: float | Float[ArrayLike, ""]
) -> tuple[Int[Array, " n"], Int[Array, ""]]:
    """Single-linkage clusters: connected components of the graph ``|x_i - x_j| <= radius``.

    Returns ``(labels, n_clusters)``; ``labels[i]`` is the smallest particle index in the
    component of ``x_i``. Computed by min-label propagation with pointer jumping inside a
    ``lax.while_loop`` (at most ``n`` rounds), so it is jit/vmap-able and ``radius`` may be
    traced. A NaN particle is isolated (its own cluster).
    """
    _check_cloud("x", x)
    x = jnp.asarray(x)
    n = x.shape[0]
    sq = jnp.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)
    adjacent = sq <= jnp.asarray(radius, x.dtype) ** 2
    adjacent = adjacent | jnp.eye(n, dtype=bool)
    labels0 = jnp.arange(n, dtype=jnp.int32)

    def propagate(labels):
        new = jnp.min(jnp.where(adjacent, labels[None, :], n), axis=1).astype(jnp.int32)
        return new[new]  # pointer jumping: follow the label's own label

    def cond(state):
        labels, changed, it = state
        return changed & (it < n)

    def body(state):
        labels, _, it = state
        new = propagate(labels)
        return new, jnp.any(new != labels), it + 1

    labels, _, _ = jax.lax.while_loop(cond, body, (labels0, jnp.array(True), jnp.array(0)))
    n_clusters = jnp.sum(labels == labels0).astype(jnp.int32)
    return labels, n_clusters


def stability_ratio(
    xs: Float[ArrayLike, "T n d"],
    ys: Float[ArrayLike, "T n d"],
    distance: Callable[[ArrayLike, ArrayLike], float] = wasserstein2_exact,
) -> Float[np.ndarray, " T"]:
    """``W(mu(t), nu(t)) / W(mu_0, nu_0)`` along two particle trajectories saved at the same times.

    The paper's stability estimate bounds this ratio by ``C(t, R_0)`` for compactly supported
    initial measures (transformer_pde.md, "Mean-field limit and stability"). ``distance``
    defaults to the exact W2 (host-side); pass a sliced W2 for large clouds.
    """
    xs = np.asarray(xs)
    ys = np.asarray(ys)
    if xs.ndim != 3 or xs.shape != ys.shape:
        raise ValueError(
            f"xs and ys must be (T, n, d) of equal shape, got {xs.shape} and {ys.shape}"
        )
    d0 = float(distance(xs[0], ys[0]))
    if d0 <= 0.0:
        raise ValueError("the initial clouds coincide (distance 0): the ratio is undefined")
    return np.array([float(distance(a, b)) / d0 for a, b in zip(xs, ys, strict=True)])
