"""``focus-dilution-delta``: escape from the rank-one stall against the asymmetry ``delta`` of
the low-frequency tokens and the initialisation scale ``eps`` (``gradflow._escape``)."""

from __future__ import annotations

import numpy as np

from ...gradflow._escape import escape_checks, escape_member, save_times
from ...plotting import new_figure, note_excluded
from ...runs import Run
from ...sweep import Grid
from ._common import keywords
from ._configs import DeltaConfig


def run_delta(config: DeltaConfig, run: Run) -> None:
    """The escape from the rank-one stall over a (delta, eps) grid, with its power-law fits."""
    ts = save_times(config.t1, config.num_saves)
    family = (config.pi_top, config.lam, config.direction_vector())
    member = escape_member(*family, ts, **keywords(config, escape_member))
    axes = {"delta": list(config.deltas), "eps": list(config.eps_values)}
    grid = Grid.product(axes, seeds=[config.seed])
    result = run.sweep("delta", member, grid, dims={"sigma_ratio": ("time",)}, coords={"time": ts})
    run.consistency(
        "delta_sweep_compiles_once",
        expected=1,
        measured=int(result.n_compilations),
        note="every member has the same shapes: one compilation",
    )
    ok = result.ok()
    out = {k: np.asarray(v) for k, v in result.outputs.items()}
    delta, eps = np.asarray(result.params["delta"]), np.asarray(result.params["eps"])
    escape = out["t_new_direction"] - out["t_dilution"]
    run.save_arrays(
        escape_time=escape.reshape(result.grid_shape),
        dims={"escape_time": result.axes},
        coords=axes | {"seed": [config.seed]},
    )
    escape_checks(run, ts, delta, eps, out, ok)
    fig, axs = new_figure(1, 2)
    ax, ax2 = axs[0]
    for e in config.eps_values:
        sel = ok & (eps == e) & (delta > 0) & np.isfinite(escape)
        ax.loglog(delta[sel], escape[sel], "o-", label=f"eps={e:g}")
        ax.loglog(delta[sel], np.log(1 / e) / out["lambda_T"][sel], "k:", lw=0.8)
    ax.set(xlabel="delta", ylabel="t_new - t_dil (dotted: log(1/eps) / lambda_T)")
    ax.legend(fontsize=7)
    note_excluded(ax, int(np.sum(~ok)), len(ok))
    for i in np.nonzero(ok & (eps == min(config.eps_values)))[0]:
        ax2.loglog(ts[1:], out["sigma_ratio"][i, 1:], label=f"delta={delta[i]:g}")
    ax2.axhline(config.new_direction_ratio, color="0.4", ls=":")
    ax2.set_title(f"sigma2(W0) / sigma1(W0), eps={min(config.eps_values):g}", fontsize=10)
    ax2.legend(fontsize=6)
    run.save_figure(fig, "delta_escape")
