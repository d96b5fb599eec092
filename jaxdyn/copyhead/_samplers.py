"""Posterior samplers: SGLD over (W, G) and MALA on G alone (blackjax).

copy_head.md, "Validation protocol".
- SGLD (blackjax 1.7.1): theta <- theta + h grad log p(theta) + sqrt(2 h) xi, log p = -E.
  No 1/2 factor: a library with the "eps/2" convention and step eps matches h = eps / 2. By
  default the gradient is the exact full-data gradient (the dataset is summarised by its
  sufficient statistics), the unadjusted Langevin limit of SGLD; its stationary law is
  exp(-E) up to O(h), whose G-marginal is exp(-S(G)) (theory with ``objective="marginal"``).
  With ``batch_size`` the gradient comes from a minibatch: SGLD proper.
- MALA (blackjax): G <- G + h grad(-S)(G) + sqrt(2 h) xi with a Metropolis correction: exact
  samples of p(G | D) ~ exp(-S(G)).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._custom_types import Key
from ._measure import measure
from ._posterior import CopyHeadPosterior
from ._task import CopyStatistics, uniform_matrix


def _blackjax():
    """blackjax, imported on first use: importing it starts JAX's backends, and importing
    jaxdyn must not (``jaxdyn.distributed._devices.use_cpu_devices`` has to run before that)."""
    import blackjax

    return blackjax


def sgld_step_size(
    posterior: CopyHeadPosterior,
    stats: CopyStatistics,
    *,
    scale: float | ArrayLike = 0.2,
    G: Float[ArrayLike, "L L"] | None = None,
) -> Float[Array, ""]:
    """Default SGLD step: h = scale / (V / sigma_w^2 + lambda / T).

    V / sigma_w^2 + lambda / T is the largest curvature of the energy in W, with lambda the
    largest eigenvalue of M(A) = sum_mu X^T A^T A X at the attention A(G); without ``G``,
    at uniform pooling A = 1 1^T / L (about P L / V: the value for any attention whose rows
    sum to one, e.g. every softmax head). ``scale`` < 1 keeps the Euler step stable with
    margin (the O(h) bias of the stationary law grows with it). Pass the state the chains
    will visit as ``G`` for heads whose row sums are not one.
    """
    A = uniform_matrix(stats.L) if G is None else posterior.attention(G)
    M, _ = stats.moments(A)
    lam = jnp.linalg.eigvalsh(M)[-1]
    curvature = stats.V / posterior.sigma_w2 + lam / posterior.temperature
    return jnp.asarray(scale) / curvature


def mala_step_size(P, L: int, V: int, temperature: float, scale: float = 0.4):
    """A starting MALA step on G for P sequences (blackjax convention, no 1/2):
    h_G = scale (L^2)^{-1/3} / (1 + P L / (16 V T)), MALA's d^{-1/3} in d = L^2 dimensions,
    shrunk as the data's curvature (of order P L / (V T)) outgrows the prior's; burn-in
    adapts it to acceptance 0.574."""
    return scale / (float(L) ** (2.0 / 3.0) * (1.0 + P * L / (16.0 * V * temperature)))


def _noise_layout(sgld, partitionable_noise: bool):
    """blackjax SGLD with its step traced under ``jax.threefry_partitionable(False)`` unless
    ``partitionable_noise`` (see :func:`sgld_kernel`), and its new position in the dtypes of
    the old one (blackjax 1.7.1 draws the noise in the default float dtype, so without the
    cast a float32 chain would turn float64 after one step)."""

    def step(rng_key, position, minibatch, step_size, temperature=1.0):
        if partitionable_noise:
            new = sgld.step(rng_key, position, minibatch, step_size, temperature)
        else:
            with jax.threefry_partitionable(False):
                new = sgld.step(rng_key, position, minibatch, step_size, temperature)
        return jax.tree.map(lambda x, old: x.astype(old.dtype), new, position)

    return sgld._replace(step=step)


def sgld_kernel(
    posterior: CopyHeadPosterior,
    g_scale: float | ArrayLike = 1.0,
    *,
    partitionable_noise: bool = False,
):
    """blackjax SGLD over {"W", "g"} with G = g_scale * g and the exact gradient of
    log p = -E(W, G) (:meth:`CopyHeadPosterior.grad`, from the statistics that ``step``
    receives as its minibatch). The constant-Jacobian reparametrisation leaves the law of G
    unchanged and multiplies G's effective step by g_scale^2 (a diagonal preconditioner).

    Noise: blackjax draws ``jax.random.normal(key, ...)`` each step. With threefry keys and
    ``partitionable_noise=False`` (default) the step is traced under
    ``jax.threefry_partitionable(False)``, JAX's earlier bit layout (64 random bits from each
    threefry block instead of 32): the same generator and law, cheaper noise. It only gives up
    automatic partitioning of one large random array over devices, which these per-chain
    draws do not use. ``True`` keeps the global setting.
    """

    def grad_log_density(position, stats):
        grad_W, grad_G = posterior.grad(position["W"], g_scale * position["g"], stats)
        return {"W": -grad_W, "g": -g_scale * grad_G}

    return _noise_layout(_blackjax().sgld(grad_log_density), partitionable_noise)


class Minibatch(NamedTuple):
    """Sequences drawn for one stochastic-gradient step, and the factor that makes their summed
    loss an unbiased estimate of the weighted full-data loss."""

    X: Float[Array, "b L V"]
    Y: Float[Array, "b L V"]
    scale: Float[Array, ""]


def draw_minibatch(key: Key, data: tuple[Array, Array, Array], batch_size: int) -> Minibatch:
    """``batch_size`` sequences drawn with replacement, with probability w_mu / sum(w), from
    ``data = (X, Y, weights)``; with scale = sum(w) / batch_size, scale * sum_i f(mu_i) is an
    unbiased estimate of sum_mu w_mu f(mu) for any per-sequence f."""
    X, Y, w = data
    total = jnp.sum(w)
    idx = jax.random.choice(key, X.shape[0], (batch_size,), replace=True, p=w / total)
    return Minibatch(X[idx], Y[idx], total / batch_size)


def minibatch_energy(
    posterior: CopyHeadPosterior,
    W: Float[ArrayLike, "V V"],
    G: Float[ArrayLike, "L L"],
    batch: Minibatch,
) -> Float[Array, ""]:
    """Stochastic joint energy (scale / 2T) sum_i ||Y_i - A X_i W||^2 + the two priors; its
    expectation over :func:`draw_minibatch` is :meth:`CopyHeadPosterior.energy` (up to
    ||Y||^2 terms independent of W, G). Costs O(b L^2 V + b L V^2)."""
    W = jnp.asarray(W)
    A = posterior.attention(G)
    resid = batch.Y - jnp.einsum("lm,bmv,vw->blw", A, batch.X, W)
    V = W.shape[0]
    return (
        batch.scale * jnp.sum(resid**2) / (2.0 * posterior.temperature)
        + V * jnp.sum(W**2) / (2.0 * posterior.sigma_w2)
        + posterior.prior_energy(G)
    )


def sgld_minibatch_kernel(
    posterior: CopyHeadPosterior,
    g_scale: float | ArrayLike = 1.0,
    *,
    partitionable_noise: bool = False,
):
    """blackjax SGLD over {"W", "g"} (as :func:`sgld_kernel`) whose ``step`` takes a
    :class:`Minibatch`: the stochastic gradient of :func:`minibatch_energy` (Welling and
    Teh). The gradient's variance adds h^2 Var(grad) per step to the injected 2h, a bias that
    vanishes with h, on top of the O(h) discretisation bias."""

    def grad_log_density(position, batch):
        return jax.grad(lambda p: -minibatch_energy(posterior, p["W"], g_scale * p["g"], batch))(
            position
        )

    return _noise_layout(_blackjax().sgld(grad_log_density), partitionable_noise)


def _chain_keys(key, burn_in: int, num_samples: int, thin: int):
    """The step keys of a chain, (burn-in keys, sample keys of shape (num_samples, thin))."""
    kb, ks = jax.random.split(key)
    sample = jax.vmap(lambda k: jax.random.split(k, thin))(jax.random.split(ks, num_samples))
    return jax.random.split(kb, burn_in), sample


def _scan_chain(step, carry, key, burn_in: int, num_samples: int, thin: int, record):
    """Burn-in, then ``num_samples`` records every ``thin`` steps of ``step(carry, key,
    burning)`` (``burning``: a traced flag, true during burn-in; ``record(carry)`` gives a
    sample). One scan over blocks of ``thin`` steps holds the only copy of the step in the
    program (the burn-in's whole blocks are blocks too, their records skipped by a ``cond``
    on the block index, which ``vmap`` leaves a branch); a remainder of burn_in % thin steps
    runs first. Returns the final carry and the records."""
    burn_keys, sample_keys = _chain_keys(key, burn_in, num_samples, thin)
    head = burn_in % thin
    n_burn = burn_in // thin
    if head:
        carry, _ = jax.lax.scan(lambda c, k: (step(c, k, True), None), carry, burn_keys[:head])
    blocks = jnp.concatenate(
        [burn_keys[head:].reshape(n_burn, thin, *burn_keys.shape[1:]), sample_keys]
    )
    shapes = jax.eval_shape(record, carry)

    def block(c, xs):
        i, ks = xs
        burning = i < n_burn
        c, _ = jax.lax.scan(lambda cc, k: (step(cc, k, burning), None), c, ks)
        skip = lambda cc: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        return c, jax.lax.cond(burning, skip, record, c)

    carry, records = jax.lax.scan(block, carry, (jnp.arange(blocks.shape[0]), blocks))
    return carry, jax.tree.map(lambda r: r[n_burn:], records)


def sample_sgld(
    key: Key,
    posterior: CopyHeadPosterior,
    stats: CopyStatistics,
    *,
    burn_in: int,
    num_samples: int,
    thin: int,
    step_size: float | ArrayLike | None = None,
    G0: Float[ArrayLike, "L L"] | None = None,
    init_scale: float | ArrayLike = 1e-2,
    g_preconditioner: float | ArrayLike = 1.0,
    test: CopyStatistics | None = None,
    data: tuple[Array, Array, Array] | None = None,
    batch_size: int | None = None,
) -> dict[str, Array]:
    """One SGLD chain on p(W, G | D): burn-in, then ``num_samples`` samples every ``thin`` steps.

    Starts at (W, G) = (0, G0) plus N(0, init_scale^2) noise. ``step_size`` defaults to
    :func:`sgld_step_size`; ``g_preconditioner`` is the ratio of G's step to W's. Full batch
    by default (the exact gradient from ``stats``); with ``batch_size`` (and
    ``data = (X, Y, weights)``, the sequences behind ``stats``) each step uses the stochastic
    gradient of ``batch_size`` sequences drawn afresh. Measurements always use the full
    ``stats``. Returns per-sample :func:`measure` outputs and the final G (``"G_final"``).

    The chain computes in the statistics' dtype: float32 statistics and posterior
    (:func:`cast_floating`) give a single-precision chain, with half the memory traffic of
    the O(L^2 V^2) gradient.
    """
    L, V = stats.L, stats.V
    dtype = stats.N.dtype
    h = sgld_step_size(posterior, stats) if step_size is None else step_size
    h = jnp.asarray(h, dtype)
    g_scale = jnp.sqrt(jnp.asarray(g_preconditioner, dtype))
    if batch_size is None:
        sgld = sgld_kernel(posterior, g_scale)

        def update(pos, k):
            return sgld.step(k, pos, stats, h)
    else:
        if data is None:
            raise ValueError("batch_size needs data=(X, Y, weights), the sequences of stats")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        sgld = sgld_minibatch_kernel(posterior, g_scale)

        def update(pos, k):
            k_batch, k_step = jax.random.split(k)
            return sgld.step(k_step, pos, draw_minibatch(k_batch, data, batch_size), h)

    k0, kw, kg = jax.random.split(key, 3)
    G = init_scale * jax.random.normal(kg, (L, L), dtype)
    if G0 is not None:
        G = G + jnp.asarray(G0, dtype)
    W = init_scale * jax.random.normal(kw, (V, V), dtype)
    position = sgld.init({"W": W, "g": (G / g_scale).astype(dtype)})

    def record(pos):
        return measure(posterior, g_scale * pos["g"], pos["W"], stats, test)

    position, samples = _scan_chain(
        lambda pos, k, _: update(pos, k), position, k0, burn_in, num_samples, thin, record
    )
    samples["G_final"] = g_scale * position["g"]
    return samples


def sample_mala(
    key: Key,
    posterior: CopyHeadPosterior,
    stats: CopyStatistics,
    *,
    step_size: float | ArrayLike,
    burn_in: int,
    num_samples: int,
    thin: int,
    G0: Float[ArrayLike, "L L"] | None = None,
    target_acceptance: float | None = 0.574,
) -> dict[str, Array]:
    """MALA on p(G | D) ~ exp(-S(G)) with the exact action (W integrated out), from ``G0``
    (default zero).

    With ``target_acceptance`` (default 0.574, optimal for MALA in high dimension) the step
    starts at ``step_size`` and adapts during burn-in by Robbins-Monro on ln h,
    ln h += (acceptance - target) / (t + 10)^0.6, then stays fixed, so the samples are exact;
    ``None`` keeps ``step_size`` throughout. Returns per-sample :func:`measure` outputs, the
    acceptance rate of each sampling interval (``"acceptance"``), the final G (``"G_final"``)
    and the step used for sampling (``"step_size"``).

    The action and its gradient compute in the statistics' dtype: with float32 statistics
    and posterior (:func:`cast_floating`) the O(L^2 V^2) work is single precision while the
    chain's state and the Metropolis test stay in the default float dtype.
    """
    L = stats.L
    blackjax = _blackjax()
    dtype = stats.N.dtype
    logdensity = lambda G: -posterior.action(G.astype(dtype), stats).astype(G.dtype)
    G_init = jnp.zeros((L, L)) if G0 is None else jnp.asarray(G0)
    state = blackjax.mala(logdensity, step_size).init(G_init)

    def one(carry, k, adapt):
        st, log_h, t, acc = carry
        st, info = blackjax.mala(logdensity, jnp.exp(log_h)).step(k, st)
        if target_acceptance is not None:
            change = (info.acceptance_rate - target_acceptance) / (t + 10.0) ** 0.6
            log_h = log_h + jnp.where(adapt, change, 0.0)
        # The acceptance rates summed since the end of the burn-in.
        acc = acc + jnp.where(adapt, 0.0, info.acceptance_rate)
        return st, log_h, t + 1.0, acc

    log_h = jnp.log(jnp.asarray(step_size, dtype=G_init.dtype))
    zero = jnp.zeros_like(log_h)

    def record(c):
        return measure(posterior, c[0].position.astype(dtype), None, stats), c[3]

    carry, (samples, summed) = _scan_chain(
        one, (state, log_h, zero, zero), key, burn_in, num_samples, thin, record
    )
    # The mean acceptance of each sampling interval, from the running sum.
    acc = jnp.diff(summed, prepend=0.0) / thin
    samples["acceptance"] = acc
    samples["G_final"] = carry[0].position
    samples["step_size"] = jnp.exp(carry[1])
    return samples
