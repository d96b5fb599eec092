"""``focus-dilution-lyapunov``: the rank-one critical points as the asymmetry ``delta`` grows
from 0 and the eigenvalues that decide the escape from them (focus_dilution.md, stage 4;
``gradflow._lyapunov.symmetry_breaking_branch`` and ``branch_checks``)."""

from __future__ import annotations

import jax
import numpy as np

from ...gradflow._lyapunov import branch_checks, symmetry_breaking_branch
from ...plotting import new_figure
from ...runs import Run
from . import _common as _common  # registers the negative controls
from ._configs import LyapunovConfig


def run_lyapunov(config: LyapunovConfig, run: Run) -> None:
    """Rank-one critical points tracked over delta, their tangential and transverse spectra."""
    deltas = np.r_[0.0, np.geomspace(config.delta_min, config.delta_max, config.n_deltas)]
    family, key = (config.pi_top, config.d, config.lam), jax.random.key(config.seed)
    b = symmetry_breaking_branch(*family, deltas, config.eps, config.t_stall, key)
    zero, degenerate, steps = branch_checks(run, deltas, b)
    tang, lam_t, sv = b.tangential, b.transverse[:, 0], b.grad_M_singular_values
    pos = deltas > 0
    x = deltas[pos]
    run.save_arrays(
        transverse=b.transverse,
        tangential=tang,
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
    fig, axes = new_figure(1, 2)
    ax = axes[0, 0]
    ax.loglog(x, lam_t[pos], "o-", label="lambda_T (top transverse)")
    ax.loglog(x, sv[pos, 1], "s-", label="sigma_2(dL/dM)")
    for i in np.nonzero(~zero)[0]:
        ax.loglog(
            x[:-1], steps[:, i], ".:", lw=0.8, color="#d95f02" if degenerate[i] else "#1b9e77"
        )
    for k, style in ((1, "k--"), (2, "k-."), (3, "k:")):
        ax.loglog(x, lam_t[pos][0] * (x / x[0]) ** k, style, lw=0.6, label=f"slope {k}")
    ax.set_xlabel("delta")
    ax.set_title(
        "transverse eigenvalues; tangential changes between deltas\n"
        "(green simple, orange degenerate at delta = 0)",
        fontsize=8,
    )
    ax.legend(fontsize=6)
    ax = axes[0, 1]
    ax.plot(deltas, tang, "o", ms=2, color="#1b9e77")
    ax.plot(deltas, b.transverse, "s", ms=2, color="#7570b3")
    ax.set_xlabel("delta")
    ax.set_title("spectrum of J at the rank-one critical point", fontsize=9)
    run.save_figure(fig, "lyapunov_schmidt")
