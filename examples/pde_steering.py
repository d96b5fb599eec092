"""Steer a Gaussian through a softmax layer stack (docs/transformer_pde.md, "Steering a
Gaussian"): weights per layer found by differentiating through the diffrax solve.

    python examples/pde_steering.py
"""

import jax
import numpy as np

from jaxdyn import Status
from jaxdyn.meanfield import SteerOutcome, steer_gaussian

jax.config.update("jax_enable_x64", True)


def main() -> None:
    rng = np.random.default_rng(0)
    d = 2
    G, H = rng.standard_normal((2, d, d))
    cov0, cov1 = G @ G.T / d + 0.2 * np.eye(d), H @ H.T / d + 0.2 * np.eye(d)
    mean0, mean1 = rng.standard_normal((2, d))
    key = jax.random.key(0)
    names = {Status.code(v): k for k, v in SteerOutcome._name_to_item.items()}
    same = steer_gaussian(mean0, cov0, mean1, cov1, key=key)
    print(f"same-rank target: {names[Status.code(same.outcome)]}, relative error {same.error:.2e}")
    u = rng.standard_normal(d)
    other = steer_gaussian(mean0, cov0, mean1, np.outer(u, u), key=key)
    lam = np.linalg.eigvalsh(np.asarray(other.cov))
    print(
        f"rank-one target: {names[Status.code(other.outcome)]}, relative error "
        f"{other.error:.2e}, eigenvalues reached {lam.round(4).tolist()} (the rank stays {d})"
    )


if __name__ == "__main__":
    main()
