"""``focus-dilution-lyapunov``: the rank-one critical points as the asymmetry ``delta`` grows
from 0, and the eigenvalues that decide the escape from them (focus_dilution.md, stage 4).

The branch starts at the stall of the exactly symmetric chain (``delta = 0``, found by the
rank-one flow) and is followed by continuation. Along it the transverse block of ``J`` is
``+-sigma_i(dL/dM)`` (``dL/dPhi = 0``): zero at ``delta = 0``, with a top eigenvalue
``lambda_T = Theta(delta)``. With the default direction (linear from 1 to -1) ``delta -> -delta``
permutes the low-frequency tokens, so every eigenvalue is an even function of ``delta``:
simple tangential eigenvalues move by ``O(delta^2)``, pairs that are degenerate at ``delta = 0``
(the permutation symmetry of the low-frequency tokens) split by ``O(|delta|)``, and
``lambda_T = a |delta| + O(|delta|^3)``.

Orders are measured by local exponents ``log(y_{i+1} / y_i) / log(delta_{i+1} / delta_i)``
on a geometric grid; the one at the two smallest deltas estimates the order with the a-posteriori
error ``|e_1 - e_2|`` (the change over one refinement; it bounds the remaining error when, as
for an analytic expansion, the error at least halves per refinement).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ... import evidence, fit_power_law, gradflow as gf
from ..._status import Status
from ...plotting import new_figure
from ...runs import ConfigError, ExperimentConfig, Run, negative_control, register_experiment
from ._common import EIGEN_RTOL, check_lam


@dataclasses.dataclass(frozen=True, kw_only=True)
class LyapunovConfig(ExperimentConfig):
    """Rank-one critical points of ``pi = (pi_top, (1 - pi_top)/(d - 1) + delta c)``,
    ``P = lam I + (1 - lam) 1 pi^T`` for ``delta = 0`` and a geometric grid.

    Attributes:
        pi_top: probability of the frequent token.
        d: vocabulary size.
        lam: self-transition weight of the paper's family.
        delta_min: smallest positive delta.
        delta_max: largest delta.
        n_deltas: positive deltas (geometric from delta_min to delta_max, at least 4).
        eps: scale of the rank-one flow's initialisation.
        t_stall: end time of the rank-one flow at delta = 0.
    """

    pi_top: float = 0.75
    d: int = 4
    lam: float = 0.5
    delta_min: float = 3.125e-4
    delta_max: float = 0.04
    n_deltas: int = 8
    eps: float = 1e-3
    t_stall: float = 3000.0

    def validate(self) -> None:
        if self.d < 3 or not 0 < self.pi_top < 1:
            raise ConfigError(
                f"need d >= 3 and pi_top in (0, 1), got d={self.d}, pi_top={self.pi_top}"
            )
        check_lam(self.lam)
        if not 0 < self.delta_min < self.delta_max or self.n_deltas < 4:
            raise ConfigError("need 0 < delta_min < delta_max and n_deltas >= 4")
        c = np.linspace(1.0, -1.0, self.d - 1)
        if np.any((1 - self.pi_top) / (self.d - 1) + self.delta_max * (c - c.mean()) <= 0):
            raise ConfigError(f"delta_max={self.delta_max} makes a probability non-positive")
        if not (0 < self.eps < 0.1 and self.t_stall > 0):
            raise ConfigError("need eps in (0, 0.1) and t_stall > 0")

    @classmethod
    def quick(cls) -> dict:
        return {"n_deltas": 6, "delta_max": 0.01}


def local_exponents(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The local exponents of ``|y|`` in ``x`` between consecutive points."""
    return evidence.local_exponents(x, np.abs(y))[0]


def _order_check(run: Run, name: str, claim, x, y):
    e = local_exponents(x, y)
    run.evidence(
        name,
        claim(x, y),
        note=f"local exponent at the two smallest deltas; error the change of the local exponent "
        f"over one refinement (all: {np.round(e, 4).tolist()})",
    )
    return e


@negative_control("focus-dilution-lyapunov", "transverse_rate_order")
def _a_quadratic_rate():
    x = np.geomspace(1e-3, 1e-2, 5)
    return gf.claims.transverse_rate_order(x, 0.3 * x**2 * (1 + x))


@negative_control("focus-dilution-lyapunov", "tangential_order")
def _a_linear_change():
    x = np.geomspace(1e-3, 1e-2, 5)
    return gf.claims.tangential_order(x, 0.3 * x * (1 + x))


@negative_control("focus-dilution-lyapunov", "degenerate_stall_at_delta_0")
def _an_asymmetric_stall():
    return gf.claims.degenerate_stall(np.array([0.002, -0.002]), 0.7)


def _branch(config: LyapunovConfig):
    direction = jnp.linspace(1.0, -1.0, config.d - 1)
    deltas = np.concatenate(
        [[0.0], np.geomspace(config.delta_min, config.delta_max, config.n_deltas)]
    )
    pis = jax.vmap(lambda x: gf.symmetry_breaking_pi(config.pi_top, x, direction))(
        jnp.asarray(deltas)
    )
    chains = jax.vmap(lambda p: gf.MarkovChain.paper(p, config.lam))(pis)
    first = jax.tree_util.tree_map(lambda x: x[0], chains)
    model0 = gf.init_transformer(jax.random.key(config.seed), config.d, 1, 1, config.eps)
    stall = gf.rank_one_critical_point(model0, first, config.t_stall)
    branch = gf.track_rank_one_branch(stall.point.model, chains)
    return deltas, jax.tree_util.tree_map(np.asarray, branch)


def _tangential_orders(run: Run, deltas, b, scale):
    """Orders of the tangential eigenvalues along the branch: simple ones checked for
    ``O(delta^2)``; the split of pairs degenerate at ``delta = 0`` reported.

    ``tangential_order[i]`` is the local exponent at the two smallest deltas with the
    a-posteriori error of the other order checks (:func:`_order_check`). A power law fitted over
    the whole branch is reported beside it (``tangential_order_power_law_fit[i]``): its interval
    models scatter, not the ``O(delta^2)`` bias of the expansion's next term, so it is not a
    test of the order."""
    tang, pos = b.tangential, deltas > 0
    zero = np.abs(tang[0]) <= EIGEN_RTOL * scale
    close = np.abs(np.diff(tang[0])) <= 1e-6 * scale
    degenerate = (np.r_[close, False] | np.r_[False, close]) & ~zero
    # successive differences along the branch: lambda(delta_{k+1}) - lambda(delta_k) is
    # O(delta_k^2) exactly when lambda = lambda(0+) + O(delta^2), whichever point the
    # symmetric chain's root-finder picked at delta = 0
    x = deltas[pos]
    steps = np.abs(np.diff(tang[pos], axis=0))
    for i in np.nonzero(~zero & ~degenerate)[0]:
        _order_check(
            run, f"tangential_order[{i}]", gf.claims.tangential_order, x[:-1], steps[:, i]
        )
        fit = fit_power_law(x[:-1], steps[:, i])
        run.scalar(f"tangential_order_power_law_fit[{i}]", fit.as_dict())
    pairs = [i for i in np.nonzero(degenerate)[0][:-1] if degenerate[i + 1] and close[i]]
    split = {
        f"{tang[0, i]:.4g}": local_exponents(x, tang[pos, i] - tang[pos, i + 1]).tolist()
        for i in pairs
    }
    run.scalar("degenerate_pair_split_exponents", split)
    return zero, degenerate, steps


def _figure(run: Run, deltas, b, steps, zero, degenerate) -> None:
    pos = deltas > 0
    x = deltas[pos]
    fig, axes = new_figure(1, 2)
    ax = axes[0, 0]
    ax.loglog(x, b.transverse[pos, 0], "o-", label="lambda_T (top transverse)")
    ax.loglog(x, b.grad_M_singular_values[pos, 1], "s-", label="sigma_2(dL/dM)")
    for i in np.nonzero(~zero)[0]:
        color = "#d95f02" if degenerate[i] else "#1b9e77"
        ax.loglog(x[:-1], steps[:, i], ".:", lw=0.8, color=color)
    for k, style in ((1, "k--"), (2, "k-."), (3, "k:")):
        ax.loglog(x, b.transverse[pos, 0][0] * (x / x[0]) ** k, style, lw=0.6, label=f"slope {k}")
    ax.set_xlabel("delta")
    ax.set_title(
        "transverse eigenvalues; tangential changes between deltas\n"
        "(green simple, orange degenerate at delta = 0)",
        fontsize=8,
    )
    ax.legend(fontsize=6)
    ax = axes[0, 1]
    ax.plot(deltas, b.tangential, "o", ms=2, color="#1b9e77")
    ax.plot(deltas, b.transverse, "s", ms=2, color="#7570b3")
    ax.set_xlabel("delta")
    ax.set_title("spectrum of J at the rank-one critical point", fontsize=9)
    run.save_figure(fig, "lyapunov_schmidt")


@register_experiment(
    "focus-dilution-lyapunov",
    LyapunovConfig,
    "rank-one critical points vs delta: transverse eigenvalue Theta(delta), tangential O(delta^2)",
    title="Rank-one critical points against delta",
    docs="focus_dilution.md#lyapunov",
)
def run_lyapunov(config: LyapunovConfig, run: Run) -> None:
    """Rank-one critical points tracked over delta, their tangential and transverse spectra."""
    deltas, b = _branch(config)
    ok = Status.code(b.point.status) == Status.code(Status.successful)
    run.consistency(
        "branch_converged",
        expected=len(deltas),
        measured=int(ok.sum()),
        basis="root-finder status per delta",
        note=f"root-finder residuals max ||grad L|| = {float(np.max(b.point.grad_norm)):.2e}",
    )
    scale = float(np.max(np.abs(b.tangential)))
    lam_t, sv = b.transverse[:, 0], b.grad_M_singular_values
    gap = float(np.max(np.abs(lam_t - sv[:, 0])))
    run.consistency(
        "transverse_block_is_grad_M",
        expected=0.0,
        measured=gap,
        tolerance=EIGEN_RTOL * scale,
        basis="eigh backward error x ||J||",
        note=f"max over deltas of |lambda_T - sigma_1(dL/dM)|; max ||dL/dPhi|| = "
        f"{float(np.max(b.grad_Phi_norm)):.2e}",
    )
    run.evidence(
        "degenerate_stall_at_delta_0",
        gf.claims.degenerate_stall(b.transverse[0], scale, rtol=EIGEN_RTOL),
        note="every transverse eigenvalue at delta = 0 (symmetric low-frequency tokens)",
    )
    pos = deltas > 0
    _order_check(
        run, "transverse_rate_order", gf.claims.transverse_rate_order, deltas[pos], lam_t[pos]
    )
    fit = fit_power_law(deltas[pos][:4], lam_t[pos][:4])
    run.scalar("transverse_rate_fit_smallest_4", fit.as_dict())
    run.scalar("lambda_T_over_delta", (lam_t[pos] / deltas[pos]).tolist())
    zero, degenerate, steps = _tangential_orders(run, deltas, b, scale)
    run.scalar("second_transverse_exponents", local_exponents(deltas[pos], sv[pos, 1]).tolist())
    run.save_arrays(
        transverse=b.transverse,
        tangential=b.tangential,
        grad_M_singular_values=sv,
        loss=b.point.loss,
        dims={
            "transverse": ("delta", "transverse_exponent"),
            "tangential": ("delta", "tangential_exponent"),
            "grad_M_singular_values": ("delta", "singular_value"),
            "loss": ("delta",),
        },
        coords={"delta": deltas},
    )
    _figure(run, deltas, b, steps, zero, degenerate)
