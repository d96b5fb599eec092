"""The copy head's transition through the learning coefficient (docs/llc.md, "Copy-head
transition").

On the copy task's Bayesian network (``jaxdyn.copyhead.CopyHeadPosterior``: f(X) = A(G) X W,
Gaussian likelihood at temperature T, priors W_ij ~ N(0, sigma_w^2 / V), G_lm ~ N(0, sigma_g^2))
each phase is a mode of the posterior at finite weights: the copy phase's loss alone has its
minimum at infinite logits (softmax) or unbounded scores, the prior makes the mode finite. With
n = P sequences and the per-sequence loss including the prior, n L_n(w) = E(W, G) (the joint
energy), so the mode is a minimum of L_n and its local learning coefficient is measured there.

Singular learning theory's free energy of a phase, F = n L_n(w_phase) + lambda_phase ln n
(dropping -(m - 1) ln ln n + O(1)), predicts the transition where F_copy = F_pool. The finite-n
correction is estimated by the Laplace free energy of the exact G-marginal (W integrated out
exactly, ``CopyHeadPosterior.action``): F_Lap = S(G_phase) + (1/2) ln det grad^2 S(G_phase), the
same expansion with the O(1) terms kept; its crossing minus the LLC's crossing is the error
budget in ln P*.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.optimize

from .. import copyhead as ch
from ._estimate import estimate_llc


class PhaseMode(NamedTuple):
    G: np.ndarray
    W: np.ndarray
    energy: float  # n L_n(w_phase) = E(W, G), prior included
    copy_weight: float  # mean A_{l, l-1}
    action: float  # S(G_marginal_mode)
    log_det: float  # ln det of grad^2 S at the marginal mode
    marginal_copy_weight: float  # mean A_{l, l-1} at the marginal mode


def _profile(g, posterior, stats):
    L = stats.N.shape[0]
    G = g.reshape(L, L)
    return posterior.energy(posterior.readout(G, stats), G, stats)


def _marginal(g, posterior, stats):
    L = stats.N.shape[0]
    return posterior.action(g.reshape(L, L), stats)


_value_and_grad = {f: eqx.filter_jit(jax.value_and_grad(f)) for f in (_profile, _marginal)}


@eqx.filter_jit
def _marginal_hessian(g, posterior, stats):
    """grad^2 S row by row (Hessian-vector products in sequence: memory O(L^2 V^2))."""
    grad = jax.grad(_marginal)

    def hvp(v):
        return jax.jvp(lambda x: grad(x, posterior, stats), (g,), (v,))[1]

    return jax.lax.map(hvp, jnp.eye(g.shape[0], dtype=g.dtype))


@eqx.filter_jit
def _flow(fn, x0, posterior, stats, steps: int = 4000, lr: float = 0.02):
    """Adam with a small rate from x0 (gradient-flow-like: it stays in x0's basin where a
    quasi-Newton step from a strong copy pattern can jump the barrier)."""
    opt = optax.adam(lr)
    grad = jax.grad(fn)

    def step(carry, _):
        x, state = carry
        upd, state = opt.update(grad(x, posterior, stats), state)
        return (optax.apply_updates(x, upd), state), None

    (x, _), _ = jax.lax.scan(step, (x0, opt.init(x0)), None, length=steps)
    return x


def _minimise(fn, x0, posterior, stats):
    vg = _value_and_grad[fn]

    def f(x):
        v, g = vg(jnp.asarray(x), posterior, stats)
        return float(v), np.asarray(g, dtype=float)

    x1 = _flow(fn, jnp.asarray(x0), posterior, stats)
    res = scipy.optimize.minimize(
        f,
        np.asarray(x1, float),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 5000, "gtol": 1e-9},
    )
    return jnp.asarray(res.x)


def _copy_weight(posterior, G) -> float:
    A = posterior.attention(G)
    return float(jnp.mean(jnp.diag(jnp.roll(A, 1, axis=1))))  # A_{l, l-1}


def modes(posterior, X, Y, start_gap: float):
    """The posterior modes reached from the pooling start (G = 0) and the copy start
    (G = start_gap x the shift pattern): the joint mode (min over W is W*(G), the posterior
    mean of W given G) and the G-marginal mode (the exact action S(G)) with its Hessian's log
    determinant."""
    L = X.shape[1]
    stats = ch.copy_statistics(X, Y)
    S = jnp.roll(jnp.eye(L), -1, axis=1)
    out = []
    for g0 in (jnp.zeros(L * L), (start_gap * S).reshape(-1)):
        g = _minimise(_profile, g0, posterior, stats)
        G = g.reshape(L, L)
        W = posterior.readout(G, stats)
        gm = _minimise(_marginal, g0, posterior, stats)
        sign, logdet = np.linalg.slogdet(np.asarray(_marginal_hessian(gm, posterior, stats)))
        out.append(
            PhaseMode(
                np.asarray(G),
                np.asarray(W),
                float(_profile(g, posterior, stats)),
                _copy_weight(posterior, G),
                float(_marginal(gm, posterior, stats)),
                float(logdet) if sign > 0 else math.nan,
                _copy_weight(posterior, gm.reshape(L, L)),
            )
        )
    return out


def llc_loss(posterior):
    """Per-sequence loss with the prior spread over the n sequences: n L_n = E(W, G). The data
    are padded to a common length with a mask (one compilation for every P)."""
    T = posterior.temperature
    V2 = posterior.sigma_w2
    G2 = posterior.sigma_g2

    def loss(w, batch):
        G, W = w
        X, Y, mask = batch
        n = jnp.sum(mask)
        err = jnp.sum((Y - posterior.head(G, X, W)) ** 2, axis=(1, 2))
        prior = W.shape[0] * jnp.sum(W**2) / (2 * V2) + jnp.sum(G**2) / (2 * G2)
        return (jnp.sum(mask * err) / (2 * T) + prior) / n

    return loss


class PhasePoint(NamedTuple):
    P: int
    energy: tuple  # (pool, copy) n L_n at the joint modes
    llc: tuple
    llc_stderr: tuple
    copy_weight: tuple
    laplace: tuple  # (pool, copy) S + (1/2) ln det
    same_mode: bool  # both starts reached one joint mode
    same_marginal_mode: bool  # both starts reached one mode of S(G)


def measure(
    posterior,
    L,
    V,
    Ps,
    *,
    key,
    P_max,
    start_gap,
    num_chains,
    num_draws,
    num_burnin,
    step_size,
    localization,
):
    """Both phases' n L_n, LLC and Laplace free energy at each P (one data draw per P)."""
    loss = llc_loss(posterior)
    pts = []
    for i, P in enumerate(Ps):
        kd, ks = jax.random.split(jax.random.fold_in(key, i))
        X, Y = ch.copy_task(kd, int(P), L, V)
        pool, copy = modes(posterior, X, Y, start_gap)
        pad = ((0, P_max - int(P)), (0, 0), (0, 0))
        data = (
            jnp.pad(X, pad),
            jnp.pad(Y, pad),
            jnp.pad(jnp.ones(int(P), X.dtype), (0, P_max - int(P))),
        )
        ests = [
            estimate_llc(
                loss,
                (jnp.asarray(m.G), jnp.asarray(m.W)),
                data,
                key=jax.random.fold_in(ks, j),
                n=float(P),
                num_chains=num_chains,
                num_draws=num_draws,
                num_burnin=num_burnin,
                step_size=step_size,
                localization=localization,
            )
            for j, m in enumerate((pool, copy))
        ]
        same = abs(pool.copy_weight - copy.copy_weight) < 1e-3
        pts.append(
            PhasePoint(
                int(P),
                (pool.energy, copy.energy),
                tuple(float(e.llc) for e in ests),
                tuple(float(e.stderr) for e in ests),
                (pool.copy_weight, copy.copy_weight),
                (pool.action + 0.5 * pool.log_det, copy.action + 0.5 * copy.log_det),
                same,
                abs(pool.marginal_copy_weight - copy.marginal_copy_weight) < 1e-3,
            )
        )
    return pts


def crossing(Ps, delta):
    """ln P where delta (F_copy - F_pool) changes sign from + to -, interpolated linearly in
    ln P between the grid points around the first change; nan when it does not change sign
    on points where both are finite."""
    lp = np.log(np.asarray(Ps, float))
    d = np.asarray(delta, float)
    for i in range(len(d) - 1):
        if np.isfinite(d[i]) and np.isfinite(d[i + 1]) and d[i] > 0 >= d[i + 1]:
            return float(lp[i] + d[i] * (lp[i + 1] - lp[i]) / (d[i] - d[i + 1]))
    return math.nan


def predicted_transitions(points, *, llc=None):
    """ln P* of: the LLC free energy (``llc``: (pool, copy) arrays overriding the measured
    ones), the loss alone (lambda terms dropped), and the Laplace free energy; plus the
    slope of F_copy - F_pool in ln P and the LLC crossing's standard error (delta method)."""
    Ps = np.array([p.P for p in points], float)
    E = np.array([p.energy for p in points])
    lam = np.array([p.llc for p in points]) if llc is None else np.asarray(llc)
    se = np.array([p.llc_stderr for p in points])
    lnP = np.log(Ps)
    # one mode reached from both starts: the phases do not coexist there, no difference to read
    distinct = np.array([not p.same_mode for p in points])
    E = np.where(distinct[:, None], E, np.nan)
    dF = (E[:, 1] - E[:, 0]) + (lam[:, 1] - lam[:, 0]) * lnP
    distinct_marginal = np.array([not p.same_marginal_mode for p in points])
    lap = np.where(distinct_marginal[:, None], np.array([p.laplace for p in points]), np.nan)
    ln_star = crossing(Ps, dF)
    # slope of dF at the crossing and the delta-method SE of the crossing from the LLC's SE
    slope, stat = math.nan, math.nan
    if np.isfinite(ln_star):
        i = int(np.searchsorted(lnP, ln_star)) - 1
        i = min(max(i, 0), len(Ps) - 2)
        slope = (dF[i + 1] - dF[i]) / (lnP[i + 1] - lnP[i])
        w = (ln_star - lnP[i]) / (lnP[i + 1] - lnP[i])
        var = ((1 - w) * lnP[i]) ** 2 * (se[i] ** 2).sum() + (w * lnP[i + 1]) ** 2 * (
            se[i + 1] ** 2
        ).sum()
        stat = math.sqrt(var) / abs(slope)
    return {
        "ln_P_llc": ln_star,
        "ln_P_loss": crossing(Ps, E[:, 1] - E[:, 0]),
        "ln_P_laplace": crossing(Ps, lap[:, 1] - lap[:, 0]),
        "slope": slope,
        "stat_stderr": stat,
    }


def posterior(head: str):
    """The copy head's posterior at T = sigma_w^2 = sigma_g^2 = 1 (copy_head.md's defaults)."""
    return ch.CopyHeadPosterior(ch.SoftmaxCopyHead() if head == "softmax" else ch.LinearCopyHead())


def exact_transition(head: str, L: int, V: int, P_min: float, P_max: float) -> tuple[float, str]:
    """The reduced action's P* (``jaxdyn.copyhead.locate_transition``) and its order."""
    model = ch.SoftmaxReduced(L=L, V=V) if head == "softmax" else ch.LinearReduced(L=L, V=V)
    _, _, info = ch.locate_transition(model, P_min, P_max, 40)
    star = info["P_star"]
    return (math.nan if star is None else float(star)), str(info["transition_order"].name)


class Transition(NamedTuple):
    """The free-energy prediction of one network's transition against the reduced action's."""

    P_exact: float  # the reduced action's P* (nan when it has none in [1, 1e3])
    order: str  # its transition order
    Ps: np.ndarray  # the P measured
    points: list  # a PhasePoint per P
    predicted: dict  # predicted_transitions(points)
    swapped: dict  # the same with the two phases' LLC terms exchanged
    correction: float  # |Laplace crossing - LLC crossing| in ln P* (inf when either is missing)


def copy_head_transition(
    head: str, L: int, V: int, *, key, points: int, localization: float, **estimate
) -> Transition:
    """Both phases measured at ``points`` P log-spaced over [0.8 P*, 1.3 P*] around the reduced
    action's P* (rounded: the phases coexist as posterior modes only in a narrow window at
    finite data) and the crossings predicted from them; ``estimate``: ``num_chains``,
    ``num_draws``, ``num_burnin``, ``step_size`` of each LLC estimate."""
    P_exact, order = exact_transition(head, L, V, 1.0, 1e3)
    if not np.isfinite(P_exact):
        return Transition(P_exact, order, np.zeros(0, int), [], {}, {}, math.inf)
    Ps = np.unique(np.round(np.geomspace(0.8 * P_exact, 1.3 * P_exact, points)).astype(int))
    start_gap = 2 * math.log(L) if head == "softmax" else float(L)
    pts = measure(
        posterior(head), L, V, Ps, key=key, P_max=int(Ps[-1]), start_gap=start_gap,
        localization=localization, **estimate,
    )  # fmt: skip
    pred = predicted_transitions(pts)
    swapped = predicted_transitions(pts, llc=np.array([p.llc for p in pts])[:, ::-1])
    correction = abs(pred["ln_P_laplace"] - pred["ln_P_llc"])
    return Transition(
        P_exact, order, Ps, pts, pred, swapped, correction if np.isfinite(correction) else math.inf
    )
