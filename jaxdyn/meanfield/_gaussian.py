"""Velocity fields of the mean-field Transformer PDE (transformer_pde.md, "The model" and
"Gaussian closure").

Thin, documented entry points over the attention Modules of :mod:`jaxdyn.attention`: the
particle velocity ``dx_i/dt = Gamma_mu(x_i)`` with every token as a query, and the closed ODE
``(d alpha/dt, d Sigma/dt)`` of the Gaussian family ``mu = N(alpha, Sigma)``.
"""

from __future__ import annotations

from jaxtyping import Array, ArrayLike, Float

from jaxdyn.attention import AbstractAttention


def velocity(
    attention: AbstractAttention,
    tokens: Float[Array, "n d"],
    *,
    t: Float[ArrayLike, ""] = 0.0,
    chunk_size: int | None = None,
) -> Float[Array, "n d"]:
    """``Gamma_mu(x_i)`` for every token ``x_i``, ``mu = (1/n) sum_i delta_{x_i}``.

    With ``chunk_size``, memory is linear in ``n`` (online log-sum-exp over key chunks).
    """
    return attention.velocity(tokens, tokens, t=t, chunk_size=chunk_size)


def gaussian_rhs(
    attention: AbstractAttention,
    mean: Float[Array, " d"],
    cov: Float[Array, "d d"],
    *,
    t: Float[ArrayLike, ""] = 0.0,
) -> tuple[Float[Array, " d"], Float[Array, "d d"]]:
    """``(d alpha/dt, d Sigma/dt)`` for ``mu = N(alpha, Sigma)``.

    For the Gaussian-closed variants the velocity is affine, ``Gamma(x) = B x + c``, and
    ``d alpha/dt = B alpha + c``, ``d Sigma/dt = B Sigma + Sigma B^T`` (the per-variant
    formulas are in the variants' docstrings and in docs/transformer_pde.md). Sigmoid and
    masked attention are not Gaussian-closed and raise ``ValueError``.
    """
    if not attention.gaussian_closed:
        raise ValueError(
            f"{type(attention).__name__} attention is not Gaussian-closed: use simulate_particles"
        )
    return attention.gaussian_rhs(mean, cov, t=t)
