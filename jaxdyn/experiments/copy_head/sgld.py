"""copy-head-sgld: the Bayesian posterior sampled by SGLD over (W, G) and MALA on G.

Checked against the reduced action with ``objective=ch.Objective.marginal`` (its saddle point
predicts the posterior's modes): SGLD against MALA (the same law), posterior modes against the
theory, hysteresis between starts and bimodality inside the theory's coexistence window (and
their absence elsewhere), precursor fluctuations below the transition against the Laplace
(Gaussian) variance at the mode, and the coverage of span{U, S}."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ... import copyhead as ch
from ...copyhead import _measure, _task, _train
from ...runs import Run, register_experiment
from ...sweep import Grid
from . import _posterior_checks as checks
from ._common import (
    SCORE_DIMS,
    NetworkConfig,
    for_each_setting,
    padded_statistics,
    require,
    require_positive,
    snug_sweep,
)
from ._mass_checks import check_mass
from ._posterior_modes import check_modes, mode_error
from ._precursors import check_precursors


@dataclasses.dataclass(frozen=True, kw_only=True)
class SGLDConfig(NetworkConfig):
    """SGLD (blackjax) over (W, G) and MALA on G alone, vmapped over P, seeds and two starts.

    Step sizes (blackjax convention, no 1/2): SGLD h = :func:`jaxdyn.copyhead.sgld_step_size`
    with ``step_scale``, G moving ``g_preconditioner`` times faster (a constant
    reparametrisation, exact); MALA starts at h_G = mala_step_scale (L^2)^{-1/3} /
    (1 + P L / (16 V T)) (the d^{-1/3} scaling of MALA in d = L^2 dimensions) and adapts it to
    acceptance 0.574 during burn-in.

    Attributes:
        window_points: P values scanned from P* to twice the uniform spinodal P_hi for
            hysteresis and bimodality (first-order theories only).
        precursor_fractions: P / P_t below the transition for the precursor chains (MALA
            from the uniform state).
        burn_in, num_samples, thin: chain lengths (each sampler).
        mode_steps: Adam steps on S(G) from each chain's final state to its mode.
        mass_check: SGLD's means against the Laplace prediction and the mass's phase
            boundary (L^2-dimensional Hessians: off at quick size).
    """

    L: int = 64
    V: int = 8
    P_values: tuple[float, ...] = (8.0, 12.0, 64.0, 128.0)
    window_points: int = 5
    precursor_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 0.9)
    step_scale: float = 0.2
    g_preconditioner: float = 16.0
    mala_step_scale: float = 0.4
    burn_in: int = 3000
    num_samples: int = 60
    thin: int = 20
    mode_steps: int = 1500
    mass_check: bool = True

    def validate(self) -> None:
        super().validate()
        require(
            len(self.precursor_fractions) >= 2 and all(0 < f < 1 for f in self.precursor_fractions),
            f"precursor_fractions needs >= 2 values in (0, 1), got {self.precursor_fractions}",
        )
        for name in ("burn_in", "num_samples", "thin", "mode_steps"):
            require(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        require(self.window_points >= 0, f"window_points must be >= 0, got {self.window_points}")
        require_positive(
            step_scale=self.step_scale,
            g_preconditioner=self.g_preconditioner,
            mala_step_scale=self.mala_step_scale,
        )

    @classmethod
    def quick(cls) -> dict:
        return {
            "P_values": (10.0, 128.0),
            "window_points": 3,
            "burn_in": 1000,
            "num_samples": 20,
            "thin": 10,
            "mode_steps": 600,
            "precursor_fractions": (0.25, 0.9),
            "mass_check": False,
        }

    def mala_step(self, P):
        return self.mala_step_scale / (
            float(self.L) ** (2.0 / 3.0) * (1.0 + P * self.L / (16.0 * self.V * self.temperature))
        )


def _chains(c: SGLDConfig, posterior, copy_G, P_max: int):
    """The member function: SGLD, MALA, the mode reached from the SGLD chain's end (from the
    MALA chain's end for a precursor member, ``params["precursor"] = 1``) and the mode of a
    bootstrap resample. Ladder and precursor members share one sweep, so one program is
    compiled (a precursor member's SGLD chain and bootstrap mode go unused).

    The chains and Adam's descent to the mode compute in ``c.loop_dtype`` (float32 by
    default: the O(L^2 V^2) gradient is memory bound, so single precision halves its cost;
    rounding of 1e-7 relative is far below the chains' standard errors over datasets, which
    are the checks' error model). Each mode's measurement and its Newton estimate of the
    remaining distance to the exact mode are in float64 on the float64 statistics, so the
    mode checks' bound covers the single-precision descent too."""
    lowered = c.lowered
    posterior_low = lowered(posterior)

    def member(params, key):
        k_data, k_sgld, k_mala = jax.random.split(key, 3)
        k_mala, k_init = jax.random.split(k_mala)
        P = params["P"]
        stats, (X, Y, w) = padded_statistics(k_data, c.L, c.V, P, P_max)
        stats_low = lowered(stats)
        G0 = lowered(params["start"] * copy_G)
        h = ch.sgld_step_size(posterior_low, stats_low, scale=c.step_scale)
        out = ch.sample_sgld(
            k_sgld,
            posterior_low,
            stats_low,
            burn_in=c.burn_in,
            num_samples=c.num_samples,
            thin=c.thin,
            step_size=h,
            G0=G0,
            g_preconditioner=c.g_preconditioner,
        )
        mala = ch.sample_mala(
            k_mala,
            posterior_low,
            stats_low,
            step_size=c.mala_step(P),
            burn_in=c.burn_in,
            num_samples=c.num_samples,
            thin=c.thin,
            G0=params["start"] * copy_G + 1e-2 * jax.random.normal(k_init, G0.shape),
        )
        out.update({f"mala_{k}": v for k, v in mala.items()})
        G_end = lowered(jnp.where(params["precursor"] > 0, mala["G_final"], out["G_final"]))
        # The mode from the chain's end, then the mode of one bootstrap resample of the same
        # data from that mode (the finite-P bias of the mode against the population theory):
        # the two steps of one scan, so the program holds one copy of the minimiser.
        k_resample = jax.random.fold_in(key, 1)
        boot = ch.copy_statistics(X, Y, _task.bootstrap_weights(k_resample, w))

        def mode_of(G_start, data):
            G = _train.minimise_action(
                posterior_low, lowered(data), G_start, steps=c.mode_steps, learning_rate=0.02
            )
            G64 = G.astype(stats.N.dtype)
            measured = _measure.measure(posterior, G64, None, data)
            return G, (G64, measured, mode_error(posterior, data, G64))

        data = jax.tree.map(lambda *a: jnp.stack(a), stats, boot)
        _, (modes, o, error) = jax.lax.scan(mode_of, G_end, data)
        out.update({f"mode_{k}": v[0] for k, v in o.items()})
        out.update({k: v[0] for k, v in error.items()})
        out["mode_G"] = modes[0]
        out.update({f"mode_bootstrap_{k}": o[k][1] for k in ("c_1", "c_G")})
        out.update({k.replace("mode_", "mode_bootstrap_", 1): v[1] for k, v in error.items()})
        return out

    return member


def run_sgld(c: SGLDConfig, run: Run) -> None:
    """The experiment for either head (copy-head-sgld and copy-head-sgld-linear) at its
    (L, V) and at each of its further ``settings``."""
    for_each_setting(c, run, _run_sgld)


def _run_sgld(c: SGLDConfig, run: Run) -> None:
    a = checks.PosteriorAnalysis.from_theory(c, c.reduced(c.attention, "marginal"), run)
    posterior = c.posterior(c.attention)
    copy_G = c.copy_scores(c.attention)
    P_max = int(np.ceil(max(a.P_grid.max(), a.precursor_P.max())))
    # The ladder (every P from both starts) and the precursor chains (from uniform) in one sweep.
    ladder_P = np.repeat(a.P_grid, 2)
    members = {
        "P": np.concatenate([ladder_P, a.precursor_P]),
        "start": np.concatenate([np.tile([0.0, 1.0], a.P_grid.size), 0.0 * a.precursor_P]),
        "precursor": np.concatenate([0.0 * ladder_P, 1.0 + 0.0 * a.precursor_P]),
    }
    grid = Grid.zip(members, seeds=c.seeds, base_seed=c.seed)
    # ArviZ's labels: a member's datasets are its chains, a chain's samples its draws.
    both = snug_sweep(
        run,
        "sgld",
        _chains(c, posterior, copy_G, P_max),
        grid,
        c,
        dims={"seed": "chain", **{k: SCORE_DIMS for k in ("G_final", "mala_G_final", "mode_G")}},
        coords={"draw": np.arange(c.num_samples)},
    )
    result = both.select(both.params["precursor"] == 0)
    precursors = both.select(both.params["precursor"] == 1)
    run.scalar("failed_members", result.n_failed() + precursors.n_failed())
    run.scalar("mala_acceptance", float(np.nanmean(result.outputs["mala_acceptance"])))
    checks.check_samplers(run, a, result)
    check_modes(run, a, result)
    checks.check_hysteresis_and_bimodality(run, a, result)
    check_precursors(run, a, precursors, posterior, P_max)
    checks.check_coverage(run, a, result, posterior)
    check_mass(run, a, result, posterior)
    checks.figures(run, a, result, precursors)


@register_experiment(
    "copy-head-sgld",
    SGLDConfig,
    "softmax posterior by SGLD and MALA: modes vs theory, hysteresis, bimodality, no precursor",
    title="The softmax posterior by SGLD and MALA",
    docs="copy_head.md#mean-versus-mode",
)
def run_sgld_softmax(config: SGLDConfig, run: Run) -> None:
    """copy-head-sgld: SGLD and MALA on the posterior of a softmax copy head."""
    run_sgld(config, run)
