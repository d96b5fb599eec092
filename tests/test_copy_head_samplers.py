"""Adam to the MAP, SGLD over (W, G) and MALA on G (copy_head.md, "Validation protocol")."""

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn.copyhead as ch
from jaxdyn.copyhead import _heads, _measure, _samplers, _task, _train
from jaxdyn.copyhead._compare import critical_value


def _stats(P, L, V, seed=0, P_max=None):
    X, Y = ch.copy_task(jax.random.key(seed), P_max or P, L, V)
    w = (jnp.arange(P_max or P) < P).astype(X.dtype)
    return ch.copy_statistics(X, Y, w)


def test_sgld_step_is_langevin_without_a_half_factor():
    """blackjax convention: theta + h grad log p + sqrt(2 h T) xi (documented in _train)."""
    stats = _stats(6, 4, 3)
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead())
    kernel = _samplers.sgld_kernel(posterior)
    pos = {"W": 0.3 * jnp.ones((3, 3)), "g": 0.2 * jnp.eye(4)}
    h = 1e-3
    grad = jax.grad(lambda p: -posterior.energy(p["W"], p["g"], stats))(pos)
    det = kernel.step(jax.random.key(0), pos, stats, h, temperature=0.0)
    for k in pos:
        assert jnp.allclose(det[k], pos[k] + h * grad[k], atol=1e-14)
    noise = jax.jit(jax.vmap(lambda k: kernel.step(k, pos, stats, h)["W"]))(
        jax.random.split(jax.random.key(1), 1500)
    ) - (pos["W"] + h * grad["W"])
    # the sample variance of n i.i.d. normals has relative standard error sqrt(2 / n)
    assert abs(float(jnp.var(noise)) / (2 * h) - 1) < 5 * np.sqrt(2 / noise.size)


def test_map_objective_is_the_profile_of_the_joint_energy():
    """min_W E(W, G) = S(G) - (V/2) ln det(I + kappa M / T) + ||Y||^2 / 2T."""
    L, V, T, sw2 = 5, 3, 0.8, 1.4
    stats = _stats(7, L, V)
    posterior = ch.CopyHeadPosterior(ch.LinearCopyHead(), T, sw2)
    for seed in range(2):
        G = jax.random.normal(jax.random.key(seed), (L, L))
        M, B = stats.moments(posterior.attention(G))
        W_star = jnp.linalg.solve(M + (T * V / sw2) * jnp.eye(V), B)
        assert float(jnp.max(jnp.abs(W_star - posterior.readout(G, stats)))) < 1e-12
        E = posterior.energy(W_star, G, stats)
        S = posterior.action(G, stats)
        _, logdet = jnp.linalg.slogdet(jnp.eye(V) + (sw2 / V) * M / T)
        assert abs(float(E - (S - 0.5 * V * logdet + stats.yy / (2 * T)))) < 1e-9


def _newton_iterates(posterior, params, stats, steps=6):
    """Newton's iteration on the joint energy from ``params``: every iterate and the smallest
    Hessian eigenvalue at the last."""
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    energy = lambda v: posterior.energy(unravel(v)["W"], unravel(v)["G"], stats)

    def step(v, _):
        v = v - jnp.linalg.solve(jax.hessian(energy)(v), jax.grad(energy)(v))
        return v, v

    last, iterates = jax.lax.scan(step, flat, None, length=steps)
    return jax.vmap(unravel)(iterates), jnp.linalg.eigvalsh(jax.hessian(energy)(last))[0]


@pytest.mark.slow
@pytest.mark.heavy
def test_adam_reaches_the_map_theory_minimum():
    """Adam (vmapped over P) on the expected statistics of P sequences, for which the reduced
    MAP theory is exact, ends in the basin of the theory's minimum: Newton's iteration from
    Adam's end point converges (quadratically, 6 steps) to a minimum of the joint energy whose
    order parameters equal the theory's global minimum (1e-8); Adam's remaining error is
    what its gradient says: within twice the first Newton step (the second-order remainder)."""
    L, V = 16, 4
    posterior = ch.CopyHeadPosterior(ch.LinearCopyHead(alpha=1.0))
    Ps = jnp.array([3.0, 400.0])

    def train_and_refine(P):
        stats = _task.population_statistics(L, V, P)
        p, trace = ch.train_map(
            jax.random.key(4), posterior, stats, steps=1200, learning_rate=jnp.asarray(0.02)
        )
        iterates, lowest = _newton_iterates(posterior, p, stats)
        order = lambda q: jnp.stack(
            [_measure.measure(posterior, q["G"], q["W"], stats)[k] for k in ("c_1", "c_G")]
        )
        return order(p), jax.vmap(order)(iterates), lowest, trace

    adam, newton, lowest, trace = jax.jit(jax.vmap(train_and_refine))(Ps)
    assert bool(jnp.all(trace[:, -1] <= trace[:, 0]))
    assert bool(jnp.all(lowest > 0))  # minima, not saddles
    model = ch.LinearReduced(L=L, V=V, alpha=1.0, objective=ch.Objective.map)
    for i, P in enumerate(Ps):
        x = np.asarray(ch.global_minimum(model, P).x)
        first, fixed = np.asarray(newton[i, 0]), np.asarray(newton[i, -1])
        assert np.all(np.abs(fixed - x) < 1e-8 * np.maximum(1.0, np.abs(x)))
        assert np.all(
            np.abs(np.asarray(adam[i]) - x) <= 2 * np.abs(np.asarray(adam[i]) - first) + 1e-9
        )


@pytest.mark.slow
@pytest.mark.heavy
def test_mala_samples_the_exact_posterior_of_G():
    """Tiny problem: MALA's posterior mean of (c_1, c_G) equals self-normalised importance
    sampling from the prior with weights exp(-(S(G) - ||G||^2 / 2)), within 4 combined
    standard errors (over 24 chains; the importance sampler's by the delta method)."""
    L, V, P = 3, 2, 2
    stats = _stats(P, L, V, seed=5)
    posterior = ch.CopyHeadPosterior(ch.LinearCopyHead(alpha=0.0))
    G = jax.random.normal(jax.random.key(6), (50_000, L, L))
    S = jax.jit(jax.vmap(lambda g: posterior.action(g, stats)))(G)
    logw = -(S - jnp.sum(G**2, axis=(1, 2)) / 2)
    w = jnp.exp(logw - jnp.max(logw))
    w = w / jnp.sum(w)
    c1, cG = ch.order_parameters(G)
    sign = jnp.where(c1 + cG < 0, -1.0, 1.0)  # measure() reports the mirror representative
    c1, cG = sign * c1, sign * cG
    exact = np.array([float(jnp.sum(w * c1)), float(jnp.sum(w * cG))])
    # delta-method standard error of the self-normalised estimate: sum w_i^2 (x_i - mean)^2
    exact_se = np.array(
        [float(jnp.sqrt(jnp.sum(w**2 * (x - m) ** 2))) for x, m in ((c1, exact[0]), (cG, exact[1]))]
    )

    def chain(key):
        s = ch.sample_mala(
            key, posterior, stats, step_size=0.3, burn_in=100, num_samples=100, thin=5
        )
        return jnp.stack([s["c_1"], s["c_G"]], -1), s["acceptance"]

    samples, acc = jax.jit(jax.vmap(chain))(jax.random.split(jax.random.key(7), 24))
    assert 0.3 < float(jnp.mean(acc)) < 1.0
    chain_means = np.asarray(jnp.mean(samples, axis=1))  # (24, 2): independent chains
    mean = chain_means.mean(0)
    se = chain_means.std(0, ddof=1) / np.sqrt(24)
    assert np.all(np.abs(mean - exact) < 4 * np.hypot(se, exact_se))


@pytest.mark.slow
def test_sgld_agrees_with_mala_and_modes_with_the_saddle_point():
    """Softmax, copy phase, 4 datasets: SGLD's G-marginal and MALA (the same law exp(-S(G)))
    agree on the posterior mean of a_G within k standard errors over datasets, k the two-sided
    99% Student-t quantile for 4 datasets (5.84, as the experiments use); the posterior mode
    (Adam on S(G) from MALA's end), bootstrap-corrected for its finite-P bias, agrees with the
    reduced saddle point within k standard errors plus twice the mean Newton estimate of the
    optimiser's remaining error. (The posterior mean sits above the mode by the fluctuations
    of the scores: compared here with nothing.)"""
    L, V, P = 16, 4, 60
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead())
    a_G = lambda G: ch.order_parameters(posterior.attention(G))[1]

    def mode(stats, G0):
        G = _train.minimise_action(posterior, stats, G0, steps=2000, learning_rate=0.02)
        error = ch.newton_estimate(lambda g: posterior.action(g, stats), G, lambda g: a_G(g)[None])
        return G, a_G(G), error.bound()[0]

    def one(key):
        k_data, k1, k2, k3 = jax.random.split(key, 4)
        X, Y = ch.copy_task(k_data, P, L, V)
        stats = ch.copy_statistics(X, Y)
        s = ch.sample_sgld(
            k1, posterior, stats, burn_in=1500, num_samples=20, thin=10, g_preconditioner=16.0
        )
        m = ch.sample_mala(
            k2, posterior, stats, step_size=0.03, burn_in=1500, num_samples=20, thin=10
        )
        G, a_mode, error = mode(stats, m["G_final"])
        boot = ch.copy_statistics(X, Y, _task.bootstrap_weights(k3, jnp.ones(P)))
        _, a_boot, error_boot = mode(boot, G)
        return jnp.mean(s["c_G"]), jnp.mean(m["c_G"]), 2 * a_mode - a_boot, 2 * error + error_boot

    sg, ma, modes, errors = (
        np.asarray(v) for v in jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(9), 4))
    )
    k = critical_value(4)
    se = np.std(sg - ma, ddof=1) / 2.0
    assert abs(float(np.mean(sg - ma))) < k * se, (float(np.mean(sg - ma)), se, k)
    theory = ch.SoftmaxReduced(L=L, V=V)
    expected = float(theory.order(ch.global_minimum(theory, jnp.asarray(float(P))).x)["a_G"])
    tolerance = k * np.std(modes, ddof=1) / 2.0 + 2.0 * np.mean(errors)
    assert abs(float(np.mean(modes)) - expected) < tolerance, (modes, expected, tolerance)


@pytest.mark.parametrize("head", ["softmax", "cosine"])
def test_a_name_is_not_a_head(head):
    """Heads are objects: a name is refused (in one line where no type checker runs first)."""
    with pytest.raises(TypeError, match="head"):
        ch.CopyHeadPosterior(head)
    with pytest.raises(TypeError, match="head must be an AbstractCopyHead") as info:
        _heads.check_head(head)
    assert "\n" not in str(info.value)


@pytest.mark.slow
@pytest.mark.heavy
def test_minimise_action_reaches_a_stationary_point_of_the_exact_action():
    L, V = 6, 3
    stats = _stats(10, L, V, seed=11)
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead())
    G0 = 2.0 * _task.shift_matrix(L)
    f = jax.jit(lambda G: posterior.action(G, stats))
    G = jax.jit(
        lambda g: _train.minimise_action(
            posterior, stats, g, steps=1500, learning_rate=jnp.asarray(0.05)
        )
    )(G0)
    assert float(f(G)) < float(f(G0))
    assert float(jnp.max(jnp.abs(jax.grad(f)(G)))) < 1e-3


def test_minibatch_gradient_is_unbiased():
    """E over draw_minibatch of grad(minibatch_energy) = grad(joint_energy): exact with
    batch_size 1 by enumerating the sequences with their draw probabilities; padding is never
    drawn and the draw frequencies follow the weights."""
    L, V, P, P_max = 5, 3, 6, 9
    X, Y = ch.copy_task(jax.random.key(11), P_max, L, V)
    w = (jnp.arange(P_max) < P).astype(X.dtype)
    stats = ch.copy_statistics(X, Y, w)
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead(), 0.7, 1.3, 0.8)
    W = jax.random.normal(jax.random.key(12), (V, V))
    G = jax.random.normal(jax.random.key(13), (L, L))
    full = jax.jit(jax.grad(lambda W, G: posterior.energy(W, G, stats), (0, 1)))(W, G)

    def one(x, y):  # batch_size 1, drawn with probability 1 / P
        batch = _samplers.Minibatch(x[None], y[None], jnp.sum(w))
        energy = lambda W, G: _samplers.minibatch_energy(posterior, W, G, batch)
        return jax.grad(energy, (0, 1))(W, G)

    per_sequence = jax.jit(jax.vmap(one))(X[:P], Y[:P])
    for f, g in zip(full, per_sequence, strict=True):
        m = jnp.mean(g, axis=0)
        assert float(jnp.max(jnp.abs(f - m))) < 1e-12 * float(jnp.max(jnp.abs(f)))
    labels = jnp.arange(P_max)[:, None, None] * jnp.ones((1, L, V))
    draws = jax.jit(jax.vmap(lambda k: _samplers.draw_minibatch(k, (labels, Y, w), 4).X))(
        jax.random.split(jax.random.key(14), 3000)
    )[..., 0, 0]
    counts = np.bincount(np.asarray(draws).astype(int).ravel(), minlength=P_max)
    assert counts[P:].sum() == 0
    assert np.all(np.abs(counts[:P] / counts.sum() - 1 / P) < 0.02)  # 12000 draws: se 0.003
    batch = _samplers.draw_minibatch(jax.random.key(15), (X, Y, w), 4)
    assert abs(float(batch.scale) - P / 4) < 1e-12


def test_minibatch_sgld_needs_data():
    with pytest.raises(ValueError, match="batch_size needs data"):
        ch.sample_sgld(
            jax.random.key(0),
            ch.CopyHeadPosterior(),
            _stats(6, 4, 3),
            step_size=1e-3,
            burn_in=2,
            num_samples=2,
            thin=1,
            batch_size=2,
        )


@pytest.mark.slow
def test_minibatch_sgld_runs():
    stats = _stats(6, 4, 3)
    X, Y = ch.copy_task(jax.random.key(0), 6, 4, 3)
    out = ch.sample_sgld(
        jax.random.key(0),
        ch.CopyHeadPosterior(),
        stats,
        burn_in=5,
        num_samples=3,
        thin=2,
        batch_size=2,
        data=(X, Y, jnp.ones(6)),
    )
    assert out["c_G"].shape == (3,) and bool(jnp.all(jnp.isfinite(out["c_G"])))


class ScaledLinear(_heads.AbstractOddCopyHead):
    """A user's head: A = G / sqrt(L)."""

    def weights(self, G):
        return G / jnp.sqrt(G.shape[-1])


@pytest.mark.slow
@pytest.mark.heavy
def test_user_head_trains_to_a_stationary_point_and_samples_like_mala():
    """Adam reaches a stationary point of the joint energy with a user's head; SGLD's
    G-marginal and MALA agree on the posterior mean of the exact action S(G) within 4
    combined standard errors over 16 independent chains each."""
    L, V, P = 5, 3, 10
    stats = _stats(P, L, V, seed=2)
    posterior = ch.CopyHeadPosterior(ScaledLinear(), 0.8)
    params, trace = jax.jit(
        lambda k: ch.train_map(k, posterior, stats, steps=3000, learning_rate=0.02)
    )(jax.random.key(0))
    grads = posterior.grad(params["W"], params["G"], stats)
    assert max(float(jnp.max(jnp.abs(g))) for g in grads) < 1e-3
    assert float(trace[-1]) < float(trace[0])

    def chains(key):
        k1, k2 = jax.random.split(key)
        s = ch.sample_sgld(
            k1,
            posterior,
            stats,
            burn_in=2000,
            num_samples=40,
            thin=20,
            step_size=ch.sgld_step_size(posterior, stats, scale=0.05),
        )
        m = ch.sample_mala(
            k2, posterior, stats, step_size=0.1, burn_in=300, num_samples=40, thin=10
        )
        return jnp.mean(s["action"]), jnp.mean(m["action"])

    sg, ma = jax.jit(jax.vmap(chains))(jax.random.split(jax.random.key(3), 16))
    se = np.hypot(np.std(sg, ddof=1), np.std(ma, ddof=1)) / 4.0
    assert abs(float(jnp.mean(sg) - jnp.mean(ma))) < 4 * se


def test_sgld_step_size_is_scale_over_the_largest_curvature_in_W():
    L, V, P = 6, 4, 9
    stats = _stats(P, L, V, seed=4)
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead(), 0.7, 1.3)
    M, _ = stats.moments(_task.uniform_matrix(L))
    expected = 0.2 / (V / 1.3 + float(jnp.linalg.eigvalsh(M)[-1]) / 0.7)
    assert abs(float(ch.sgld_step_size(posterior, stats)) / expected - 1) < 1e-12
    G = jax.random.normal(jax.random.key(0), (L, L))
    lam = jax.jit(
        lambda g: jnp.linalg.eigvalsh(
            jax.hessian(lambda w: posterior.energy(w.reshape(V, V), g, stats))(jnp.zeros(V * V))
        )[-1]
    )(G)
    h = float(jax.jit(lambda g: ch.sgld_step_size(posterior, stats, G=g, scale=1.0))(G))
    assert abs(h * float(lam) - 1) < 1e-10


@pytest.mark.slow
@pytest.mark.heavy
def test_single_precision_samplers_and_adam_stay_single_and_track_double():
    """float32 statistics and posterior (cast_floating) keep SGLD, MALA's action and Adam in
    float32; MALA (same proposals: its state stays in the default dtype) and Adam from a
    deterministic start follow their float64 runs to float32 rounding."""
    L, V = 6, 3
    stats = _stats(12, L, V)
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead())
    s32, p32 = _task.cast_floating(stats, jnp.float32), _task.cast_floating(posterior, jnp.float32)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(s32))
    kw = dict(burn_in=10, num_samples=4, thin=2)
    sgld = ch.sample_sgld(jax.random.key(0), p32, s32, step_size=1e-3, **kw)
    assert sgld["G_final"].dtype == jnp.float32
    assert np.all(np.isfinite(sgld["c_G"]))
    G0 = 2.0 * _task.shift_matrix(L)
    mala = [
        ch.sample_mala(jax.random.key(1), p, s, step_size=0.05, G0=G0, **kw)
        for p, s in ((p32, s32), (posterior, stats))
    ]
    np.testing.assert_allclose(mala[0]["c_G"], mala[1]["c_G"], atol=1e-4)
    fits = [
        ch.train_map(jax.random.key(2), p, s, steps=200, learning_rate=0.02, init_scale=0.0, G0=G0)[
            0
        ]
        for p, s in ((p32, s32), (posterior, stats))
    ]
    assert fits[0]["G"].dtype == jnp.float32 and fits[1]["G"].dtype == jnp.float64
    np.testing.assert_allclose(fits[0]["G"], fits[1]["G"], atol=1e-3)


def test_mala_starting_step_closed_form():
    """h_G = scale (L^2)^{-1/3} / (1 + P L / (16 V T)) at L = 64, V = 8, T = 1, P = 64:
    0.4 / (16 x 33)."""
    assert np.isclose(_samplers.mala_step_size(64.0, 64, 8, 1.0, 0.4), 0.4 / (16 * 33))
    # twice the temperature halves the data term: 1 + 16 = 17
    assert np.isclose(_samplers.mala_step_size(64.0, 64, 8, 2.0, 0.4), 0.4 / (16 * 17))
