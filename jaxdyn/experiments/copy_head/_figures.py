"""Figures of the copy-head experiments."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ... import copyhead as ch
from ...plotting import heatmap, new_figure, note_excluded


def theory_figures(run, c, results, hyst) -> None:
    """Order parameters and hysteresis branches of both heads against P (copy-head-theory)."""
    sm, lin = results["softmax"], results["linear"]
    fig, ax = new_figure(1, 3)
    P_star = sm["info"]["P_star"] or float(np.sqrt(np.prod(sm["window"])))
    deltas = jnp.linspace(-0.5, 1.5 * np.log(c.L), 400)
    for f in (0.8, 0.9, 1.0, 1.15, 1.35):
        S = np.asarray(jax.vmap(sm["model"].action, in_axes=(0, None))(deltas[:, None], f * P_star))
        ax[0, 0].plot(deltas, S - S[0], label=f"P = {f * P_star:.1f}")
    ax[0, 0].set_xlabel("logit gap Delta")
    ax[0, 0].set_ylabel("S(Delta) - S(-0.5)")
    ax[0, 0].set_title(f"softmax reduced action, L={c.L}, V={c.V}", fontsize=9)
    ax[0, 0].legend(fontsize=7)
    for a, res, keys in ((ax[0, 1], sm, ("a_G",)), (ax[0, 2], lin, ("c_1", "c_G"))):
        d = res["diagram"]
        for k, color in zip(keys, ("C0", "C3"), strict=False):
            a.semilogx(d.P, d.order_global[k], "-", color=color, label=f"{k} (global)")
            a.semilogx(d.P, d.order_up[k], "--", color=color, lw=0.8, label=f"{k} from uniform")
            a.semilogx(d.P, d.order_down[k], ":", color=color, lw=0.8, label=f"{k} from copy")
        if res["info"]["P_star"]:
            a.axvline(res["info"]["P_star"], color="0.5", ls="--")
        a.set_xlabel("P (sequences)")
        a.set_title(
            f"{res['refined'].order} (refinement exponent {res['refined'].fit.slope:.2f})",
            fontsize=9,
        )
        a.legend(fontsize=6)
    run.save_figure(fig, "phase_diagram")

    fig, ax = new_figure(1, 2)
    for j, res in enumerate((sm, lin)):
        r = res["refined"]
        ax[0, j].loglog(r.spacing, r.largest_step, "o-")
        ax[0, j].set_xlabel("P-grid spacing h (ln P)")
        ax[0, j].set_ylabel("largest step of the order parameter")
        ax[0, j].set_title(
            f"{'softmax' if j == 0 else 'linear'}: step ~ h^{r.fit.slope:.2f}", fontsize=9
        )
    run.save_figure(fig, "grid_refinement")

    fig, ax = new_figure(1, 2)
    for j, (name, res) in enumerate((("softmax", sm), ("linear", lin))):
        h = hyst[name]
        vals = h["values"][:, :, 0, :]  # (P, start, seed)
        for s in range(vals.shape[-1]):
            ax[0, j].semilogx(
                h["P"], vals[:, 0, s], "C0o", ms=3, label="from uniform" if s == 0 else None
            )
            ax[0, j].semilogx(
                h["P"],
                vals[:, 1, s],
                "C3s",
                ms=3,
                mfc="none",
                label="from copy" if s == 0 else None,
            )
        d = res["diagram"]
        key = "a_G" if name == "softmax" else "c_1"
        ax[0, j].semilogx(d.P, d.order_up[key], "C0--", lw=0.8)
        ax[0, j].semilogx(d.P, d.order_down[key], "C3:", lw=0.8)
        ax[0, j].set_xlim(0.7 * h["P"].min(), 1.4 * h["P"].max())
        ax[0, j].set_xlabel("P (sequences)")
        ax[0, j].set_title(f"{name}: exact action from two starts", fontsize=9)
        ax[0, j].legend(fontsize=7)
    run.save_figure(fig, "hysteresis_exact_action")

    fig, ax = new_figure(1, 2)
    for j, f in enumerate((0.8, 1.25)):
        x = ch.global_minimum(sm["model"], jnp.asarray(f * P_star)).x
        A = ch.SoftmaxCopyHead().weights(sm["model"].scores(x, c.L))
        heatmap(
            ax[0, j],
            np.asarray(A),
            title=f"softmax A at P = {f * P_star:.1f}",
            xlabel="key m",
            ylabel="query l",
        )
    run.save_figure(fig, "attention_heatmaps")


def network_figures(
    run, name, P, keep, result, keys, theory_curves, n_failed, loss_key: str = "test_loss"
) -> None:
    """Order parameters and a loss (``loss_key``) of trained networks / chains against
    theory curves; ``theory_curves`` maps a key to (P grid, values)."""
    fig, ax = new_figure(1, len(keys) + 1)
    for j, key in enumerate(keys):
        vals = result.outputs[key]
        if vals.ndim > 1:
            vals = np.nanmean(vals, axis=1)
        ax[0, j].semilogx(P[keep], vals[keep], "o", ms=3, alpha=0.6, label=name)
        if key in theory_curves:
            ax[0, j].semilogx(*theory_curves[key], "k-", label="theory")
        ax[0, j].set_xlabel("P (sequences)")
        ax[0, j].set_ylabel(key)
        ax[0, j].legend(fontsize=7)
        note_excluded(ax[0, j], n_failed, len(P))
    a = ax[0, -1]
    loss = result.outputs[loss_key]
    if loss.ndim > 1:
        loss = np.nanmean(loss, axis=1)
    a.semilogx(P[keep], loss[keep], "s", ms=3, label=loss_key)
    if loss_key in theory_curves:
        a.semilogx(*theory_curves[loss_key], "k-", label="theory")
    a.set_xlabel("P (sequences)")
    a.legend(fontsize=7)
    run.save_figure(fig, f"{name}_order_parameters")


def histograms(run, name, key, samples_by_P, title_extra="") -> None:
    """Histograms of posterior samples of ``key`` at a few P (both starts pooled)."""
    fig, ax = new_figure(1, max(len(samples_by_P), 1))
    for j, (p, by_start) in enumerate(samples_by_P.items()):
        for label, vals in by_start.items():
            ax[0, j].hist(np.ravel(vals), bins=40, alpha=0.6, label=label)
        ax[0, j].set_title(f"{name}: {key} at P = {p:g} {title_extra}", fontsize=8)
        ax[0, j].legend(fontsize=7)
    run.save_figure(fig, f"{name}_posterior_histograms")
