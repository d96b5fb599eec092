"""Networks, not just theory: Adam to the MAP, SGLD over (W, G), MALA on G alone.

copy_head.md, "Validation protocol". All three are pure ``init`` / ``step`` functions driven by
``lax.scan``; hyperparameters (learning rate, step size, temperature) are traced arrays, so a
sweep over P and seeds compiles once. Data enter through :class:`CopyStatistics` (weights mask
padded sequences), so every step costs O(L^2 V^2) whatever P.

Conventions:
- Adam minimises the joint energy E(W, G) (see :func:`joint_energy`), whose prior terms are the
  weight decay V / sigma_w^2 on W and 1 / sigma_g^2 on G (coupled L2, i.e. weight decay = prior
  precisions). Its minimum is the joint MAP; the matching theory is the reduced action with
  ``objective="map"``.
- SGLD (blackjax 1.7.1): theta <- theta + h grad log p(theta) + sqrt(2 h) xi, with log p = -E.
  No 1/2 factor: an "eps/2" library step eps equals blackjax/jaxdyn h = eps / 2. By default the
  gradient is the exact full-data gradient (the dataset is summarised by sufficient statistics),
  i.e. the unadjusted Langevin limit of SGLD; its stationary law is ~ exp(-E) up to O(h) bias,
  whose G-marginal is exp(-S(G)) (theory with ``objective="marginal"``). Optionally
  (``batch_size``) a minibatch stochastic gradient, SGLD proper.
- MALA (blackjax): G <- G + h grad(-S)(G) + sqrt(2 h) xi with a Metropolis correction: exact
  samples of p(G | D) ~ exp(-S(G)).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float

from .._custom_types import Key
from ._action import (
    action_from_statistics,
    attention_matrix,
    joint_energy,
    joint_energy_gradient,
    sequence_loss,
)
from ._order import logit_gap, order_parameters
from ._task import CopyStatistics, shift_matrix


class HeadSettings(NamedTuple):
    """Model settings shared by the trainers: attention name, alpha, conventions, priors."""

    attention: str = "softmax"
    alpha: float = 1.0
    cyclic: bool = True
    temperature: float | Array = 1.0
    sigma_w2: float | Array = 1.0
    sigma_g2: float | Array = 1.0

    def kwargs(self) -> dict:
        return dict(
            attention=self.attention,
            alpha=self.alpha,
            cyclic=self.cyclic,
            temperature=self.temperature,
            sigma_w2=self.sigma_w2,
            sigma_g2=self.sigma_g2,
        )

    def net_kwargs(self) -> dict:
        return dict(attention=self.attention, alpha=self.alpha, cyclic=self.cyclic)


def measure(
    G: Float[Array, "L L"],
    W,
    stats: CopyStatistics,
    head: HeadSettings,
    test: CopyStatistics | None = None,
) -> dict:
    """Order parameters, losses (train, and test when given) and exact action of (W, G)."""
    A = attention_matrix(G, **head.net_kwargs())
    c1, cG = order_parameters(A, cyclic=head.cyclic)
    if head.attention == "linear":
        # Exact mirror symmetry (A, W) -> (-A, -W): report the representative with row sums >= 0.
        sign = jnp.where(c1 + cG < 0, -1.0, 1.0)
        c1, cG = sign * c1, sign * cG
    out = {
        "c_1": c1,
        "c_G": cG,
        "c_G_normalised": jnp.sqrt(A.shape[-1]) * cG,
        "delta": logit_gap(G, cyclic=head.cyclic),
        "copy_weight": jnp.sum(A * shift_matrix(A.shape[-1], cyclic=head.cyclic)) / A.shape[-1],
        "action": action_from_statistics(G, stats, **head.kwargs()),
    }
    if W is not None:
        out["loss"] = sequence_loss(W, G, stats, **head.net_kwargs())
        out["energy"] = joint_energy(W, G, stats, **head.kwargs())
        if test is not None:
            out["test_loss"] = sequence_loss(W, G, test, **head.net_kwargs())
    return out


# --------------------------------------------------------------------------- Adam to the MAP


class MAPState(NamedTuple):
    params: dict
    opt_state: optax.OptState


def map_init(
    key: Key, L: int, V: int, learning_rate, *, init_scale=1e-2, copy_start=0.0
) -> MAPState:
    """Small random (W, G); ``copy_start`` adds that multiple of the copy pattern to G (a start
    from the copy state, for hysteresis and the convergence filter)."""
    kw, kg = jax.random.split(key)
    G = init_scale * jax.random.normal(kg, (L, L)) + copy_start * shift_matrix(L)
    W = init_scale * jax.random.normal(kw, (V, V))
    params = {"W": W, "G": G}
    opt = optax.inject_hyperparams(optax.adam)(learning_rate=learning_rate)
    return MAPState(params, opt.init(params))


def map_step(state: MAPState, stats: CopyStatistics, head: HeadSettings) -> tuple[MAPState, Array]:
    """One Adam step on the joint energy E(W, G); returns the new state and E before the step."""
    opt = optax.inject_hyperparams(optax.adam)(learning_rate=0.0)  # lr lives in opt_state

    def energy(p):
        return joint_energy(p["W"], p["G"], stats, **head.kwargs())

    value, grads = jax.value_and_grad(energy)(state.params)
    updates, opt_state = opt.update(grads, state.opt_state, state.params)
    return MAPState(optax.apply_updates(state.params, updates), opt_state), value


def train_map(
    key: Key,
    stats: CopyStatistics,
    head: HeadSettings,
    *,
    steps: int,
    learning_rate,
    init_scale=1e-2,
    copy_start=0.0,
    record_every: int = 10,
) -> tuple[dict, Float[Array, " n"]]:
    """Adam to the joint MAP with ``lax.scan`` and a cosine-decayed learning rate (peak
    ``learning_rate``, a traced array), so the last steps are gradient-flow-like and the
    final point is a converged minimum; returns final params and the energy trace."""
    L, V = stats.L, stats.V
    state = map_init(key, L, V, learning_rate, init_scale=init_scale, copy_start=copy_start)
    n_outer = max(steps // record_every, 1)
    total = n_outer * record_every

    def inner(carry, _):
        state, t = carry
        lr = learning_rate * (0.01 + 0.99 * 0.5 * (1.0 + jnp.cos(jnp.pi * t / total)))
        hyper = {**state.opt_state.hyperparams, "learning_rate": lr}
        state = MAPState(state.params, state.opt_state._replace(hyperparams=hyper))
        state, e = map_step(state, stats, head)
        return (state, t + 1), e

    def outer(carry, _):
        carry, es = jax.lax.scan(inner, carry, None, length=record_every)
        return carry, es[-1]

    (state, _), trace = jax.lax.scan(outer, (state, jnp.asarray(0.0)), None, length=n_outer)
    return state.params, trace


def minimise_action(
    stats: CopyStatistics,
    head: HeadSettings,
    G0: Float[Array, "L L"],
    *,
    steps: int,
    learning_rate,
) -> Float[Array, "L L"]:
    """Local minimiser of the exact action S(G) (W integrated out) from G0: Adam with a
    cosine-decayed learning rate (small steps keep it in G0's basin: hysteresis runs)."""
    opt = optax.inject_hyperparams(optax.adam)(learning_rate=learning_rate)
    f = lambda G: action_from_statistics(G, stats, **head.kwargs())

    def step(carry, t):
        G, state = carry
        lr = learning_rate * (0.01 + 0.99 * 0.5 * (1.0 + jnp.cos(jnp.pi * t / steps)))
        state = state._replace(hyperparams={**state.hyperparams, "learning_rate": lr})
        updates, state = opt.update(jax.grad(f)(G), state, G)
        return (optax.apply_updates(G, updates), state), None

    (G, _), _ = jax.lax.scan(step, (G0, opt.init(G0)), jnp.arange(steps, dtype=G0.dtype))
    return G


# --------------------------------------------------------------------------- SGLD on (W, G)


def _blackjax():
    """blackjax, imported on first use: importing it starts JAX's backends, and importing
    jaxdyn must not (``jaxdyn.sweep.use_cpu_devices`` has to run before that)."""
    import blackjax

    return blackjax


def _noise_layout(sgld, partitionable_noise: bool):
    """blackjax SGLD with its step traced under ``jax.threefry_partitionable(False)`` unless
    ``partitionable_noise`` (see :func:`sgld_kernel`)."""
    if partitionable_noise:
        return sgld

    def step(rng_key, position, minibatch, step_size, temperature=1.0):
        with jax.threefry_partitionable(False):
            return sgld.step(rng_key, position, minibatch, step_size, temperature)

    return sgld._replace(step=step)


def sgld_kernel(
    stats: CopyStatistics,
    head: HeadSettings,
    g_scale=1.0,
    *,
    partitionable_noise: bool = False,
):
    """blackjax SGLD over {"W", "g"} with G = g_scale * g and the exact gradient of
    log p = -E(W, G) (:func:`joint_energy_gradient`, written out from the statistics that
    ``step`` receives as its minibatch). The constant-Jacobian reparametrisation leaves the law
    of G unchanged and multiplies G's effective step by g_scale^2 (a diagonal preconditioner:
    G is much less stiff than W).

    Noise: blackjax draws ``jax.random.normal(key, ...)`` each step. With threefry keys and
    ``partitionable_noise=False`` (default) the step is traced under
    ``jax.threefry_partitionable(False)``, JAX's earlier bit layout, which gets 64 random bits
    from each threefry block instead of 32: the same generator and law, 30-50% less noise
    cost (measured; the noise was a quarter to a third of an SGLD step here). Its only loss
    is automatic partitioning of one large random array over devices, which these per-chain
    draws do not use (sweeps shard over chains). ``True`` keeps the global setting.
    ``stats`` is unused (kept for the signature); the statistics arrive with each ``step``.
    """
    del stats

    def grad_log_density(position, minibatch):
        grad_W, grad_G = joint_energy_gradient(
            position["W"], g_scale * position["g"], minibatch, **head.kwargs()
        )
        return {"W": -grad_W, "g": -g_scale * grad_G}

    return _noise_layout(_blackjax().sgld(grad_log_density), partitionable_noise)


class Minibatch(NamedTuple):
    """Sequences drawn for one stochastic-gradient step, and the factor that makes their summed
    loss an unbiased estimate of the weighted full-data loss."""

    X: Float[Array, "b L V"]
    Y: Float[Array, "b L V"]
    scale: Float[Array, ""]


def draw_minibatch(
    key: Key,
    data: tuple[Array, Array, Array],
    batch_size: int,
) -> Minibatch:
    """``batch_size`` sequences drawn with replacement, with probability w_mu / sum(w), from
    ``data = (X, Y, weights)`` (padded datasets: weights 1 real, 0 padding); with
    scale = sum(w) / batch_size, scale * sum_i f(mu_i) is an unbiased estimate of
    sum_mu w_mu f(mu) for any per-sequence f (here the squared error)."""
    X, Y, w = data
    total = jnp.sum(w)
    idx = jax.random.choice(key, X.shape[0], (batch_size,), replace=True, p=w / total)
    return Minibatch(X[idx], Y[idx], total / batch_size)


def minibatch_energy(W, G, batch: Minibatch, head: HeadSettings) -> Float[Array, ""]:
    """Stochastic joint energy: (scale / 2T) sum_i ||Y_i - A X_i W||^2 + the two priors; its
    expectation over :func:`draw_minibatch` is :func:`joint_energy` (up to ||Y||^2 terms that
    do not depend on W, G). Costs O(b L^2 V + b L V^2)."""
    A = attention_matrix(G, **head.net_kwargs())
    resid = batch.Y - jnp.einsum("lm,bmv,vw->blw", A, batch.X, W)
    V = W.shape[0]
    return (
        batch.scale * jnp.sum(resid**2) / (2.0 * head.temperature)
        + V * jnp.sum(W**2) / (2.0 * head.sigma_w2)
        + jnp.sum(G**2) / (2.0 * head.sigma_g2)
    )


def sgld_minibatch_kernel(head: HeadSettings, g_scale=1.0, *, partitionable_noise: bool = False):
    """blackjax SGLD over {"W", "g"} (as :func:`sgld_kernel`) whose ``step`` takes a
    :class:`Minibatch`: the stochastic gradient of :func:`minibatch_energy`, i.e. SGLD proper
    (Welling and Teh): the gradient's variance adds h^2 Var(grad) per step to the injected 2h,
    a bias that vanishes with h, on top of the O(h) discretisation bias."""

    def grad_log_density(position, batch):
        return jax.grad(
            lambda p: -minibatch_energy(p["W"], g_scale * p["g"], batch, head)
        )(position)

    return _noise_layout(_blackjax().sgld(grad_log_density), partitionable_noise)


def sample_sgld(
    key: Key,
    stats: CopyStatistics,
    head: HeadSettings,
    *,
    step_size,
    burn_in: int,
    num_samples: int,
    thin: int,
    init_scale=1e-2,
    copy_start=0.0,
    g_preconditioner=1.0,
    test: CopyStatistics | None = None,
    data: tuple[Array, Array, Array] | None = None,
    batch_size: int | None = None,
) -> dict:
    """One SGLD chain: burn-in, then ``num_samples`` samples every ``thin`` steps.

    ``g_preconditioner`` is the ratio of G's step to W's step (see :func:`sgld_kernel`).
    Full batch by default: the exact gradient from ``stats``. With ``batch_size`` (and
    ``data = (X, Y, weights)``, the sequences behind ``stats``) each step uses the stochastic
    gradient of ``batch_size`` sequences drawn afresh (:func:`draw_minibatch`,
    :func:`sgld_minibatch_kernel`). Measurements always use the full ``stats``.
    Returns per-sample measurements (see :func:`measure`) and the final G.
    """
    L, V = stats.L, stats.V
    g_scale = jnp.sqrt(g_preconditioner)
    if batch_size is None:
        sgld = sgld_kernel(stats, head, g_scale)

        def update(pos, k):
            return sgld.step(k, pos, stats, step_size)
    else:
        if data is None:
            raise ValueError("batch_size needs data=(X, Y, weights), the sequences of stats")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        sgld = sgld_minibatch_kernel(head, g_scale)

        def update(pos, k):
            k_batch, k_step = jax.random.split(k)
            return sgld.step(k_step, pos, draw_minibatch(k_batch, data, batch_size), step_size)
    k0, kw, kg = jax.random.split(key, 3)
    G0 = init_scale * jax.random.normal(kg, (L, L)) + copy_start * shift_matrix(L)
    position = sgld.init({"W": init_scale * jax.random.normal(kw, (V, V)), "g": G0 / g_scale})

    def one(pos, k):
        return update(pos, k), None

    def run(pos, k, n):
        pos, _ = jax.lax.scan(one, pos, jax.random.split(k, n))
        return pos

    kb, ks = jax.random.split(k0)
    position = run(position, kb, burn_in)

    def sample(pos, k):
        pos = run(pos, k, thin)
        return pos, measure(g_scale * pos["g"], pos["W"], stats, head, test)

    position, samples = jax.lax.scan(sample, position, jax.random.split(ks, num_samples))
    samples["G_final"] = g_scale * position["g"]
    return samples


# --------------------------------------------------------------------------- MALA on G alone


def sample_mala(
    key: Key,
    stats: CopyStatistics,
    head: HeadSettings,
    *,
    step_size,
    burn_in: int,
    num_samples: int,
    thin: int,
    G0: Float[Array, "L L"] | None = None,
) -> dict:
    """MALA on p(G | D) ~ exp(-S(G)) with the exact action (W integrated out).

    Returns per-sample measurements and the mean acceptance rate after burn-in.
    """
    L = stats.L
    mala = _blackjax().mala(lambda G: -action_from_statistics(G, stats, **head.kwargs()), step_size)
    state = mala.init(jnp.zeros((L, L)) if G0 is None else G0)

    def one(st, k):
        st, info = mala.step(k, st)
        return st, info.acceptance_rate

    k_burn, k_s = jax.random.split(key)
    state, _ = jax.lax.scan(one, state, jax.random.split(k_burn, burn_in))

    def sample(st, k):
        st, acc = jax.lax.scan(one, st, jax.random.split(k, thin))
        return st, (measure(st.position, None, stats, head), jnp.mean(acc))

    state, (samples, acc) = jax.lax.scan(sample, state, jax.random.split(k_s, num_samples))
    samples["acceptance"] = acc
    samples["G_final"] = state.position
    return samples
