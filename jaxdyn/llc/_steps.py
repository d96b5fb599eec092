"""The step size's effect: the estimate at eps and eps / 2 in one program, extrapolated to 0."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxdyn._printing import AbstractResult

from ._estimate import (
    LLCEstimate,
    _check_count,
    _check_positive,
    _prepare,
    _run_chains,
    _summarise,
)


class StepSizeEffect(AbstractResult):
    """Estimates at step sizes eps and eps / 2 and their extrapolation to eps -> 0.

    The Euler-Maruyama (SGLD) chain's stationary law differs from the target by O(eps), so
    lambda_hat(eps) = lambda_hat(0) + c eps + O(eps^2) and the Richardson combination
    2 lambda_hat(eps / 2) - lambda_hat(eps) removes the first-order bias; ``bias`` =
    lambda_hat(eps) - lambda_hat(eps / 2) estimates c eps / 2, the bias left at eps / 2.

    Attributes:
        coarse, fine: the estimates at eps and eps / 2 (independent chains).
        extrapolated: 2 fine - coarse; ``extrapolated_stderr`` its standard error.
        bias: coarse - fine; ``bias_stderr`` its standard error.
    """

    coarse: LLCEstimate
    fine: LLCEstimate
    extrapolated: Float[Array, ""]
    extrapolated_stderr: Float[Array, ""]
    bias: Float[Array, ""]
    bias_stderr: Float[Array, ""]


def step_size_effect(
    loss_fn,
    w_star,
    data,
    *,
    key,
    n=None,
    num_chains: int = 8,
    num_draws: int = 1000,
    num_burnin: int = 200,
    step_size: float = 1e-4,
    localization: float = 100.0,
    beta=None,
    batch_size=None,
) -> StepSizeEffect:
    """:func:`estimate_llc` at ``step_size`` and ``step_size / 2``, ``num_chains`` chains each,
    as one vmapped program, and the extrapolation to step size 0.

    Every chain runs ``2 (num_burnin + num_draws)`` steps; the fine chains record
    ``2 num_draws`` draws (the same diffusion time as ``num_draws`` coarse steps), the coarse
    chains every second of theirs."""
    num_chains = _check_count("num_chains", num_chains, 2)
    num_draws = _check_count("num_draws", num_draws, 2)
    num_burnin = _check_count("num_burnin", num_burnin, 0)
    eps = _check_positive("step_size", step_size)
    gamma = _check_positive("localization", localization, allow_zero=True)
    problem, w0, arrays, _, n, beta, batch_size = _prepare(
        loss_fn, w_star, data, n, beta, batch_size
    )
    dtype = w0.dtype
    C = num_chains
    keys = jax.random.split(key, 2 * C)
    steps = jnp.concatenate([jnp.full((C,), eps, dtype), jnp.full((C,), eps / 2, dtype)])
    losses, dist, init_loss = _run_chains(
        problem,
        w0,
        arrays,
        keys,
        steps,
        jnp.asarray(n * beta, dtype),
        jnp.asarray(gamma, dtype),
        2 * num_burnin,
        2 * num_draws,
        batch_size,
    )
    d = int(w0.size)
    # coarse chains record every second step of the same length of run (time = steps x eps)
    coarse = _summarise(
        losses[:C, ::2], dist[:C, ::2], init_loss, n=n, beta=beta, step_size=eps, gamma=gamma, d=d
    )
    fine = _summarise(
        losses[C:], dist[C:], init_loss, n=n, beta=beta, step_size=eps / 2, gamma=gamma, d=d
    )
    extrap = 2 * fine.llc - coarse.llc
    extrap_se = jnp.sqrt(4 * fine.stderr**2 + coarse.stderr**2)
    bias = coarse.llc - fine.llc
    bias_se = jnp.sqrt(fine.stderr**2 + coarse.stderr**2)
    return StepSizeEffect(coarse, fine, extrap, extrap_se, bias, bias_se)
