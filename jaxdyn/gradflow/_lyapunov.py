"""The rank-one manifold and its critical points (focus_dilution.md, stages 3 and 4).

Models with ``W0 = gamma alpha^T``, ``W1 = alpha beta^T``, ``WQ = q alpha alpha~^T``,
``WK = k alpha alpha~^T`` form an invariant manifold of the gradient flow; in the coordinates of
an ``m = m' = 1`` model it is all of parameter space. After focus and dilution the flow stalls
near a critical point on it. There the Jacobian ``J = -Hess L`` splits into a *tangential* block
(the ``m = m' = 1`` model's own Jacobian) and a *transverse* block (every other direction), with
no coupling between them. Directions leaving the manifold change ``M`` and ``Phi`` only at second
order, so the transverse block is the second-order form of the gradients ``dL/dM``, ``dL/dPhi``
at the point; where ``dL/dPhi = 0`` its eigenvalues are ``+-sigma_i(dL/dM)``
(Lyapunov-Schmidt). With exactly symmetric low-frequency tokens both gradients vanish and the
whole transverse block is zero (the degenerate stall); an asymmetry ``delta`` makes the top
transverse eigenvalue ``Theta(delta)``, whose unstable mode is the new embedding direction of
stage 4.
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from jaxdyn._printing import AbstractResult

from .._custom_types import Array, ArrayLike, Float, Scalar
from ._flow import gradient_field
from ._linearise import CriticalPoint, _find_critical_point, _jacobian
from ._markov import MarkovChain, symmetry_breaking_pi
from ._model import OneLayerTransformer, init_transformer, population_loss_from_matrices


def embed_rank_one(model: OneLayerTransformer, m: int, m_attn: int) -> OneLayerTransformer:
    """Place an ``m = m' = 1`` model in widths ``(m, m_attn)`` along the first basis vectors
    (``W0 = gamma e1^T``, ``W1 = e1 beta^T``, ``WQ = q e1 e1^T``, ``WK = k e1 e1^T``)."""
    if model.W0.shape[1] != 1 or model.WQ.shape[1] != 1:
        raise ValueError(
            f"expected an m = m' = 1 model, got W0 {model.W0.shape}, WQ {model.WQ.shape}"
        )
    d = model.W0.shape[0]
    z = jnp.zeros((), model.W0.dtype)
    return OneLayerTransformer(
        W0=jnp.zeros((d, m), z.dtype).at[:, 0].set(model.W0[:, 0]),
        W1=jnp.zeros((m, d), z.dtype).at[0].set(model.W1[0]),
        WQ=jnp.zeros((m, m_attn), z.dtype).at[0, 0].set(model.WQ[0, 0]),
        WK=jnp.zeros((m, m_attn), z.dtype).at[0, 0].set(model.WK[0, 0]),
    )


def rank_one_part(model: OneLayerTransformer) -> OneLayerTransformer:
    """The ``m = m' = 1`` model of the top singular direction ``alpha`` of ``W0``:
    ``W0 alpha``, ``alpha^T W1`` and ``WQ = WK = 0`` (the part of a point near the unigram
    saddle that lives on the rank-one manifold)."""
    _, _, Vt = jnp.linalg.svd(model.W0, full_matrices=False)
    alpha = Vt[0]
    zero = jnp.zeros((1, 1), model.W0.dtype)
    return OneLayerTransformer(
        W0=(model.W0 @ alpha)[:, None], W1=(alpha @ model.W1)[None, :], WQ=zero, WK=zero
    )


def balance_rank_one(model: OneLayerTransformer) -> OneLayerTransformer:
    """The balanced representative of an ``m = m' = 1`` model's symmetry orbit.

    ``(gamma, beta, q, k) -> (a gamma, beta / a, b q / a, k / (a b))`` leaves ``M`` and ``Phi``
    (so the loss) unchanged but not the Jacobian's eigenvalues; ``||gamma|| = ||beta||`` and
    ``|q| = |k|`` fix ``a`` and ``b`` (the gauge a flow from a small initialisation keeps), so
    that eigenvalues at critical points found by root-finding are comparable.
    """
    gamma, beta = model.W0[:, 0], model.W1[0]
    a = jnp.sqrt(jnp.linalg.norm(beta) / jnp.linalg.norm(gamma))
    q, k = model.WQ[0, 0], model.WK[0, 0]
    r = jnp.sqrt(jnp.abs(q * k)) / a
    return OneLayerTransformer(
        W0=model.W0 * a,
        W1=model.W1 / a,
        WQ=jnp.reshape(jnp.where(q < 0, -r, r), (1, 1)),
        WK=jnp.reshape(jnp.where(k < 0, -r, r), (1, 1)),
    )


class RankOneCriticalPoint(AbstractResult):
    """A critical point on the rank-one manifold and its split spectrum.

    Attributes:
        point: the critical point as an ``m = m' = 1`` model (:class:`CriticalPoint`), in the
            balanced gauge (:func:`balance_rank_one`).
        tangential: eigenvalues of ``J`` along the manifold, decreasing (they include the exact
            zeros of the rescaling symmetries ``W0 -> a W0, W1 -> W1 / a`` and ``WQ -> b WQ,
            WK -> WK / b``).
        transverse: eigenvalues of ``J`` off the manifold (computed in widths ``m = m' = 2``;
            wider models repeat them), decreasing.
        grad_M_singular_values: singular values of ``dL/dM`` at the point, decreasing.
        grad_Phi_norm: ``||dL/dPhi||_F`` at the point.
    """

    point: CriticalPoint
    tangential: Float[Array, " nt"]
    transverse: Float[Array, " nn"]
    grad_M_singular_values: Float[Array, " d"]
    grad_Phi_norm: Scalar

    @property
    def transverse_rate(self) -> Scalar:
        """The top transverse eigenvalue: the growth rate of a new embedding direction."""
        return self.transverse[0]


def _tangential_mask(model2: OneLayerTransformer) -> Array:
    ones = embed_rank_one(
        OneLayerTransformer(
            W0=jnp.ones((model2.W0.shape[0], 1)),
            W1=jnp.ones((1, model2.W0.shape[0])),
            WQ=jnp.ones((1, 1)),
            WK=jnp.ones((1, 1)),
        ),
        2,
        2,
    )
    return ravel_pytree(ones)[0] > 0


@eqx.filter_jit
def _rank_one_spectrum(point: CriticalPoint, pi, P) -> RankOneCriticalPoint:
    point = eqx.tree_at(lambda p: p.model, point, balance_rank_one(point.model))
    model2 = embed_rank_one(point.model, 2, 2)
    J = _jacobian(model2, pi, P)
    tangential = _tangential_mask(model2)
    n = J.shape[0]
    nt = 2 * model2.W0.shape[0] + 2
    idx_t = jnp.nonzero(tangential, size=nt)[0]
    idx_n = jnp.nonzero(~tangential, size=n - nt)[0]
    ev_t = jnp.linalg.eigvalsh(J[jnp.ix_(idx_t, idx_t)])[::-1]
    ev_n = jnp.linalg.eigvalsh(J[jnp.ix_(idx_n, idx_n)])[::-1]
    M, Phi = point.model.matrices()
    gM, gPhi = jax.grad(population_loss_from_matrices, argnums=(0, 1))(M, Phi, pi, P)
    return RankOneCriticalPoint(
        point=point,
        tangential=ev_t,
        transverse=ev_n,
        grad_M_singular_values=jnp.linalg.svd(gM, compute_uv=False),
        grad_Phi_norm=jnp.linalg.norm(gPhi),
    )


@eqx.filter_jit
def _flow_to_stall(model0, pi, P, t_max, rtol, atol, steady_tol, max_steps):
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(gradient_field),
        diffrax.Tsit5(),
        t0=jnp.zeros_like(t_max),
        t1=t_max,
        dt0=None,
        y0=model0,
        args=(jnp.asarray(pi), jnp.asarray(P)),
        saveat=diffrax.SaveAt(t1=True),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        event=diffrax.Event(diffrax.steady_state_event(rtol=0.0, atol=steady_tol)),
        max_steps=max_steps,
        throw=False,
    )
    return jax.tree_util.tree_map(lambda x: x[-1], sol.ys)


def rank_one_critical_point(
    model0: OneLayerTransformer,
    chain: MarkovChain,
    t_max: Float[ArrayLike, ""],
    *,
    rtol: float = 1e-9,
    atol: float = 1e-12,
    steady_tol: float = 1e-9,
    max_steps: int = 100_000,
    root_tol: float = 1e-13,
) -> RankOneCriticalPoint:
    """The critical point where the flow on the rank-one manifold of ``chain`` stalls.

    Runs the flow of the ``m = m' = 1`` model ``model0`` (e.g. a small initialisation, which
    stays on the manifold) until it is steady (``||grad L|| <= steady_tol``) or ``t_max``,
    root-finds ``grad L = 0`` from there (:func:`find_critical_point`, tolerance ``root_tol``:
    eigenvalues move with the point to first order) and splits the Jacobian there into its
    tangential and transverse blocks. The approach to the stall is slow (the smallest
    tangential eigenvalues can be ``1e-3``), hence the steady-state stop instead of a fixed
    time. A flow with no finite stall leaves the root-finder far from a critical point: its
    ``point.status`` then says ``not_converged``. ``rtol``, ``atol``: the flow's tolerances.
    """
    if model0.W0.shape[1] != 1 or model0.WQ.shape[1] != 1:
        raise ValueError(
            f"model0 must have m = m' = 1, got W0 {model0.W0.shape}, WQ {model0.WQ.shape}"
        )
    pi, P = chain.pi, chain.P
    t_max = jnp.asarray(t_max, model0.W0.dtype)
    end = _flow_to_stall(model0, pi, P, t_max, rtol, atol, steady_tol, max_steps)
    point = _find_critical_point(end, pi, P, rtol=root_tol, atol=root_tol)
    return _rank_one_spectrum(point, pi, P)


@eqx.filter_jit
def track_rank_one_branch(
    start: OneLayerTransformer,
    chains: MarkovChain,
    *,
    root_tol: float = 1e-13,
) -> RankOneCriticalPoint:
    """Follow a branch of rank-one critical points along a sequence of chains (``chains``: a
    :class:`MarkovChain` with a leading axis, e.g. ``jax.vmap`` of a constructor over
    increasing ``delta``): each root-find starts from the previous solution
    (natural continuation) with tolerance ``root_tol``. Returns the points stacked along a
    leading axis."""
    if start.W0.shape[1] != 1 or start.WQ.shape[1] != 1:
        raise ValueError(
            f"start must have m = m' = 1, got W0 {start.W0.shape}, WQ {start.WQ.shape}"
        )

    def step(model, arrays):
        pi, P = arrays
        point = _find_critical_point(model, pi, P, rtol=root_tol, atol=root_tol)
        found = _rank_one_spectrum(point, pi, P)
        return found.point.model, found

    _, branch = jax.lax.scan(step, start, (chains.pi, chains.P))
    return branch


def symmetry_breaking_branch(
    pi_top: float, d: int, lam: float, deltas, eps: float, t_stall: float, key
):
    """The rank-one critical points of ``pi = symmetry_breaking_pi(pi_top, delta, c)`` (``c``
    linear from 1 to -1) in the paper's family at each of ``deltas`` (``deltas[0] = 0``):
    the stall of the symmetric chain found by the rank-one flow from an ``eps``-scale
    initialisation, then followed by continuation (:func:`track_rank_one_branch`). Host arrays."""
    direction = jnp.linspace(1.0, -1.0, d - 1)
    pis = jax.vmap(lambda x: symmetry_breaking_pi(pi_top, x, direction))(jnp.asarray(deltas))
    chains = jax.vmap(lambda p: MarkovChain.paper(p, lam))(pis)
    first = jax.tree_util.tree_map(lambda x: x[0], chains)
    stall = rank_one_critical_point(init_transformer(key, d, 1, 1, eps), first, t_stall)
    return jax.tree_util.tree_map(np.asarray, track_rank_one_branch(stall.point.model, chains))


def branch_checks(run, deltas, branch) -> tuple:
    """Records on ``run`` the claims on a :func:`symmetry_breaking_branch` (``deltas[0] = 0``):
    the root-finder's status and ``lambda_T = sigma_1(dL/dM)`` (consistency), the degenerate
    stall at 0, ``lambda_T``'s order 1 and each simple tangential eigenvalue's order 2 in delta
    (local exponents at the two smallest deltas, error their change over one refinement), the
    split of pairs degenerate at 0 and the power-law fits (reported). Returns ``(zero,
    degenerate, steps)``: the tangential eigenvalues zero and degenerate at 0, and their
    changes between consecutive deltas."""
    from .._numerics import fit_power_law
    from .._status import Status
    from ..evidence import local_exponents
    from . import claims
    from ._checks import EIGEN_RTOL

    def exponents(x, y):
        return local_exponents(x, np.abs(y))[0]

    def order(name, claim, x, y):
        note = "local exponent at the two smallest deltas; error its change over one refinement"
        run.evidence(
            name, claim(x, y), note=f"{note} (all: {np.round(exponents(x, y), 4).tolist()})"
        )

    b = branch
    ok = Status.code(b.point.status) == Status.code(Status.successful)
    residual = f"max ||grad L|| = {float(np.max(b.point.grad_norm)):.2e}"
    run.consistency(
        "branch_converged",
        expected=len(deltas),
        measured=int(ok.sum()),
        basis="root-finder status per delta",
        note=f"root-finder residuals {residual}",
    )
    tang, scale = b.tangential, float(np.max(np.abs(b.tangential)))
    lam_t, sv = b.transverse[:, 0], b.grad_M_singular_values
    run.consistency(
        "transverse_block_is_grad_M",
        expected=0.0,
        measured=float(np.max(np.abs(lam_t - sv[:, 0]))),
        tolerance=EIGEN_RTOL * scale,
        basis="eigh backward error x ||J||",
        note="max over deltas of |lambda_T - sigma_1(dL/dM)|; max ||dL/dPhi|| = "
        f"{float(np.max(b.grad_Phi_norm)):.2e}",
    )
    run.evidence(
        "degenerate_stall_at_delta_0",
        claims.degenerate_stall(b.transverse[0], scale, rtol=EIGEN_RTOL),
        note="every transverse eigenvalue at delta = 0 (symmetric low-frequency tokens)",
    )
    pos = deltas > 0
    x = deltas[pos]
    order("transverse_rate_order", claims.transverse_rate_order, x, lam_t[pos])
    run.scalar("transverse_rate_fit_smallest_4", fit_power_law(x[:4], lam_t[pos][:4]).as_dict())
    run.scalar("lambda_T_over_delta", (lam_t[pos] / x).tolist())
    # simple tangential eigenvalues: lambda(delta_{k+1}) - lambda(delta_k) is O(delta_k^2)
    # exactly when lambda = lambda(0+) + O(delta^2), whichever point the root-finder picked at
    # delta = 0; the power-law fit beside it models scatter, not that bias: reported
    zero = np.abs(tang[0]) <= EIGEN_RTOL * scale
    close = np.abs(np.diff(tang[0])) <= 1e-6 * scale
    degenerate = (np.r_[close, False] | np.r_[False, close]) & ~zero
    steps = np.abs(np.diff(tang[pos], axis=0))
    for i in np.nonzero(~zero & ~degenerate)[0]:
        order(f"tangential_order[{i}]", claims.tangential_order, x[:-1], steps[:, i])
        fit = fit_power_law(x[:-1], steps[:, i])
        run.scalar(f"tangential_order_power_law_fit[{i}]", fit.as_dict())
    pairs = [i for i in np.nonzero(degenerate)[0][:-1] if degenerate[i + 1] and close[i]]
    run.scalar(
        "degenerate_pair_split_exponents",
        {
            f"{tang[0, i]:.4g}": exponents(x, tang[pos, i] - tang[pos, i + 1]).tolist()
            for i in pairs
        },
    )
    run.scalar("second_transverse_exponents", exponents(x, sv[pos, 1]).tolist())
    return zero, degenerate, steps
