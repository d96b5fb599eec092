"""What the particle experiments measure (transformer_pde.md): fixed-step RK4 flows, the random
problem families and clouds they start from, and the measured quantities their claims decide.
Numbers in, numbers out: no run, no config."""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn._status import Status

from ._analysis import bures_wasserstein, empirical_mean_cov, wasserstein2_exact
from ._blowup import l2_growth_rate, near_blowup_lag
from ._causal import causal_influence, sink_positions
from ._closed_forms import softmax_identity_covariance
from ._clusters import detect_clusters
from ._energy import interaction_energy
from ._gradient_flow import sigmoid_energy
from ._meanfield_limit import antithetic_gaussian_sample, meanfield_error
from ._particles import RK4, uniform_on_sphere
from ._simulate_gaussian import simulate_gaussian
from ._simulate_particles import simulate_particles
from .fields import (
    L2,
    Exponential,
    Linear,
    Masked,
    MultiHead,
    QuadraticKeySoftmax,
    Sigmoid,
    Sinkhorn,
    Softmax,
    SphereProjected,
    SphereSoftmax,
)
from .fields._wrappers import DriftedClosure

CLOSED_VARIANTS = ("softmax", "l2", "sinkhorn", "linear", "multihead")
ALL_VARIANTS = CLOSED_VARIANTS + ("sigmoid", "masked")


def rk4_flow(field, x0, t1, steps, *, ts=None, save_fn: Callable | None = None):
    """``steps`` fixed RK4 steps of the particle ODE, no blow-up event: every check that uses
    it bounds RK4's error by step doubling or by a closed form."""
    return simulate_particles(
        field,
        x0,
        t1,
        dt0=t1 / steps,
        solver=RK4(),
        stepsize_controller=diffrax.ConstantStepSize(),
        blowup_norm=None,
        ts=ts,
        save_fn=save_fn,
    )


def variant_field(variant: str, Q, K, V, *, sinkhorn_iterations: int = 50, positions=None):
    """The field of the named variant from one ``(Q, K, V)`` (``multihead``: 2 heads;
    ``masked``: causal softmax over ``positions`` with an attention sink at position 0)."""
    fields = {
        "softmax": lambda: Softmax(Q=Q, K=K, V=V),
        "l2": lambda: L2(Q=Q, K=K, V=V),
        "sinkhorn": lambda: Sinkhorn(Q=Q, K=K, V=V, iterations=sinkhorn_iterations),
        "linear": lambda: Linear(Q=Q, K=K, V=V),
        "multihead": lambda: MultiHead(Q=Q, K=K, V=V, heads=2),
        "sigmoid": lambda: Sigmoid(Q=Q, K=K, V=V),
        "masked": lambda: Masked(Softmax(Q=Q, K=K, V=V), positions=positions, sink=True),
    }
    if variant not in fields:
        raise ValueError(f"unknown attention variant {variant!r}")
    return fields[variant]()


def random_weights(seed: int, d: int, scale: float):
    """``Q, K ~ scale N(0, 1)`` and ``V = I + scale/2 N(0, 1)``, all ``(d, d)``."""
    rng = np.random.default_rng(seed)
    Q = scale * rng.standard_normal((d, d))
    K = scale * rng.standard_normal((d, d))
    V = np.eye(d) + 0.5 * scale * rng.standard_normal((d, d))
    return Q, K, V


def initial_gaussian(d: int):
    """``(alpha_0, Sigma_0)``: an off-centre, correlated Gaussian."""
    alpha0 = 0.5 * np.cos(np.arange(d) + 1.0)
    G = np.eye(d) + 0.3 * np.ones((d, d)) / d
    return alpha0, 0.6 * G @ G.T


def ball_cloud(key, n, d, radius):
    """``n`` points uniform in the ball of radius ``radius``."""
    k1, k2 = jax.random.split(key)
    z = jax.random.normal(k1, (n, d))
    r = radius * jax.random.uniform(k2, (n, 1)) ** (1.0 / d)
    return r * z / jnp.linalg.norm(z, axis=-1, keepdims=True)


def standardised(x):
    """The cloud centred and divided by its RMS radius."""
    m, c = empirical_mean_cov(x)
    return (x - m) / jnp.sqrt(jnp.trace(c) + 1e-300)


def cluster_count(x, radius):
    """Single-linkage clusters at ``radius`` as a float (the solver fills saves after a stop
    with inf, which no integer holds)."""
    return detect_clusters(x, radius)[1].astype(x.dtype)


def spearman(x, y) -> float:
    rx = np.argsort(np.argsort(x)).astype(float)
    ry = np.argsort(np.argsort(y)).astype(float)
    if np.std(ry) == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def wasserstein1_exact(x, y) -> float:
    """Exact W1 between two uniform clouds of equal size: the assignment for the Euclidean
    cost (the W2 assignment minimises squared distances, a different problem)."""
    from scipy.optimize import linear_sum_assignment

    x, y = np.asarray(x), np.asarray(y)
    cost = np.linalg.norm(x[:, None] - y[None], axis=-1)
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())


def nested_sample(key, mean, cov, n, n_max):
    """The ``n``-point antithetic sample of ``N(mean, cov)`` (``n`` traced), each point
    repeated ``n_max / n`` times: the same empirical measure, hence the same dynamics, with a
    static shape (one compilation for every ``n``)."""
    half = n_max // 2
    x = antithetic_gaussian_sample(key, mean, cov, n_max)
    z_index = jnp.arange(half) % (n // 2)
    return jnp.concatenate([x[:half][z_index], x[half:][z_index]])


# -- pde-meanfield ---------------------------------------------------------------------------


def meanfield_error_member(field, alpha0, cov0, n_max, t1, steps):
    """Sweep member over ``(drift, n)``: the particles move with ``field``; the Gaussian ODE is
    ``DriftedClosure(field, drift e_1)`` (``drift = 0``: the field's own closure)."""
    e1 = np.eye(np.shape(alpha0)[0])[0]

    def member(params, key):
        x_n = nested_sample(key, alpha0, cov0, params["n"], n_max)
        closure = DriftedClosure(field, params["drift"] * e1)
        err = meanfield_error(closure, x_n, alpha0, cov0, t1, steps=steps)
        keys = ("initial", "total", "dynamic", "mean_gap", "moment_gap", "status")
        return {k: getattr(err, k) for k in keys}

    return member


def l2_growth_draws(d, draws, horizon, seed):
    """Random ``Q, K, V`` (``V`` general), ``Sigma_0`` random: the L2 Gaussian's growth over
    ``horizon`` times the softmax Gaussian's stop time with the same weights (``t = 50`` where
    softmax does not stop by then), against ``|Sigma_0| exp(r t)``. Returns ``(growth at the
    saves, reached the horizon, growth at the stop, stop times, horizons, softmax stops)``."""
    rng = np.random.default_rng(seed)
    Qs, Ks, Vs, G = (rng.standard_normal((draws, d, d)) for _ in range(4))
    covs = G @ np.transpose(G, (0, 2, 1)) / d + 0.1 * np.eye(d)
    mean, saves = np.zeros(d), 9

    def solve(Q, K, V, cov, T, l2):
        # softmax (l2 false): its stop time, with the blow-up and PSD events; L2: its growth up
        # to T at atol 1e-12, with no event that can fire; one compiled program for both
        field = QuadraticKeySoftmax.softmax_or_l2(Q, K, V, l2)
        sol = simulate_gaussian(
            field, mean, cov, T, ts=jnp.linspace(0.0, T, saves), rtol=1e-8,
            atol=jnp.where(l2, 1e-12, 1e-10), max_steps=16384,
            blowup_trace=jnp.where(l2, jnp.inf, 1e6), psd_tol=jnp.where(l2, jnp.inf, 1e-6),
        )  # fmt: skip
        size = jnp.linalg.norm(sol.covs, ord=2, axis=(1, 2))
        final = jnp.linalg.norm(sol.final_cov, ord=2)
        return sol.t_final, size, final, sol.status == Status.successful

    solve_all = jax.jit(jax.vmap(solve))
    no = np.zeros(draws, bool)
    t_soft = np.asarray(solve_all(Qs, Ks, Vs, covs, np.full(draws, 50.0), no)[0])
    horizons = horizon * np.minimum(t_soft, 50.0)
    t_end, sizes, final, reached = map(np.asarray, solve_all(Qs, Ks, Vs, covs, horizons, ~no))
    rates = np.array(
        [
            l2_growth_rate(np.asarray(L2(Q=Q, K=K, V=V).A()), K, V)
            for Q, K, V in zip(Qs, Ks, Vs, strict=True)
        ]
    )
    ts = np.linspace(0.0, 1.0, saves)[None, :] * horizons[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        growth = sizes[:, 1:] / (sizes[:, :1] * np.exp(rates[:, None] * ts[:, 1:]))
        at_stop = final / (sizes[:, 0] * np.exp(rates * t_end))
    return growth, reached, at_stop, t_end, horizons, t_soft


def stalled_inside_bound(reached, growth_at_stop):
    """Draws whose solve stopped early (``max_steps``) with the last state inside the growth
    bound: numerical failures, not blow-ups."""
    at_stop = np.asarray(growth_at_stop, float)
    return ~np.asarray(reached, bool) & np.isfinite(at_stop) & (at_stop <= 1.0)


def near_blowup_member(A, cov0, ts, n_max, steps):
    """Sweep member over ``n``: softmax, ``V = I``, particles from ``N(0, Sigma_0)`` against the
    closed form ``Sigma(t) = (Sigma_0^{-1} - t (A + A^T))^{-1}`` at ``ts[1:]``: relative
    spectral-norm errors from ``Sigma_0`` (total) and from the sample's own covariance
    (dynamic), and the particles' top-eigenvalue lag with its extreme-value bound."""
    d = cov0.shape[0]
    field = Softmax(Q=np.sqrt(d) * A, K=np.eye(d), V=np.eye(d))

    def rel(c, ref):
        return jnp.linalg.norm(c - ref, ord=2) / jnp.linalg.norm(ref, ord=2)

    def member(params, key):
        x = nested_sample(key, np.zeros(d), cov0, params["n"], n_max)
        save = lambda t, y: empirical_mean_cov(y)[1]  # noqa: E731
        sol = rk4_flow(field, x, ts[-1], steps, ts=ts, save_fn=save)
        covs = sol.xs
        exact = jax.vmap(lambda t: softmax_identity_covariance(cov0, A, t))(ts[1:])
        own = jax.vmap(lambda t: softmax_identity_covariance(covs[0], A, t))(ts[1:])
        lag, bound = near_blowup_lag(x, covs[1:], A, ts[1:])
        return {
            "total": jax.vmap(rel)(covs[1:], exact),
            "dynamic": jax.vmap(rel)(covs[1:], own),
            "lag": lag,
            "lag_bound": bound,
            "status": sol.status,
        }

    return member


def coupled_clouds_ratio(field, alpha0, cov0, shift, stretch, n, t1, steps, keys):
    """``W2(mu_t, nu_t) / W2(mu_0, nu_0)`` of antithetic clouds ``x_0`` and their image under
    the affine OT map to ``N(alpha_0 + shift, stretch^2 Sigma_0)`` (identity assignment
    optimal), per key; and the Gaussian ODE's Bures-Wasserstein ratio."""

    def pair(key):
        x0 = antithetic_gaussian_sample(key, alpha0, cov0, n)
        y0 = alpha0 + shift + stretch * (x0 - alpha0)
        flow = jax.vmap(lambda x: rk4_flow(field, x, t1, steps).final_x)
        return x0, y0, flow(jnp.stack([x0, y0]))

    ratios = []
    for key in keys:
        x0, y0, (xt, yt) = jax.jit(pair)(key)
        ratios.append(wasserstein2_exact(xt, yt) / wasserstein2_exact(x0, y0))

    def gaussian(mean, cov):
        # no events: a blow-up by t1 would show as a non-finite ratio
        sol = simulate_gaussian(
            field, mean, cov, t1, rtol=1e-10, atol=1e-12, blowup_trace=None, psd_tol=None
        )
        return sol.final_mean, sol.final_cov

    (m0, m1), (c0, c1) = jax.jit(jax.vmap(gaussian))(
        jnp.stack([alpha0, alpha0 + shift]), jnp.stack([cov0, stretch**2 * cov0])
    )
    bw_t = float(bures_wasserstein(m0, c0, m1, c1))
    bw_0 = float(bures_wasserstein(alpha0, cov0, alpha0 + shift, stretch**2 * cov0))
    return np.array(ratios), bw_t / bw_0


# -- pde-stability ---------------------------------------------------------------------------


def candidate_clouds(key, n, d, r):
    """Clouds in the ball of radius ``r``: uniform, on the sphere, and two clusters at ``+-r``
    along the first axis (the configurations that stretch most)."""
    uniform = ball_cloud(key, n, d, r)
    z = jax.random.normal(jax.random.fold_in(key, 7), (n, d))
    shell = r * z / jnp.linalg.norm(z, axis=-1, keepdims=True)
    e1 = jnp.zeros(d).at[0].set(r)
    signs = jnp.where(jnp.arange(n) % 2 == 0, 1.0, -1.0)[:, None]
    clusters = signs * e1 + 0.05 * r * z / jnp.sqrt(d)
    clusters = clusters / jnp.maximum(1.0, jnp.linalg.norm(clusters, axis=-1, keepdims=True) / r)
    return {"uniform": uniform, "shell": shell, "clusters": clusters}


def top_flow_direction(field, x, t1, steps):
    """The top singular value of ``d x(t1) / d x(0)`` and its right singular vector."""
    J = jax.jacfwd(lambda y: rk4_flow(field, y, t1, steps).final_x)(x).reshape(x.size, x.size)
    _, svals, vt = jnp.linalg.svd(J)
    return svals[0], vt[0].reshape(x.shape)


def pair_ratios(xs, ys, distance):
    """``W(mu_t, nu_t) / W(mu_0, nu_0)`` at the saves ``t > 0``."""
    d = np.array([distance(a, b) for a, b in zip(xs, ys, strict=True)])
    return d[1:] / d[0]


# -- pde-sigmoid -----------------------------------------------------------------------------


def sigmoid_sphere_field(beta, d, bias=0.0, V=None):
    """Sigmoid attention with ``A = beta I`` and ``V`` (identity by default)."""
    eye = jnp.eye(d)
    return Sigmoid(Q=beta * jnp.sqrt(d) * eye, K=eye, V=eye if V is None else V, bias=bias)


def sigmoid_identity_terms(field, beta, x):
    """``(dE/dt, (beta/n) sum_i |dx_i/dt|^2)`` of the sphere-projected sigmoid flow at ``x``."""
    v = SphereProjected(field).velocity(x, x)
    _, rate = jax.jvp(lambda y: sigmoid_energy(field, y), (x,), (v,))
    return rate, beta / x.shape[0] * jnp.sum(v**2)


def sigmoid_member(d, n, bias, t1, steps, ts, radius):
    """Sweep member over ``beta``: tokens uniform on the sphere; sigmoid's energy, the gap of
    its energy identity and cluster counts over depth, and softmax's cluster counts."""

    def member(params, key):
        x0, beta = uniform_on_sphere(key, n, d), params["beta"]
        sigmoid = sigmoid_sphere_field(beta, d, bias)

        def stats(t, x):
            rate, identity = sigmoid_identity_terms(sigmoid, beta, x)
            return sigmoid_energy(sigmoid, x), rate - identity, identity, cluster_count(x, radius)

        sig = rk4_flow(SphereProjected(sigmoid), x0, t1, steps, ts=ts, save_fn=stats)
        soft = rk4_flow(
            SphereSoftmax(beta, d, bounded=False), x0, t1, steps, ts=ts,
            save_fn=lambda t, x: cluster_count(x, radius),
        )  # fmt: skip
        energy, gap, identity, sig_clusters = sig.xs
        return {
            "energy": energy,
            # relative to the largest dissipation of the run: the rate itself tends to zero
            "identity_gap": jnp.max(jnp.abs(gap)) / jnp.max(identity),
            "sigmoid_clusters": sig_clusters,
            "softmax_clusters": soft.xs,
            "status": Status.where(sig.status == Status.successful, soft.status, sig.status),
        }

    return member


# -- pde-causal ------------------------------------------------------------------------------


def causal_member(base, d, n_max, t1, steps):
    """Sweep member over ``(n, sink_mass)``: ``n`` tokens padded to ``n_max`` with inert ones
    (one compiled program for every ``n``); the largest influence of a later token on an
    earlier one, and of the earliest non-sink token on the others."""

    def member(params, key):
        n = params["n"]
        k1, k2 = jax.random.split(key)
        positions = sink_positions(n, params["sink_mass"], k1, length=n_max)
        x0 = jax.random.normal(k2, (n_max, d))
        influence = causal_influence(Masked(base, positions), x0, t1, steps)
        real = jnp.arange(n_max) < n
        # [j, i]: token i after token j, both real
        later = (positions[None, :] > positions[:, None]) & real[None, :] & real[:, None]
        first = jnp.argmax(positions > 0.0)  # the earliest token that is not in the sink
        others = (jnp.arange(n_max) != first) & real
        return {
            "later_on_earlier": jnp.max(jnp.where(later, influence, 0.0)),
            "first_token_influence": jnp.max(jnp.where(others, influence[:, first], 0.0)),
        }

    return member


# -- pde-twisted -----------------------------------------------------------------------------


def twisted_weights(d: int, seed: int):
    """``A = -0.1 (S S^T + I/2)``, ``M = G G^T + I/2`` (``S, G`` Gaussian)."""
    rng = np.random.default_rng(seed + 13)
    S, G = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    return -0.1 * (S @ S.T + 0.5 * np.eye(d)), G @ G.T + 0.5 * np.eye(d)


@eqx.filter_jit
def energy_rate(field, x):
    """``dE/dt`` of the interaction energy along the particle flow at ``x``."""
    v = field.velocity(x, x)
    return jax.jvp(lambda y: interaction_energy(field, y), (x,), (v,))[1]


def stability_pairs(field, ts, steps, radius0, top_eps, pair_scales, keys, n) -> dict:
    """Per key, three candidate clouds ``x_0`` (:func:`candidate_clouds`), each paired with
    its perturbation by ``top_eps radius0`` along the flow Jacobian's top right singular vector
    (the direction that drives the ratio toward its supremum) and with copies moved toward a
    ball cloud by each of ``pair_scales``. Returns, stacked over clouds: the top singular
    values, the local constants ``|dx_t/dx_0|_2`` at ``ts``, the stability constant along
    each cloud's trajectory (a posteriori radii), and per pair and ``p = 1, 2`` the ratios
    ``W_p(mu_t, nu_t) / W_p(mu_0, nu_0)`` at ``ts[1:]`` with their RK4 step-doubling error."""
    from ._stability import flow_jacobian_norms, softmax_stability_constant

    t1, d = ts[-1], field.V.shape[0]
    coarse, fine = (
        jax.jit(jax.vmap(lambda x, s=s: rk4_flow(field, x, t1, s, ts=ts).xs))
        for s in (steps, 2 * steps)
    )
    top = jax.jit(lambda x: top_flow_direction(field, x, t1, steps))
    norms = jax.jit(lambda x: flow_jacobian_norms(field, x, ts, steps))
    out = {k: [] for k in ("cloud", "sigma", "local", "constant", "w1", "w2", "w1_err", "w2_err")}
    for c, key in enumerate(keys):
        for kind, x0 in candidate_clouds(key, n, d, radius0).items():
            sigma, u = top(x0)
            rms = float(jnp.sqrt(jnp.mean(jnp.sum(u**2, axis=-1))))
            starts = [x0 + top_eps * radius0 * u / rms] + [
                x0 + s * (ball_cloud(jax.random.fold_in(key, i + 1), n, d, radius0) - x0)
                for i, s in enumerate(pair_scales)
            ]
            y0 = jnp.concatenate([x0[None], jnp.stack(starts)])
            xs, xs_fine = np.asarray(coarse(y0)), np.asarray(fine(y0))
            radii = np.max(np.linalg.norm(xs, axis=-1), axis=(0, 2))
            out["cloud"].append(f"{kind}{c}")
            out["sigma"].append(float(sigma))
            out["local"].append(np.asarray(norms(x0)))
            out["constant"].append(softmax_stability_constant(field, ts, radii))
            for y, y_fine in zip(xs[1:], xs_fine[1:], strict=True):
                for p, distance in ((2, wasserstein2_exact), (1, wasserstein1_exact)):
                    r = pair_ratios(xs[0], y, distance)
                    r_fine = pair_ratios(xs_fine[0], y_fine, distance)
                    out[f"w{p}"].append(r)
                    out[f"w{p}_err"].append(np.abs(r - r_fine) / r + 1e-12)
    return {k: v if k == "cloud" else np.array(v) for k, v in out.items()}


def closure_defects(field, alpha0, cov0, n_values, systems, seed):
    """The closure defect at ``t = 0`` (:func:`closure_defect`) of ``systems`` antithetic
    samples per ``n`` (one compiled program per ``n``: Sinkhorn costs ``iterations n^2``)."""
    from ._meanfield_limit import closure_defect

    out = []
    for n in n_values:
        keys = jax.random.split(jax.random.key(seed + n), systems)
        one = lambda key, n=n: closure_defect(
            field, antithetic_gaussian_sample(key, alpha0, cov0, n)
        )  # noqa: E731
        out.append(np.asarray(jax.jit(jax.vmap(one))(keys)))
    return np.repeat(n_values, systems), np.concatenate(out)


def sphere_cluster_member(d, n, t1, steps, ts, radius):
    """Sweep member over ``beta``: tokens uniform on ``S^{d-1}`` under ``SphereSoftmax(beta)``;
    cluster counts at ``ts`` and the largest drift off the sphere."""

    def member(params, key):
        save = lambda t, x: (  # noqa: E731
            cluster_count(x, radius),
            jnp.max(jnp.abs(jnp.linalg.norm(x, axis=-1) - 1.0)),
        )
        x0 = uniform_on_sphere(key, n, d)
        sol = rk4_flow(SphereSoftmax(params["beta"], d), x0, t1, steps, ts=ts, save_fn=save)
        count, drift = sol.xs
        return {"clusters": count, "norm_drift": jnp.max(drift), "status": sol.status}

    return member


def lipschitz_table(fields, radii, clouds, n, d, seed):
    """``(radii, clouds, 3)`` Lipschitz constants (space, W2, W1 in the measure) per field, on
    clouds uniform in the ball of each radius."""
    from ._stability import field_lipschitz_constants

    measure = {
        k: jax.jit(lambda y, f=f: jnp.stack(field_lipschitz_constants(f, y)))
        for k, f in fields.items()
    }
    values = {k: np.zeros((len(radii), clouds, 3)) for k in measure}
    for i, R in enumerate(radii):
        for c in range(clouds):
            y = ball_cloud(jax.random.key(seed + c), n, d, R)
            for k, fn in measure.items():
                values[k][i, c] = np.asarray(fn(y))
    return values


def twisted_rates(field, x, h=(2e-3, 1e-3)):
    """For unnormalised softmax: ``dE/dt``, the squared speed in ``d_{A,V}`` and in ``W_2``, and
    the twisted distance ``d_{A,V}(mu_h, mu_0) / h`` for each step ``h``."""
    from ._gradient_flow import twisted_metric, twisted_speed_squared, twisted_wasserstein

    moved_by = jax.jit(lambda s: rk4_flow(field, x, s, 4).final_x)  # s traced
    metric = twisted_metric(field)
    speeds = [twisted_wasserstein(moved_by(jnp.asarray(s)), x, metric) / s for s in h]
    plain = jnp.mean(jnp.sum(field.velocity(x, x) ** 2, axis=-1))
    twisted = twisted_speed_squared(field, np.asarray(x))
    return float(energy_rate(field, x)), float(twisted), float(plain), speeds


def twisted_problem(seed, n, d=2, x_seed=None):
    """Unnormalised and normalised softmax with ``V = M A`` (:func:`twisted_weights`), ``M``
    and ``n`` tokens ``N(0, I/4)``."""
    A, M = twisted_weights(d, seed)
    x = 0.5 * jax.random.normal(jax.random.key(seed + 5 if x_seed is None else x_seed), (n, d))
    kw = {"Q": np.sqrt(d) * A, "K": np.eye(d), "V": M @ A}
    return Exponential(**kw), Softmax(**kw), M, x


@jax.jit
def sigmoid_identity_gap(V, beta):
    """The sigmoid energy identity's relative gap on 16 tokens uniform on the sphere."""
    d = V.shape[0]
    x = uniform_on_sphere(jax.random.key(0), 16, d)
    rate, identity = sigmoid_identity_terms(sigmoid_sphere_field(beta, d, V=V), beta, x)
    return jnp.abs(rate - identity) / identity


def fitted_slope(n, errors) -> float:
    """The least-squares exponent of ``errors ~ n^a`` over the finite positive errors (NaN
    without two sizes: linear attention's dynamic error sits at round-off, often exactly 0)."""
    from jaxdyn._numerics import fit_power_law

    keep = np.isfinite(errors) & (errors > 0)
    return fit_power_law(n[keep], errors[keep]).slope if np.unique(n[keep]).size > 1 else np.nan
