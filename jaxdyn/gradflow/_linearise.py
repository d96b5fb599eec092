"""Linearisation tools of focus_dilution.md ("Linearisation tools", paper Lemma 3.1) and the
closed-form stage rates ("Stages and the numbers the theory gives").

Near a critical point ``theta*``, ``d Delta/dt = J Delta`` with ``J = -Hess L(theta*)``. We
find critical points by root-finding ``grad L = 0`` with optimistix (Levenberg-Marquardt on
``grad L``: the Hessian is singular along the gauge orbits ``W0 -> W0 A, W1 -> A^{-1} W1``),
take the Hessian with ``jax.hessian``, and split unstable
eigenvectors into their embedding (W0, W1) and attention (WQ, WK) parts.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx
from jax.flatten_util import ravel_pytree

from jaxdyn._printing import AbstractResult

from .._custom_types import Array, ArrayLike, Float, Scalar
from .._status import Status
from ._markov import MarkovChain
from ._metrics import embedding_profile
from ._model import OneLayerTransformer, _population_loss


@eqx.filter_jit
def condensation_rate(pi: Float[ArrayLike, " d"]) -> Scalar:
    """Stage-I rate ``mu1 = ||pi|| ||pi - 1/d 1||`` (0.4595 for the headline ``pi``).

    At ``theta = 0`` the gradient in ``M`` is the rank-one ``pi (1/d 1 - pi)^T``; the linear
    ``(W0, W1)`` dynamics has eigenvalues ``+-`` its singular value.
    """
    pi = jnp.asarray(pi)
    return jnp.linalg.norm(pi) * jnp.linalg.norm(pi - 1.0 / pi.shape[0])


class UnigramSaddle(AbstractResult):
    """The stage-II saddle ``theta_c1``: ``W0 = gamma alpha^T``, ``W1 = alpha beta^T``,
    ``WQ = WK = 0``.

    ``gamma = g pi / ||pi||``, ``beta = l / (g ||pi||)``, ``g^2 = ||l|| / ||pi||``,
    ``l = log pi - mean(log pi) 1`` (the balanced point of the gauge family reached by a
    flow from small initialisation).
    """

    gamma: Float[Array, " d"]
    beta: Float[Array, " d"]
    model: OneLayerTransformer


@eqx.filter_jit
def unigram_saddle(
    pi: Float[ArrayLike, " d"], m: int, m_attn: int, alpha: Float[ArrayLike, " m"] | None = None
) -> UnigramSaddle:
    """Closed-form unigram saddle for embedding width ``m`` and attention width ``m_attn``.

    ``alpha`` (unit vector in R^m) defaults to the first basis vector. At this point
    ``softmax(pi^T M) = pi`` and the population loss equals ``H(pi)``.
    """
    pi = jnp.asarray(pi)
    if alpha is None:
        alpha = jnp.zeros(m, pi.dtype).at[0].set(1.0)
    alpha = jnp.asarray(alpha, pi.dtype)
    alpha = alpha / jnp.linalg.norm(alpha)
    logpi = jnp.log(pi)
    ell = logpi - jnp.mean(logpi)
    g = jnp.sqrt(jnp.linalg.norm(ell) / jnp.linalg.norm(pi))
    gamma = g * pi / jnp.linalg.norm(pi)
    beta = ell / (g * jnp.linalg.norm(pi))
    model = OneLayerTransformer(
        W0=jnp.outer(gamma, alpha),
        W1=jnp.outer(alpha, beta),
        WQ=jnp.zeros((m, m_attn), pi.dtype),
        WK=jnp.zeros((m, m_attn), pi.dtype),
    )
    return UnigramSaddle(gamma=gamma, beta=beta, model=model)


@eqx.filter_jit
def _focus_rate(
    pi: Float[ArrayLike, " d"], P: Float[ArrayLike, "d d"], gamma=None, beta=None
) -> Scalar:
    """Stage-II attention rate ``c = Var_pi(gamma) Cov_pi(gamma, P beta)`` at the unigram
    saddle (``= lam Var_pi(gamma) Cov_pi(gamma, beta)`` for the paper's family; 0.0798 for
    the headline ``pi`` with ``lam = 0.5``)."""
    pi = jnp.asarray(pi)
    P = jnp.asarray(P)
    if gamma is None or beta is None:
        s = unigram_saddle(pi, 1, 1)
        gamma, beta = s.gamma, s.beta
    Pb = P @ beta
    mean_g = pi @ gamma
    var = pi @ (gamma - mean_g) ** 2
    cov = pi @ ((gamma - mean_g) * (Pb - pi @ Pb))
    return var * cov


def _loss_gradient(model: OneLayerTransformer, pi, P) -> OneLayerTransformer:
    """``grad L(theta)`` as a model-shaped pytree."""
    return jax.grad(_population_loss)(model, pi, P)


@eqx.filter_jit
def _jacobian(model: OneLayerTransformer, pi, P) -> Float[Array, "n n"]:
    """``J = -Hess L(theta)`` of the gradient flow at ``model``, on the flattened parameters
    (order of :func:`jax.flatten_util.ravel_pytree`: W0, W1, WQ, WK)."""
    flat, unravel = ravel_pytree(model)
    H = jax.hessian(lambda v: _population_loss(unravel(v), pi, P))(flat)
    return -0.5 * (H + H.T)


class Spectrum(AbstractResult):
    """Eigen-decomposition of the (symmetric) flow Jacobian at a point.

    ``eigenvalues`` in decreasing order, ``eigenvectors[:, i]`` the matching unit vectors,
    ``embedding_weight[i]`` / ``attention_weight[i]`` the squared norm of eigenvector ``i`` on
    the (W0, W1) and (WQ, WK) blocks (they sum to one).
    """

    eigenvalues: Float[Array, " n"]
    eigenvectors: Float[Array, "n n"]
    embedding_weight: Float[Array, " n"]
    attention_weight: Float[Array, " n"]


@eqx.filter_jit
def _jacobian_spectrum(model: OneLayerTransformer, pi, P) -> Spectrum:
    """Spectrum of ``J = -Hess L`` at ``model`` with each eigenvector's block structure."""
    J = _jacobian(model, pi, P)
    vals, vecs = jnp.linalg.eigh(J)
    vals, vecs = vals[::-1], vecs[:, ::-1]
    n_emb = model.W0.size + model.W1.size
    emb = jnp.sum(vecs[:n_emb] ** 2, axis=0)
    return Spectrum(
        eigenvalues=vals, eigenvectors=vecs, embedding_weight=emb, attention_weight=1.0 - emb
    )


@eqx.filter_jit
def _signed_focus_eigenvalue(model: OneLayerTransformer, spectrum: Spectrum, pi) -> Scalar:
    """Top attention-block eigenvalue of ``J`` at a critical point with ``WQ = WK = 0``, signed
    by the direction it moves ``Phi``.

    Along an eigenvector ``(dW0, dW1, dWQ, dWK)`` the score matrix changes at second order by
    ``W0 dWQ dWK^T W0^T``; its projection on ``gamma gamma^T`` (``gamma = W0 alpha``, sign-fixed
    by ``gamma . pi > 0``) has the sign of ``(gamma^T W0 dWQ) . (gamma^T W0 dWK)``. Positive:
    attention moves onto the frequent tokens (focus); negative: off them. Equals the closed-form
    signed ``c`` of :func:`focus_rate` at the unigram saddle.
    """
    _, gamma = embedding_profile(model, pi)
    att = spectrum.attention_weight > 0.5
    i = jnp.argmax(jnp.where(att, spectrum.eigenvalues, -jnp.inf))
    v = spectrum.eigenvectors[:, i]
    n0, n1, nq = model.W0.size, model.W1.size, model.WQ.size
    dWQ = v[n0 + n1 : n0 + n1 + nq].reshape(model.WQ.shape)
    dWK = v[n0 + n1 + nq :].reshape(model.WK.shape)
    g = gamma @ model.W0
    return spectrum.eigenvalues[i] * jnp.sign((g @ dWQ) @ (g @ dWK))


class CriticalPoint(AbstractResult):
    """Result of :func:`find_critical_point`: the point, ``||grad L||`` there, the loss and a
    :class:`jaxdyn.Status` (``not_converged`` if the root finder failed)."""

    model: OneLayerTransformer
    grad_norm: Scalar
    loss: Scalar
    status: Status


@eqx.filter_jit
def _find_critical_point(
    model: OneLayerTransformer,
    pi,
    P,
    *,
    rtol: float = 1e-10,
    atol: float = 1e-10,
    max_steps: int = 100,
) -> CriticalPoint:
    """Root-find ``grad L(theta) = 0`` starting at ``model`` (e.g. a point on the trajectory).

    Solved as the least-squares problem ``min ||grad L||^2`` with
    ``optimistix.LevenbergMarquardt``: the Hessian is singular along the continuous symmetries
    of the parametrisation (``W0 -> W0 A``, ``W1 -> A^{-1} W1``), where plain Newton with a
    pseudo-inverse drifts along the critical manifold to unbalanced points; the damped
    Gauss-Newton steps stay near the start and converge to the nearby critical point.
    """
    flat, unravel = ravel_pytree(model)

    def residual(v, args):
        return ravel_pytree(_loss_gradient(unravel(v), pi, P))[0]

    solver = optx.LevenbergMarquardt(rtol=rtol, atol=atol)
    sol = optx.least_squares(residual, solver, flat, max_steps=max_steps, throw=False)
    point = unravel(sol.value)
    gnorm = jnp.linalg.norm(residual(sol.value, None))
    ok = (sol.result == optx.RESULTS.successful) & jnp.isfinite(gnorm)
    status = Status.where(ok, Status.successful, Status.not_converged)
    return CriticalPoint(
        model=point, grad_norm=gnorm, loss=_population_loss(point, pi, P), status=status
    )


def predicted_escape_time(eps: Float[ArrayLike, ""], rate: Float[ArrayLike, ""]) -> Scalar:
    """Linearised escape time ``log(1/eps) / rate`` (Lemma 3.1)."""
    return jnp.log(1.0 / jnp.asarray(eps)) / rate


def focus_rate(chain: MarkovChain, gamma=None, beta=None) -> Scalar:
    """Stage-II attention rate ``c = Var_pi(gamma) Cov_pi(gamma, P beta)`` at the unigram
    saddle of the :class:`MarkovChain` ``chain`` (``= lam Var_pi(gamma) Cov_pi(gamma, beta)``
    for the paper's family; 0.0798 for the headline ``pi`` with ``lam = 0.5``). Signed: ``c >
    0`` moves the attention onto the most frequent token first, ``c < 0`` off it. ``gamma``,
    ``beta``: another saddle's profiles (default the balanced :func:`unigram_saddle`'s)."""
    return _focus_rate(chain.pi, chain.P, gamma, beta)


def jacobian_spectrum(model: OneLayerTransformer, chain: MarkovChain) -> Spectrum:
    """Spectrum of the flow's Jacobian ``J = -Hess L`` at ``model`` on ``chain``, with each
    eigenvector's block structure (embedding vs attention; paper Lemma 3.1)."""
    return _jacobian_spectrum(model, chain.pi, chain.P)


def find_critical_point(
    model: OneLayerTransformer,
    chain: MarkovChain,
    *,
    rtol: float = 1e-10,
    atol: float = 1e-10,
    max_steps: int = 100,
) -> CriticalPoint:
    """Root-find ``grad L(theta) = 0`` on ``chain`` starting at ``model`` (e.g. a point on the
    trajectory).

    Solved as the least-squares problem ``min ||grad L||^2`` with
    ``optimistix.LevenbergMarquardt``: the Hessian is singular along the continuous symmetries
    of the parametrisation (``W0 -> W0 A``, ``W1 -> A^{-1} W1``), where plain Newton with a
    pseudo-inverse drifts along the critical manifold to unbalanced points; the damped
    Gauss-Newton steps stay near the start and converge to the nearby critical point.
    """
    return _find_critical_point(model, chain.pi, chain.P, rtol=rtol, atol=atol, max_steps=max_steps)
