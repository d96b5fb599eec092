"""Why the particle error near a blow-up stops falling like n^{-1/2} (docs/transformer_pde.md,
findings): three measurements on the construction of pde-meanfield's near-blow-up part
(softmax, V = I, d = 2, A + A^T positive definite, particles from N(0, Sigma_0), seed 0).

1. Time steps: the particle covariances at t/t* = 0.25 ... 0.95 with the experiment's 200 RK4
   steps and with 8 times as many (RMS relative change), beside the errors against the
   Gaussian ODE's closed form (total: from Sigma_0; dynamic: from the sample's own covariance).
2. The sample's own blow-up time: RMS of (t*(sample covariance) - t*) / t* by n.
3. The softmax weights' effective sample size 1 / sum_j w_ij^2 (mean over queries, over n).
4. The lag: per system, lambda_max(particles) / lambda_max(their own Gaussian) at each t/t*
   (signed: minus one), and the extreme-value bound on it, max_j |x_j(0)|^2 e^{2t} over the
   own Gaussian's (``jaxdyn.meanfield._blowup.near_blowup_lag``).

    python benchmarks/probe_near_blowup.py [--n 1024] [--systems 4] [--fine-steps 1600]

About 4 minutes on a 2-core Intel Xeon VM with the defaults (beside another run).
"""

from __future__ import annotations

import argparse

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from jaxdyn.meanfield import (  # noqa: E402  # noqa: E402
    RK4,
    blowup_time,
    empirical_mean_cov,
    simulate_particles,
    softmax_identity_covariance,
)
from jaxdyn.meanfield._blowup import near_blowup_lag  # noqa: E402
from jaxdyn.meanfield._meanfield_limit import (  # noqa: E402
    antithetic_gaussian_sample,
    near_blowup_problem,
)
from jaxdyn.meanfield.fields import Softmax  # noqa: E402

FRACTIONS = np.array([0.25, 0.5, 0.75, 0.9, 0.95])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--systems", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--fine-steps", type=int, default=1600)
    args = parser.parse_args()
    d = 2
    A, cov0 = near_blowup_problem(d, seed=0)
    t_star = float(blowup_time(cov0, A))
    ts = np.concatenate([[0.0], FRACTIONS * t_star])
    field = Softmax(Q=np.sqrt(d) * A, K=np.eye(d), V=np.eye(d))
    exact = jax.vmap(lambda t: softmax_identity_covariance(cov0, A, t))(ts[1:])

    def rel(c, ref):
        return jnp.linalg.norm(c - ref, ord=2) / jnp.linalg.norm(ref, ord=2)

    def ess(y):
        w = jax.nn.softmax(y @ A @ y.T, axis=1)
        return jnp.mean(1.0 / jnp.sum(w**2, axis=1)) / y.shape[0]

    def solve(key, steps):
        x = antithetic_gaussian_sample(key, jnp.zeros(d), cov0, args.n)
        sol = simulate_particles(
            field,
            x,
            ts[-1],
            dt0=ts[-1] / steps,
            solver=RK4(),
            stepsize_controller=diffrax.ConstantStepSize(),
            blowup_norm=None,
            ts=ts,
            save_fn=lambda t, y: (empirical_mean_cov(y)[1], ess(y)),
        )
        covs, eff = sol.xs
        own = jax.vmap(lambda t: softmax_identity_covariance(covs[0], A, t))(ts[1:])
        lag = near_blowup_lag(x, covs[1:], A, ts[1:])
        return covs[1:], jax.vmap(rel)(covs[1:], exact), jax.vmap(rel)(covs[1:], own), eff, lag

    keys = jax.random.split(jax.random.key(0), args.systems)
    print(f"t* = {t_star:.4f}; n = {args.n}, {args.systems} systems; t/t* = {FRACTIONS.tolist()}")
    out = {}
    for steps in (args.steps,) if args.fine_steps <= 0 else (args.steps, args.fine_steps):
        print(f"solving with {steps} RK4 steps ...", flush=True)
        out[steps] = jax.tree_util.tree_map(
            np.asarray, jax.jit(jax.vmap(lambda k, s=steps: solve(k, s)))(keys)
        )

    def rms(x):
        return np.sqrt(np.mean(np.asarray(x) ** 2, axis=0))

    covs, total, dynamic, eff, (lag, bound) = out[args.steps]
    print(f"lag - 1 per system (rows) at t/t* = {FRACTIONS.tolist()}:\n{(lag - 1).round(3)}")
    print(
        f"mean lag - 1: {np.nanmean(lag - 1, axis=0).round(3)}; systems below 1: "
        f"{np.sum(lag < 1, axis=0).tolist()} of {lag.shape[0]}"
    )
    print(f"extreme-value bound on the lag: {np.nanmean(bound, axis=0).round(3)}")
    print(f"every lag within its bound: {bool(np.all((lag <= bound) | np.isnan(lag)))}")
    if args.fine_steps <= 0:
        return
    change = jax.vmap(jax.vmap(rel))(jnp.asarray(covs), jnp.asarray(out[args.fine_steps][0]))
    print(f"RMS total error ({args.steps} steps):   {rms(total).round(4)}")
    print(f"RMS dynamic error ({args.steps} steps): {rms(dynamic).round(4)}")
    print(f"RMS relative change {args.steps} -> {args.fine_steps} steps: {rms(change)}")
    print(f"effective sample size / n at t/t* = 0, ...: {eff.mean(0).round(3)}")
    for n in (64, 256, 1024, 4096):
        shift = [
            float(
                blowup_time(
                    empirical_mean_cov(antithetic_gaussian_sample(k, jnp.zeros(d), cov0, n))[1], A
                )
            )
            / t_star
            - 1
            for k in jax.random.split(jax.random.key(0), 32)
        ]
        s = rms(shift)
        print(f"n = {n}: RMS (t*_sample - t*) / t* = {s:.4f} (x sqrt(n) = {s * np.sqrt(n):.2f})")


if __name__ == "__main__":
    main()
