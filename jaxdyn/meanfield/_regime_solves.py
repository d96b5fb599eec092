""":func:`jaxdyn.meanfield.gaussian_regime` against the solver on random softmax problems
(d = 2..6, the families of ``REGIME_FAMILIES``), and the seed notes' criterion "blow-up iff
V A + A^T V^T has a positive eigenvalue" on the same draws (``pde-blowup``'s general-V part).

All dimensions run in one sweep, padded to ``D = 6`` with an inert block (``V``, ``A`` zero
there, ``Sigma_0`` the identity; :func:`padded_regime_problems`): ``Sigma' = V Sigma A Sigma +
transpose`` leaves that block constant and the off-diagonal blocks zero, so the top-left block
is the d-dimensional flow. The arbiter is :func:`observed_regime` on each long solve.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxdyn._compat import enumeration_items
from jaxdyn._status import status_code

from ._problems import REGIME_FAMILIES
from ._regime import Regime, observed_regime
from ._simulate_gaussian import simulate_gaussian
from .fields import Softmax

REGIME_DIMS = (2, 3, 4, 5, 6)
PAD = max(REGIME_DIMS)
SAVES = 16  # saves at t1 k / 16; the arbiter reads k = 8 (t1 / 2) and k = 16 (t1)
RTOL, ATOL = 1e-8, 1e-10
MAX_STEPS = 40_000
REGIME_CODES = {name: status_code(item) for name, item in enumeration_items(Regime).items()}


def regime_member(p, key):
    """Sweep member: the padded problem ``p`` (``Q, K, V, Sigma0, t1``) solved to ``t1``."""
    sol = simulate_gaussian(
        Softmax(Q=p["Q"], K=p["K"], V=p["V"]),
        jnp.zeros(PAD, p["Sigma0"].dtype),
        p["Sigma0"],
        p["t1"],
        ts=p["t1"] * jnp.arange(1, SAVES + 1) / SAVES,
        rtol=RTOL,
        atol=ATOL,
        max_steps=MAX_STEPS,
        blowup_trace=1e8,
    )
    return {
        "covs": sol.covs,
        "trace": jnp.trace(sol.covs, axis1=-2, axis2=-1),
        "t_blowup": sol.t_blowup,
        "status": sol.status,
    }


def observed_regimes(Sigma0, covs, dims, blew_up, solved) -> np.ndarray:
    """The arbiter's regime code of every solve (``inconclusive`` where the solve failed), read
    on each draw's own ``d x d`` block at ``t1 / 2`` and ``t1``."""
    return np.array(
        [
            status_code(
                observed_regime(
                    bool(blew_up[m]),
                    Sigma0[m, :d, :d],
                    covs[m, SAVES // 2 - 1, :d, :d],
                    covs[m, SAVES - 1, :d, :d],
                    floor=100 * ATOL,
                )
            )
            if solved[m]
            else REGIME_CODES["inconclusive"]
            for m, d in enumerate(dims)
        ]
    )


def trace_ratios(meta, traces, mask) -> np.ndarray:
    """``tr Sigma(t) / trace_bound`` at every save of the draws ``mask`` (the padding block's
    ``PAD - d`` taken off the trace)."""
    traces = np.where(np.isfinite(traces), traces, 0.0)
    pad_trace = (PAD - meta["d"])[:, None]
    return (traces[mask] - pad_trace[mask]) / meta["trace_bound"][mask, None]


def regime_tables(meta, observed, t_blowup) -> tuple[list[dict], dict]:
    """The seed criterion's counterexamples (the first 12) and the regimes by family, criterion
    and solver side by side."""
    names = list(REGIME_CODES)
    by_code = {c: n for n, c in REGIME_CODES.items()}
    arbiter = observed != REGIME_CODES["inconclusive"]
    counter = arbiter & (meta["seed"] != (observed == REGIME_CODES["blowup"]))
    counterexamples = [
        {
            "d": int(meta["d"][m]),
            "family": REGIME_FAMILIES[meta["family"][m]],
            "seed_says_blowup": bool(meta["seed"][m]),
            "solver": by_code[int(observed[m])],
            "t_blowup": float(t_blowup[m]),
        }
        for m in np.flatnonzero(counter)[:12]
    ]
    by_family = {
        family: {
            side: {n: int(np.sum(codes[meta["family"] == f] == REGIME_CODES[n])) for n in names}
            for side, codes in (("criterion", meta["regime"]), ("solver", observed))
        }
        for f, family in enumerate(REGIME_FAMILIES)
    }
    return counterexamples, by_family
