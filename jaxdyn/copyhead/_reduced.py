"""Population-reduced action on the order parameters (copy_head.md, "Population reduction").

For i.i.d. uniform tokens, E[X^T A^T A X] and E[X^T A^T Y] lie in span{I, 1 1^T}, so the exact
action depends on A only through four invariants: ||A||_F^2, ||A 1||^2, tau = sum_l A_{l,l-1}
and 1^T A 1. With kappa = sigma_w^2 / V, m_perp = P ||A||_F^2 / V, m_par = P ||A 1||^2 / V,
b_perp = P tau / V, b_par = P 1^T A 1 / V:

    S ~ -ln p(A) + (V/2) [ (V-1) ln(1 + kappa m_perp / T) + ln(1 + kappa m_par / T) ]
        - (1/2T) [ (V-1) b_perp^2 / (T/kappa + m_perp) + b_par^2 / (T/kappa + m_par) ].

``objective=Objective.marginal`` is this (W integrated out: what SGLD and MALA sample);
``objective=Objective.map`` drops the ln det term: the profile min_W of the joint energy,
i.e. what Adam to the joint MAP over (W, G) minimises [derived: min_W E = S - (V/2) ln det(...)
+ const].

Reduced coordinates (cyclic convention):
- linear, A = c_1 U + c_G S, G = L^alpha A: ||A||^2 = c_1^2 + 2 c_1 c_G + L c_G^2, row sums
  c_1 + c_G, tau = c_1 + L c_G; prior L^{2 alpha} ||A||^2 / (2 sigma_g^2).
- softmax, row-centred G = Delta (S - 1 1^T / L): A_{l,l-1} = p = e^Delta / (e^Delta + L - 1),
  other entries q = (1 - p) / (L - 1); a_1 = L q, a_G = p - q;
  prior (L - 1) Delta^2 / (2 sigma_g^2).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._task import shift_matrix, supervised_positions


class Objective(eqx.Enumeration):
    """What a reduced action minimises (copy_head.md, "Exact action").

    ``marginal``: the action of G with W integrated out, -ln p(G | D) (the posterior of G,
    what SGLD samples); ``map``: the profile of the joint energy over W, min_W E(W, G) (what
    Adam to the joint MAP minimises). The two differ by the (V/2) ln det term, whose weight
    (1 or 0) the reduced models store as an array so both objectives share one compiled
    program.
    """

    __module__ = "jaxdyn.copyhead"  # items print with the public name

    marginal = "W integrated out: -ln p(G | D), the posterior of G"
    map = "W profiled out: min_W E(W, G), the joint MAP"


_EnumerationItem = type(Objective.marginal)

# L and V as numbers: Python ints, or float arrays (traced in sweeps over L and V).
Size = int | float | Float[ArrayLike, ""]


def objective_weight(objective) -> Float[Array, ""]:
    """The weight of the ln det term: 1.0 for :attr:`Objective.marginal`, 0.0 for
    :attr:`Objective.map`; an array is taken as the weight itself (as the reduced models
    store it)."""
    if isinstance(objective, str):
        raise TypeError(
            f"objective must be jaxdyn.copyhead.Objective.marginal or .map, got {objective!r}"
        )
    if isinstance(objective, _EnumerationItem):
        weight = 1.0 if objective == Objective.marginal else 0.0
        return jnp.asarray(weight, dtype=jnp.result_type(float))
    return jnp.asarray(objective, dtype=jnp.result_type(float))


def objective_label(weight) -> str:
    """``"marginal"`` or ``"map"`` for a concrete weight (1.0 / 0.0), as a run records it."""
    return "marginal" if float(weight) == 1.0 else "map"


def objective_of(weight) -> Objective:
    """The :class:`Objective` of a concrete weight (1.0 / 0.0)."""
    return Objective.marginal if float(weight) == 1.0 else Objective.map


def population_data_term(
    frob2,
    rowsum2,
    tau,
    total,
    P,
    *,
    V: Size,
    temperature=1.0,
    sigma_w2=1.0,
    objective=Objective.marginal,
) -> Float[Array, "..."]:
    """The data part of the population action from the four invariants of A (equation above);
    ``objective``: an :class:`Objective` or its :func:`objective_weight`."""
    weight = objective_weight(objective)
    T = temperature
    kappa = sigma_w2 / V
    m_perp, m_par = P * frob2 / V, P * rowsum2 / V
    b_perp, b_par = P * tau / V, P * total / V
    quad = ((V - 1) * b_perp**2 / (T / kappa + m_perp) + b_par**2 / (T / kappa + m_par)) / (2 * T)
    logdet = (V - 1) * jnp.log1p(kappa * m_perp / T) + jnp.log1p(kappa * m_par / T)
    return weight * (0.5 * V * logdet) - quad


def population_action(
    G: Float[ArrayLike, "L L"],
    A: Float[ArrayLike, "L L"],
    P,
    *,
    V: Size,
    temperature=1.0,
    sigma_w2=1.0,
    sigma_g2=1.0,
    cyclic: bool = True,
    objective: Objective | Float[ArrayLike, ""] = Objective.marginal,
) -> Float[Array, ""]:
    """Population action of any score/attention pair (G, A): ||G||^2 / 2 sigma_g^2 + data term.

    Rows of unsupervised positions (position 1 when not ``cyclic``) must already be zero in A.
    """
    G, A = jnp.asarray(G), jnp.asarray(A)
    L = A.shape[-1]
    rows = supervised_positions(L, cyclic=cyclic)
    A = jnp.where(rows[:, None], A, 0.0)
    r = jnp.sum(A, axis=-1)
    frob2 = jnp.sum(A**2)
    tau = jnp.sum(A * shift_matrix(L, cyclic=cyclic))
    data = population_data_term(
        frob2,
        jnp.sum(r**2),
        tau,
        jnp.sum(r),
        P,
        V=V,
        temperature=temperature,
        sigma_w2=sigma_w2,
        objective=objective,
    )
    return jnp.sum(G**2) / (2 * sigma_g2) + data


def linear_invariants(c1, cG, L):
    """(||A||^2, ||A 1||^2, tau, 1^T A 1) of A = c_1 U + c_G S (cyclic)."""
    r = c1 + cG
    return c1**2 + 2 * c1 * cG + L * cG**2, L * r**2, c1 + L * cG, L * r


def reduced_action_linear(
    c: Float[ArrayLike, "... 2"],
    P,
    *,
    L: Size,
    V: Size,
    temperature=1.0,
    sigma_w2=1.0,
    sigma_g2=1.0,
    alpha=1.0,
    objective: Objective | Float[ArrayLike, ""] = Objective.marginal,
) -> Float[Array, "..."]:
    """Reduced action of linear attention on (c_1, c_G) = c[..., 0], c[..., 1] (cyclic)."""
    c = jnp.asarray(c)
    frob2, rowsum2, tau, total = linear_invariants(c[..., 0], c[..., 1], L)
    prior = jnp.asarray(L, c.dtype) ** (2 * alpha) * frob2 / (2 * sigma_g2)
    data = population_data_term(
        frob2,
        rowsum2,
        tau,
        total,
        P,
        V=V,
        temperature=temperature,
        sigma_w2=sigma_w2,
        objective=objective,
    )
    return prior + data


def softmax_copy_probability(delta, L):
    """p = A_{l,l-1} = e^Delta / (e^Delta + L - 1) for row-centred G = Delta (S - 1 1^T / L)."""
    return jax.nn.sigmoid(delta - jnp.log(L - 1.0))


def softmax_order_parameters(delta, L):
    """(a_1, a_G) = (L q, p - q) of the softmax copy state with logit gap Delta."""
    p = softmax_copy_probability(delta, L)
    q = (1 - p) / (L - 1)
    return L * q, p - q


def reduced_action_softmax(
    delta: Float[ArrayLike, "..."],
    P,
    *,
    L: Size,
    V: Size,
    temperature=1.0,
    sigma_w2=1.0,
    sigma_g2=1.0,
    objective: Objective | Float[ArrayLike, ""] = Objective.marginal,
) -> Float[Array, "..."]:
    """Reduced action of softmax attention on the logit gap Delta (cyclic)."""
    delta = jnp.asarray(delta)
    p = softmax_copy_probability(delta, L)
    q = (1 - p) / (L - 1)
    frob2 = L * (p**2 + (L - 1) * q**2)
    data = population_data_term(
        frob2,
        L * jnp.ones_like(p),
        L * p,
        L * jnp.ones_like(p),
        P,
        V=V,
        temperature=temperature,
        sigma_w2=sigma_w2,
        objective=objective,
    )
    return (L - 1) * delta**2 / (2 * sigma_g2) + data
