"""Markov-chain data of focus_dilution.md ("Data"): transition matrices, stationary
distributions, the paper's family, the ablation family and the symmetry-breaking family, and a
vmapped sequence sampler.

User-given matrices are validated with :func:`jaxdyn.require_stochastic` and
:func:`jaxdyn.require_probability_vector`: a one-line ``ValueError`` naming the input for concrete
values, ``eqx.error_if`` for traced ones.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._custom_types import Array, ArrayLike, Float, Int, Key
from .._validation import require_probability_vector


@eqx.filter_jit
def stationary_distribution(P: Float[ArrayLike, "d d"]) -> Float[Array, " d"]:
    """Stationary distribution ``pi^T P = pi^T``, ``sum(pi) = 1`` (focus_dilution.md, "Data").

    Solved as the least-squares system ``[P^T - I; 1^T] pi = [0; 1]``: differentiable in ``P``
    and exact for an irreducible chain (the stacked system then has full column rank).
    """
    P = jnp.asarray(P)
    d = P.shape[0]
    A = jnp.concatenate([P.T - jnp.eye(d, dtype=P.dtype), jnp.ones((1, d), P.dtype)], axis=0)
    b = jnp.zeros(d + 1, P.dtype).at[-1].set(1.0)
    pi, *_ = jnp.linalg.lstsq(A, b)
    return pi


@eqx.filter_jit
def paper_transition(pi: Float[ArrayLike, " d"], lam: Float[ArrayLike, ""]) -> Float[Array, "d d"]:
    """The paper's family ``P = lam I + (1 - lam) 1 pi^T`` (stationary distribution ``pi``).

    Traceable in ``pi`` and ``lam`` (a sweep over ``lam`` compiles once); validate concrete
    inputs with :func:`jaxdyn.require_probability_vector` first.
    """
    pi = jnp.asarray(pi)
    d = pi.shape[0]
    return lam * jnp.eye(d, dtype=pi.dtype) + (1.0 - lam) * jnp.ones((d, 1), pi.dtype) * pi[None, :]


def reversible_transition(pi: ArrayLike, key: Key, *, laziness: float = 0.0) -> Float[Array, "d d"]:
    """A random reversible ``P`` with stationary distribution ``pi`` (the paper's ablation).

    Metropolis-Hastings: a random symmetric proposal ``Q`` (uniform entries, scaled so that rows
    sum to at most ``1 - laziness``) and ``P_ij = Q_ij min(1, pi_j / pi_i)`` for ``i != j``, the
    rest on the diagonal. Detailed balance ``pi_i P_ij = pi_j P_ji`` holds by construction.
    """
    pi = jnp.asarray(require_probability_vector("pi", pi, strictly_positive=True))
    if not 0.0 <= laziness < 1.0:
        raise ValueError(f"laziness must be in [0, 1), got {laziness}")
    d = pi.shape[0]
    B = jax.random.uniform(key, (d, d), dtype=pi.dtype)
    S = 0.5 * (B + B.T) * (1.0 - jnp.eye(d, dtype=pi.dtype))
    Q = S / jnp.max(jnp.sum(S, axis=1)) * (1.0 - laziness)
    off = Q * jnp.minimum(1.0, pi[None, :] / pi[:, None])
    return off + jnp.diag(1.0 - jnp.sum(off, axis=1))


@eqx.filter_jit
def symmetry_breaking_pi(
    pi_top: Float[ArrayLike, ""],
    delta: Float[ArrayLike, ""],
    direction: Float[ArrayLike, " k"],
) -> Float[Array, " d"]:
    """Low-frequency family ``pi_1 = pi_top``, ``pi_i = (1 - pi_1)/(d - 1) + delta c_i``.

    ``direction`` is ``c`` for the ``d - 1`` low-frequency tokens; it is centred here so that
    ``sum_i c_i = 0`` and ``pi`` sums to one. ``delta = 0`` gives exactly symmetric
    low-frequency tokens (focus_dilution.md, "Data" and stage 4). Traceable in ``pi_top`` and
    ``delta``.
    """
    c = jnp.asarray(direction)
    c = c - jnp.mean(c)
    k = c.shape[0]
    low = (1.0 - pi_top) / k + delta * c
    return jnp.concatenate([jnp.reshape(jnp.asarray(pi_top, low.dtype), (1,)), low])


def default_direction(d: int) -> np.ndarray:
    """Default asymmetry ``c`` for :func:`symmetry_breaking_pi`: linear, centred, unit sup-norm."""
    c = np.linspace(1.0, -1.0, d - 1)
    return c


def sample_sequences(
    key: Key,
    chain: MarkovChain,
    n: int,
    length: int,
    initial: Float[ArrayLike, " d"] | None = None,
) -> Int[Array, "n length"]:
    """``n`` sequences of ``length`` tokens of the :class:`MarkovChain` ``chain``: ``x_1 ~
    initial`` (default ``Uniform([d])``, the paper's; ``initial = chain.pi`` gives windows of a
    stationary stream), ``x_{j+1} ~ P[x_j, :]``.

    One ``lax.scan`` over positions, vectorised over the ``n`` chains. ``length = s + 1``
    gives inputs ``x_1..x_s`` and the target ``x_{s+1}``.
    """
    return _sample_sequences(key, chain.P, n, length, initial)


@eqx.filter_jit
def _sample_sequences(
    key: Key,
    P: Float[ArrayLike, "d d"],
    n: int,
    length: int,
    initial: Float[ArrayLike, " d"] | None = None,
) -> Int[Array, "n length"]:
    """``n`` sequences of ``length`` tokens: ``x_1 ~ initial`` (default ``Uniform([d])``, the
    paper's; ``initial = pi`` gives windows of a stationary stream), ``x_{j+1} ~ P[x_j, :]``.

    One ``lax.scan`` over positions, vectorised over the ``n`` chains. ``length = s + 1``
    gives inputs ``x_1..x_s`` and the target ``x_{s+1}``.
    """
    P = jnp.asarray(P)
    d = P.shape[0]
    logP = jnp.log(P)
    k0, k1 = jax.random.split(key)
    if initial is None:
        x1 = jax.random.randint(k0, (n,), 0, d)
    else:
        x1 = jax.random.categorical(k0, jnp.log(jnp.asarray(initial, P.dtype)), shape=(n,))

    def step(x, k):
        nxt = jax.random.categorical(k, logP[x], axis=-1)
        return nxt, nxt

    _, rest = jax.lax.scan(step, x1, jax.random.split(k1, length - 1))
    return jnp.concatenate([x1[None, :], rest], axis=0).T.astype(jnp.int32)


def resolve_chain(
    P: Float[ArrayLike, "..."], pi: Float[ArrayLike, "..."] | None = None
) -> tuple[Float[Array, " d"], Float[Array, "d d"]]:
    """Validate a Markov chain and return ``(pi, P)`` as arrays.

    ``P`` must be row-stochastic (:func:`jaxdyn.require_stochastic`). ``pi`` defaults to its
    stationary law (:func:`stationary_distribution`); a given or computed ``pi`` must be a
    strictly positive probability vector (an irreducible chain) with ``pi^T P = pi^T``. Concrete
    inputs fail with a one-line ``ValueError``; traced inputs get ``eqx.error_if`` checks.
    """
    from .._validation import is_traced, require_stochastic

    if np.ndim(P) != 2 or np.shape(P)[0] != np.shape(P)[1] or np.shape(P)[0] < 2:
        raise ValueError(
            f"P must be a square matrix with at least 2 states, got shape {np.shape(P)}"
        )
    P = jnp.asarray(require_stochastic("P", P))
    given = pi is not None
    if not given and not is_traced(P):
        d = P.shape[0]
        A = np.concatenate([np.asarray(P).T - np.eye(d), np.ones((1, d))])
        if np.linalg.matrix_rank(A) < d:
            raise ValueError("P is not irreducible: its stationary law is not unique (pass pi)")
    pi = stationary_distribution(P) if pi is None else jnp.asarray(pi, P.dtype)
    if pi.shape != (P.shape[0],):
        raise ValueError(f"pi must have {P.shape[0]} entries to match P, got shape {pi.shape}")
    name = "pi" if given else "the stationary law of P (P must be irreducible)"
    pi = jnp.asarray(require_probability_vector(name, pi, strictly_positive=True))
    residual = jnp.max(jnp.abs(pi @ P - pi))
    message = "pi is not stationary for P (pi^T P != pi^T)"
    if is_traced(pi, P, residual):  # (inside a trace even constants' arithmetic is traced)
        pi = eqx.error_if(pi, residual > 1e-6, message)
    elif float(residual) > 1e-6:
        raise ValueError(f"{message}: max |pi^T P - pi^T| = {float(residual):.3g}")
    return pi, P


class MarkovChain(eqx.Module):
    """A Markov chain on ``[d]``: a row-stochastic ``P`` and its stationary law ``pi``
    (focus_dilution.md, "Data"), validated once, here (:func:`resolve_chain`: ``P``
    row-stochastic, ``pi`` a strictly positive probability vector with ``pi^T P = pi^T``;
    ``pi`` computed from ``P`` when not given). The data argument of the flow and the trainers
    (:func:`population_flow`, :func:`train_finite`, :func:`descend`, :func:`analyse_flow`).

    A pytree: ``jax.vmap`` over a constructor gives a batch of chains (leading axis on both
    leaves), e.g. for :func:`track_rank_one_branch`.
    """

    P: Float[Array, "d d"]
    pi: Float[Array, " d"]

    # shape-free annotations: resolve_chain's message, not a type error, names a bad shape
    def __init__(self, P: Float[ArrayLike, "..."], pi: Float[ArrayLike, "..."] | None = None):
        self.pi, self.P = resolve_chain(P, pi)

    @classmethod
    def paper(cls, pi: Float[ArrayLike, " d"], lam: Float[ArrayLike, ""]) -> MarkovChain:
        """The paper's family ``P = lam I + (1 - lam) 1 pi^T`` (:func:`paper_transition`)."""
        pi = jnp.asarray(require_probability_vector("pi", pi, strictly_positive=True))
        return cls(paper_transition(pi, lam), pi)

    @classmethod
    def reversible(cls, pi: Float[ArrayLike, " d"], key: Key, *, laziness: float = 0.0):
        """A random reversible chain with stationary law ``pi`` (the paper's ablation).

        Metropolis-Hastings: a random symmetric proposal ``Q`` (uniform entries, scaled so that
        rows sum to at most ``1 - laziness``) and ``P_ij = Q_ij min(1, pi_j / pi_i)`` for ``i !=
        j``, the rest on the diagonal. Detailed balance ``pi_i P_ij = pi_j P_ji`` holds by
        construction."""
        pi = jnp.asarray(require_probability_vector("pi", pi, strictly_positive=True))
        return cls(reversible_transition(pi, key, laziness=laziness), pi)

    @property
    def d(self) -> int:
        """The number of states."""
        return self.P.shape[-1]
