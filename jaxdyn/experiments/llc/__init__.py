"""copy-head-llc: the LLC estimator calibrated against exact learning coefficients, the
copy-head network's symmetries included (docs/llc.md, "Calibration").

Each problem (``_problems.py``) has a minimum w* and an exact lambda; the estimate
(:func:`jaxdyn.llc.estimate_llc`) is judged against it with the chains' standard error plus
the sampler's bias at the chosen step size and localisation (exact for the quadratic part of the
loss, :func:`jaxdyn.llc.quadratic_llc`; for reduced-rank regression the step size's effect is
measured by :func:`jaxdyn.llc.step_size_effect`), against the alternative a wrong theory gives
(a wrong d, the regular count, the symmetries ignored).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from ...llc import claims, estimate_llc, step_size_effect
from ...runs import ExperimentConfig, Run, register_experiment
from . import _controls as _controls, _problems, _transition

__all__: list[str] = []


@dataclasses.dataclass(frozen=True, kw_only=True)
class LLCConfig(ExperimentConfig):
    """Calibration of the LLC estimator.

    Attributes:
        n: the sample size in n beta (beta = 1 / ln n); the noiseless problems use it as the
            inverse temperature's scale, the data only fix L_n's shape.
        regression_d, regression_samples: linear regression's parameters and samples.
        heads, L, V, P: the copy-head networks (one per head) and their task size.
        rrr: reduced-rank regressions (M, N, H, r), each at its most singular and at a generic
            true point; empty skips them.
        num_chains, num_draws, num_burnin: chains per estimate and their length.
        step_size, localization: SGLD's eps (BlackJAX convention) and gamma.
        transition: the copy-head networks (head, L, V) whose transition is predicted from
            the LLC (docs/llc.md, "Copy-head transition"); empty records it as not run.
        transition_points: P values per network, log-spaced over [0.8 P*, 1.3 P*] around the
            reduced action's P* and rounded (the phases coexist as posterior modes only in a
            narrow window at finite data).
        transition_chains, transition_draws, transition_burnin, transition_step_size: the LLC
            estimates at the posterior modes (localisation ``localization``).
    """

    n: float = 1e4
    regression_d: int = 4
    regression_samples: int = 500
    heads: tuple[str, ...] = ("linear", "softmax")
    L: int = 3
    V: int = 3
    P: int = 20
    rrr: tuple[tuple[int, int, int, int], ...] = ((3, 3, 3, 1), (4, 2, 3, 1))
    num_chains: int = 32
    num_draws: int = 6000
    num_burnin: int = 3000
    step_size: float = 4e-5
    localization: float = 1.0
    transition: tuple[tuple[str, int, int], ...] = (
        ("softmax", 24, 4),
        ("softmax", 32, 4),
        ("softmax", 32, 8),
    )
    transition_points: int = 8
    transition_chains: int = 8
    transition_draws: int = 600
    transition_burnin: int = 300
    transition_step_size: float = 1e-3

    def validate(self) -> None:
        for name in ("regression_d", "regression_samples", "L", "V", "P", "num_draws"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_chains < 2:
            raise ValueError(f"num_chains must be >= 2, got {self.num_chains}")
        if not self.n > 1:
            raise ValueError(f"n must be > 1, got {self.n}")
        if not (self.step_size > 0 and self.localization >= 0):
            raise ValueError("step_size must be > 0 and localization >= 0")
        for h in self.heads:
            if h not in ("linear", "softmax"):
                raise ValueError(f"heads must be 'linear' or 'softmax', got {h!r}")
        for head, L, V in self.transition:
            if head not in ("linear", "softmax") or L < 2 or V < 2:
                raise ValueError(
                    f"transition entries are (head, L >= 2, V >= 2), got {(head, L, V)}"
                )
        if self.transition_points < 2 or self.transition_chains < 2:
            raise ValueError("transition_points and transition_chains must be >= 2")
        for t in self.rrr:
            if len(t) != 4 or min(t[:3]) < 1 or not 0 <= t[3] <= min(t[:3]):
                raise ValueError(f"rrr entries are (M, N, H, r) with 0 <= r <= min(M, N, H): {t}")

    @classmethod
    def quick(cls) -> dict:
        return {
            "heads": ("softmax",),
            "rrr": (),
            "transition": (),
            "num_chains": 16,
            "num_draws": 1500,
            "num_burnin": 500,
        }


def _judge(run: Run, name: str, problem, est, *, bias: float, basis: str) -> None:
    run.evidence(
        name,
        claims.learning_coefficient(
            name,
            prediction=problem.exact,
            alternatives=problem.alternatives,
            value=float(est.llc),
            stderr=float(est.stderr),
            num_chains=est.num_chains,
            bias=bias,
            basis=basis,
        ),
    )
    base, _, index = name.partition("[")
    label = base + ("_" + index.rstrip("]") if index else "")
    run.scalar(f"{label}_llc", float(est.llc))
    run.scalar(f"{label}_stderr", float(est.stderr))
    run.scalar(f"{label}_pull_fraction", float(est.pull_fraction))
    run.consistency(f"{label}_chains_finite", expected=0, measured=int(est.diverged))


def _estimate(config: LLCConfig, problem, key):
    return estimate_llc(
        problem.loss_fn,
        problem.w_star,
        problem.data,
        key=key,
        n=config.n,
        num_chains=config.num_chains,
        num_draws=config.num_draws,
        num_burnin=config.num_burnin,
        step_size=config.step_size,
        localization=config.localization,
    )


def _copy_head_transition(config: LLCConfig, run: Run, key) -> None:
    """The copy head's transition predicted from the LLC against the reduced action's P*."""
    if not config.transition:
        run.not_run(
            "free_energy_transition",
            "the phase with the lower n L_n + lambda ln n wins: its P* is the exact P*",
            needs={"transition": LLCConfig.transition},
            why="two posterior modes, their Laplace determinants and two LLC estimates per P",
        )
        return
    for k, (head, L, V) in enumerate(config.transition):
        tag = f"{head}_L{L}_V{V}"
        P_exact, order = _transition.exact_transition(head, L, V, 1.0, 1e3)
        run.scalar(f"transition_{tag}_P_exact", P_exact)
        if not np.isfinite(P_exact):
            run.evidence(
                f"free_energy_transition[{tag}]",
                claims.free_energy_transition(
                    f"free_energy_transition[{tag}]",
                    predicted=np.nan,
                    exact=np.nan,
                    alternatives=(np.nan,),
                    correction=0.0,
                    stderr=np.nan,
                ),
            )
            continue
        Ps = np.unique(
            np.round(np.geomspace(0.8 * P_exact, 1.3 * P_exact, config.transition_points)).astype(
                int
            )
        )
        posterior = _transition.posterior(head)
        points = _transition.measure(
            posterior,
            L,
            V,
            Ps,
            key=jax.random.fold_in(key, k),
            P_max=int(Ps[-1]),
            start_gap=2 * math.log(L) if head == "softmax" else float(L),
            num_chains=config.transition_chains,
            num_draws=config.transition_draws,
            num_burnin=config.transition_burnin,
            step_size=config.transition_step_size,
            localization=config.localization,
        )
        pred = _transition.predicted_transitions(points)
        lam = np.array([p.llc for p in points])
        swapped = _transition.predicted_transitions(points, llc=lam[:, ::-1])
        correction = abs(pred["ln_P_laplace"] - pred["ln_P_llc"])
        run.evidence(
            f"free_energy_transition[{tag}]",
            claims.free_energy_transition(
                f"free_energy_transition[{tag}]",
                predicted=pred["ln_P_llc"],
                exact=math.log(P_exact),
                alternatives=(pred["ln_P_loss"], swapped["ln_P_llc"]),
                correction=correction if np.isfinite(correction) else math.inf,
                stderr=pred["stat_stderr"],
                basis=(
                    "finite-n correction: the Laplace free energy of the exact G-marginal "
                    "(O(1) terms kept) crossing minus the LLC crossing; alternatives: the loss "
                    f"alone, the LLC terms swapped; exact: reduced action ({order} order)"
                ),
            ),
        )
        for name in ("ln_P_llc", "ln_P_loss", "ln_P_laplace", "stat_stderr"):
            run.scalar(f"transition_{tag}_{name}", float(pred[name]))
        fields = ("energy", "llc", "llc_stderr", "laplace", "copy_weight")
        run.save_arrays(
            dims={f"transition_{tag}_{v}": (f"P_{tag}", "phase") for v in fields},
            coords={f"P_{tag}": Ps, "phase": np.array(["pool", "copy"])},
            **{f"transition_{tag}_{v}": np.array([getattr(p, v) for p in points]) for v in fields},
        )


@register_experiment(
    "copy-head-llc",
    LLCConfig,
    "LLC estimator vs exact learning coefficients (regression, RRR, copy-head symmetries) and "
    "the copy head's transition predicted from the LLC",
    paper=True,
    title="Learning coefficients against exact answers",
    docs="llc.md#calibration",
)
def run_llc(config: LLCConfig, run: Run) -> None:
    """copy-head-llc: calibrate the LLC estimator against exact learning coefficients."""
    keys = jax.random.split(jax.random.key(config.seed), 8)
    beta = 1.0 / math.log(config.n)
    quad = "quadratic-expansion bias at this eps and gamma (jaxdyn.llc.quadratic_llc)"

    # (a) a regular model: least squares with d parameters, lambda = d / 2.
    lr = _problems.linear_regression(keys[0], config.regression_d, config.regression_samples)
    est = estimate_llc(
        lr.loss_fn,
        lr.w_star,
        lr.data,
        key=keys[1],
        num_chains=config.num_chains,
        num_draws=config.num_draws,
        num_burnin=config.num_burnin,
        step_size=config.step_size * 10,
        localization=config.localization,
    )
    bias = _problems.sampler_bias(
        lr, n=est.n, beta=est.beta, step_size=est.step_size, localization=est.localization
    )
    _judge(run, "regression_d_over_2", lr, est, bias=bias, basis=quad)
    run.evidence("regression_stationary", claims.stationary(est))
    run.save_arrays(
        dims={"regression_loss_trace": ("chain", "draw")},
        regression_loss_trace=np.asarray(est.loss_trace),
    )

    # (c) the copy-head network: its symmetries remove directions from d / 2.
    for i, head in enumerate(config.heads):
        pr = _problems.copy_head_network(keys[2 + i], head, config.L, config.V, config.P)
        run.consistency(
            f"copy_head_hessian_flat_directions_{head}",
            expected=pr.removed,
            measured=_problems.flat_directions(pr.hessian),
            basis="Hessian eigenvalues below 1e-8 of the largest count the symmetry's directions",
        )
        est = _estimate(config, pr, keys[4 + i])
        bias = _problems.sampler_bias(
            pr,
            n=config.n,
            beta=beta,
            step_size=config.step_size,
            localization=config.localization,
        )
        _judge(run, f"copy_head_symmetries[{head}]", pr, est, bias=bias, basis=quad)

    # (b) reduced-rank regression: Aoyagi's lambda at the most singular true point, against the
    # regular count; at a generic true point the codimension of the true set, against Aoyagi.
    step_basis = "step size's effect: estimate at eps minus eps / 2, plus two of its SE"
    for j, (M, N, H, r) in enumerate(config.rrr):
        for singular, check in ((True, "rrr_aoyagi"), (False, "rrr_generic_point")):
            pr = _problems.reduced_rank(
                jax.random.fold_in(keys[6], j), M, N, H, r, 64, singular=singular
            )
            eff = step_size_effect(
                pr.loss_fn,
                pr.w_star,
                pr.data,
                key=jax.random.fold_in(keys[7], 2 * j + singular),
                n=config.n,
                num_chains=config.num_chains,
                num_draws=config.num_draws,
                num_burnin=2 * config.num_burnin,
                step_size=config.step_size / 2,
                localization=config.localization,
            )
            bias = abs(float(eff.bias)) + 2 * float(eff.bias_stderr)
            name = f"{check}[M{M}_N{N}_H{H}_r{r}]"
            _judge(run, name, pr, eff.fine, bias=bias, basis=step_basis)
            run.scalar(f"{check}_M{M}_N{N}_H{H}_r{r}_coarse_llc", float(eff.coarse.llc))

    _copy_head_transition(config, run, jax.random.fold_in(keys[7], 10_000))
