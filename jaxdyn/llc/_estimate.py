"""The local learning coefficient (LLC) by SGLD localised at a chosen weight (docs/llc.md).

Singular learning theory (Watanabe 2013, WBIC; Lau et al. 2023, "Quantifying degeneracy in
singular models via the learning coefficient") defines, at a local minimum w* of the empirical
loss L_n, the localised tempered posterior

    p(w) ~ exp( -n beta L_n(w) - (gamma / 2) |w - w*|^2 ),        beta = 1 / ln n by default,

and the estimator

    lambda_hat = n beta ( E_p[L_n(w)] - L_n(w*) ).

For a regular minimum with d parameters and gamma -> 0 this is d / 2 exactly (the posterior
is Gaussian); for a singular one it tends to the real log canonical threshold as n beta grows.

The chains are SGLD (BlackJAX ``blackjax.sgld``) in BlackJAX's convention

    w <- w + eps * grad log p(w) + sqrt(2 eps) xi,           xi ~ N(0, I),

i.e. an Euler-Maruyama step of size eps of the Langevin diffusion with stationary law p.
Libraries that write the step as w <- w + (eps' / 2) grad log p + sqrt(eps') xi (devinterp,
Welling and Teh 2011) use eps' = 2 eps. All chains start at w* and run as one vmapped program.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float, Key

from jaxdyn._printing import AbstractResult


class LLCEstimate(AbstractResult):
    """An LLC estimate with its chains, standard error and diagnostics.

    Attributes:
        llc: the estimate, the mean of ``per_chain`` over chains.
        stderr: its standard error, ``std(per_chain) / sqrt(num_chains)`` (NaN for one chain).
        per_chain: ``n beta (mean_draws L(w) - L_n(w*))`` for each chain.
        loss_trace: the loss at each draw (chain x draw): the full-data loss, or the minibatch
            loss when ``batch_size`` is set (an unbiased estimate of it).
        init_loss: L_n(w*) on the full data.
        distance_sq: |w - w*|^2 at each draw (chain x draw).
        n, beta, step_size, localization: the sampler's settings (BlackJAX step convention).
        num_params: the number of real parameters d.
        half_drift: mean over chains of the estimate from the second half of the draws minus
            the estimate from the first half (in LLC units): near zero when the chains are
            stationary after burn-in.
        half_drift_stderr: its standard error over chains.
        pull_fraction: gamma E|w - w*|^2 / d. At stationarity E[(w - w*) . grad U] = d for
            U = n beta L_n + gamma |w - w*|^2 / 2 (the virial identity), so this is the share of
            that budget carried by the localisation: near 0 the pull barely constrains the chains
            (its bias on the estimate is small), near 1 the pull, not the loss, confines them.
        diverged: the number of chains whose trace is not finite.
    """

    llc: Float[Array, ""]
    stderr: Float[Array, ""]
    per_chain: Float[Array, " chain"]
    loss_trace: Float[Array, "chain draw"]
    init_loss: Float[Array, ""]
    distance_sq: Float[Array, "chain draw"]
    n: float
    beta: float
    step_size: float
    localization: float
    num_params: int
    half_drift: Float[Array, ""]
    half_drift_stderr: Float[Array, ""]
    pull_fraction: Float[Array, ""]
    diverged: Array

    @property
    def num_chains(self) -> int:
        return int(self.loss_trace.shape[0])

    @property
    def num_draws(self) -> int:
        return int(self.loss_trace.shape[1])

    def to_xarray(self):
        """The draws as an ``xarray.Dataset`` with ArviZ's ``chain`` and ``draw`` dimensions.

        Variables: ``loss`` and ``distance_sq`` (chain, draw) and ``llc`` (chain); the
        settings and the summary (``llc_mean``, ``llc_stderr``, ``init_loss``, ...) are
        attributes. ``arviz.convert_to_inference_data`` reads it as a posterior group.
        """
        import xarray as xr

        chains = np.arange(self.num_chains)
        draws = np.arange(self.num_draws)
        return xr.Dataset(
            {
                "loss": (("chain", "draw"), np.asarray(self.loss_trace)),
                "distance_sq": (("chain", "draw"), np.asarray(self.distance_sq)),
                "llc": (("chain",), np.asarray(self.per_chain)),
            },
            coords={"chain": chains, "draw": draws},
            attrs={
                "llc_mean": float(self.llc),
                "llc_stderr": float(self.stderr),
                "init_loss": float(self.init_loss),
                "n": float(self.n),
                "beta": float(self.beta),
                "step_size": float(self.step_size),
                "step_convention": "w += eps * grad log p + sqrt(2 eps) xi (BlackJAX)",
                "localization": float(self.localization),
                "num_params": int(self.num_params),
                "half_drift": float(self.half_drift),
                "half_drift_stderr": float(self.half_drift_stderr),
                "pull_fraction": float(self.pull_fraction),
                "diverged": int(self.diverged),
            },
        )


def _check_positive(name: str, value, *, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")
    return v


def _check_count(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_data(data) -> tuple[tuple[Array, ...], int]:
    if not isinstance(data, tuple | list) or len(data) == 0:
        raise TypeError(
            f"data must be a non-empty tuple of arrays with a leading sample axis, got {type(data)}"
        )
    arrays = tuple(jnp.asarray(a) for a in data)
    sizes = {a.shape[0] if a.ndim else None for a in arrays}
    if None in sizes:
        raise ValueError("every data array needs a leading sample axis (got a 0-d array)")
    if len(sizes) != 1:
        raise ValueError(f"data arrays disagree on the number of samples: {sorted(sizes)}")
    (size,) = sizes
    if size < 1:
        raise ValueError("data has no samples")
    return arrays, int(size)


class _Problem(eqx.Module):
    """The flattened sampling problem: loss of a flat parameter vector."""

    loss_fn: Callable = eqx.field(static=True)
    unravel: Callable = eqx.field(static=True)
    static: Any = eqx.field(static=True)

    def loss(self, w, batch):
        return self.loss_fn(eqx.combine(self.unravel(w), self.static), batch)


def _prepare(loss_fn, w_star, data, n, beta, batch_size):
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable as loss_fn(model, batch), got {loss_fn!r}")
    arrays, size = _check_data(data)
    params, static = eqx.partition(w_star, eqx.is_inexact_array)
    w0, unravel = ravel_pytree(params)
    if w0.size == 0:
        raise ValueError("w_star has no floating-point array leaves to sample")
    n = size if n is None else _check_positive("n", n)
    if beta is None:
        if n <= 1:
            raise ValueError(f"beta = 1 / ln n needs n > 1, got n = {n}; pass beta explicitly")
        beta = 1.0 / math.log(n)
    beta = _check_positive("beta", beta)
    if batch_size is not None:
        batch_size = _check_count("batch_size", batch_size, 1)
        if batch_size > size:
            raise ValueError(f"batch_size {batch_size} exceeds the {size} samples of data")
    try:
        out = eqx.filter_eval_shape(loss_fn, w_star, arrays)
    except Exception as exc:  # report the user's error in one line, before compiling
        raise TypeError(f"loss_fn(w_star, data) failed: {type(exc).__name__}: {exc}") from exc
    if not hasattr(out, "shape") or out.shape != ():
        shape = getattr(out, "shape", type(out).__name__)
        raise ValueError(f"loss_fn must return a scalar mean loss, got shape {shape}")
    if not jnp.issubdtype(out.dtype, jnp.floating):
        raise TypeError(f"loss_fn must return a floating-point scalar, got dtype {out.dtype}")
    problem = _Problem(loss_fn, unravel, static)
    return problem, w0, arrays, size, float(n), float(beta), batch_size


@eqx.filter_jit
def _run_chains(
    problem, w0, arrays, keys, step_sizes, nbeta, gamma, num_burnin, num_draws, batch_size
):
    """One program: every chain (one key and one step size each) from w0."""
    size = arrays[0].shape[0]
    # BlackJAX's SGLD takes a gradient estimator; the value and the gradient are computed once
    # per step below, so the estimator hands back the precomputed gradient it is given.
    # imported on first use: importing blackjax starts JAX's backends, and importing jaxdyn
    # must not (the CLI splits the CPU into devices before that)
    import blackjax

    sgld = blackjax.sgld(lambda position, grad: grad)

    def value_and_logdensity_grad(w, key):
        if batch_size is None:
            batch = arrays
        else:
            idx = jax.random.randint(key, (batch_size,), 0, size)
            batch = tuple(a[idx] for a in arrays)
        loss, g = jax.value_and_grad(problem.loss)(w, batch)
        return loss, -(nbeta * g + gamma * (w - w0))

    def chain(key, eps):
        def step(w, key):
            kb, ks = jax.random.split(key)
            loss, grad = value_and_logdensity_grad(w, kb)
            new = sgld.step(ks, w, grad, eps).astype(w.dtype)  # eps may be wider than w
            return new, (loss, jnp.sum((w - w0) ** 2))

        kburn, kdraw = jax.random.split(key)
        w, _ = jax.lax.scan(step, w0, jax.random.split(kburn, num_burnin))
        _, (losses, dist) = jax.lax.scan(step, w, jax.random.split(kdraw, num_draws))
        return losses, dist

    losses, dist = jax.vmap(chain)(keys, step_sizes)
    init_loss = problem.loss(w0, arrays)
    return losses, dist, init_loss


def _summarise(losses, dist, init_loss, *, n, beta, step_size, gamma, d) -> LLCEstimate:
    nbeta = n * beta
    per_chain = nbeta * (jnp.mean(losses, axis=1) - init_loss)
    C, D = losses.shape
    stderr = jnp.std(per_chain, ddof=1) / jnp.sqrt(C) if C > 1 else jnp.asarray(jnp.nan)
    half = D // 2
    drift = nbeta * (jnp.mean(losses[:, D - half :], axis=1) - jnp.mean(losses[:, :half], axis=1))
    drift_se = jnp.std(drift, ddof=1) / jnp.sqrt(C) if C > 1 else jnp.asarray(jnp.nan)
    diverged = jnp.sum(~jnp.all(jnp.isfinite(losses), axis=1))
    return LLCEstimate(
        llc=jnp.mean(per_chain),
        stderr=stderr,
        per_chain=per_chain,
        loss_trace=losses,
        init_loss=init_loss,
        distance_sq=dist,
        n=n,
        beta=beta,
        step_size=step_size,
        localization=gamma,
        num_params=d,
        half_drift=jnp.mean(drift),
        half_drift_stderr=drift_se,
        pull_fraction=gamma * jnp.mean(dist) / d,
        diverged=diverged,
    )


def estimate_llc(
    loss_fn: Callable[[Any, tuple], Float[Array, ""]],
    w_star: Any,
    data: Any,
    *,
    key: Key[Array, ""] | Array,
    n: float | None = None,
    num_chains: int = 8,
    num_draws: int = 1000,
    num_burnin: int = 200,
    step_size: float = 1e-4,
    localization: float = 100.0,
    beta: float | None = None,
    batch_size: int | None = None,
) -> LLCEstimate:
    """Estimate the local learning coefficient of ``loss_fn`` at ``w_star`` (docs/llc.md).

    Samples exp(-n beta L_n(w) - (localization / 2) |w - w*|^2) with SGLD (BlackJAX's step
    w += eps grad log p + sqrt(2 eps) xi; devinterp's epsilon is 2 eps) from ``w_star`` in
    ``num_chains`` chains as one vmapped program and returns
    lambda_hat = n beta (E[L_n(w)] - L_n(w*)) per chain, its mean and standard error.

    Args:
        loss_fn: ``loss_fn(model, batch) -> scalar``, the mean loss (the negative
            log-likelihood per sample) of ``model`` (a pytree like ``w_star``) on ``batch`` (a
            tuple of arrays like ``data``, on a subset of samples).
        w_star: an equinox Module or pytree; its floating-point array leaves are sampled, the
            rest is held fixed. Should be a local minimum of L_n.
        data: a tuple of arrays with a common leading sample axis.
        key: a JAX random key.
        n: the sample size in n beta (default: the number of samples in ``data``).
        num_chains: independent chains, one vmapped program.
        num_draws: recorded draws per chain.
        num_burnin: discarded steps per chain before the first draw.
        step_size: eps in BlackJAX's convention.
        localization: gamma, the Gaussian pull's precision.
        beta: inverse temperature per sample (default 1 / ln n).
        batch_size: minibatch size (sampled with replacement each step); ``None`` uses all data
            (full-gradient Langevin; the loss trace is then the exact L_n).

    Raises ``TypeError``/``ValueError`` in one line, before compiling, on invalid input.
    """
    num_chains = _check_count("num_chains", num_chains, 1)
    num_draws = _check_count("num_draws", num_draws, 2)
    num_burnin = _check_count("num_burnin", num_burnin, 0)
    eps = _check_positive("step_size", step_size)
    gamma = _check_positive("localization", localization, allow_zero=True)
    problem, w0, arrays, _, n, beta, batch_size = _prepare(
        loss_fn, w_star, data, n, beta, batch_size
    )
    keys = jax.random.split(key, num_chains)
    dtype = w0.dtype
    losses, dist, init_loss = _run_chains(
        problem,
        w0,
        arrays,
        keys,
        jnp.full((num_chains,), eps, dtype),
        jnp.asarray(n * beta, dtype),
        jnp.asarray(gamma, dtype),
        num_burnin,
        num_draws,
        batch_size,
    )
    return _summarise(
        losses, dist, init_loss, n=n, beta=beta, step_size=eps, gamma=gamma, d=int(w0.size)
    )
