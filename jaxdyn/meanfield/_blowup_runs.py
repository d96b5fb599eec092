"""Softmax blow-up times against the closed form, and L2 on the same inputs (``pde-blowup``;
transformer_pde.md, "Closed forms to test against"): one sweep member for both, and the L2
growth measurement (the bounds are derived in ``_blowup``)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ._blowup import l2_growth_excess, l2_growth_rate
from ._simulate_gaussian import simulate_gaussian
from .fields import QuadraticKeySoftmax


def blowup_member(d: int, *, l2_horizon, rtol, atol, max_steps, blowup_trace):
    """Sweep member: params ``Q, K, Sigma0, t_star`` and ``variant`` (0 softmax, 1 L2), with
    ``V = I``. Softmax is solved to ``10 t*`` with tight tolerances (the blow-up time is the
    measurement), L2 to ``l2_horizon t*`` (only an overflow-level trace counts as its blow-up);
    33 saves up to ``0.999 t*`` (softmax) or the horizon (L2)."""

    def member(p, key):
        eye = jnp.eye(d, dtype=p["Sigma0"].dtype)
        softmax = p["variant"] == 0
        # Softmax and L2 as one field: one evaluation per step whichever the member's variant.
        field = QuadraticKeySoftmax.softmax_or_l2(p["Q"], p["K"], eye, p["variant"] == 1)
        horizon = jnp.where(softmax, 10.0, l2_horizon) * p["t_star"]
        ts = p["t_star"] * jnp.linspace(0.0, 1.0, 33) * jnp.where(softmax, 0.999, l2_horizon)
        sol = simulate_gaussian(
            field,
            jnp.zeros(d, eye.dtype),
            p["Sigma0"],
            horizon,
            ts=ts,
            rtol=jnp.where(softmax, rtol, 1e-6),
            atol=jnp.where(softmax, atol, 1e-9),
            max_steps=max_steps,
            blowup_trace=jnp.where(softmax, blowup_trace, 1e200),
        )
        eig = jnp.linalg.eigvalsh(sol.final_cov)
        return {
            "t_blowup": sol.t_blowup,
            "ts": sol.ts,
            "trace": jnp.trace(sol.covs, axis1=-2, axis2=-1),
            "final_trace": jnp.trace(sol.final_cov),
            "t_final": sol.t_final,
            "horizon": horizon,
            "rank_one_ratio": eig[-2] / eig[-1],
            "status": sol.status,
        }

    return member


def l2_growth_excesses(inputs, ts, traces, reached) -> np.ndarray:
    """:func:`l2_growth_excess` of the L2 runs (``V = I``) at every save; ``-inf`` for runs that
    did not reach their horizon."""
    eye = np.eye(inputs["Sigma0"].shape[-1])
    r = np.array([l2_growth_rate(A, K, eye) for A, K in zip(inputs["A"], inputs["K"], strict=True)])
    excess = l2_growth_excess(ts, traces, inputs["Sigma0"], r)
    return np.where(np.asarray(reached)[:, None], excess, -np.inf)
