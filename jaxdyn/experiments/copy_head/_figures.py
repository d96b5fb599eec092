"""Figures of the copy-head experiments."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ... import copyhead as ch
from ...copyhead._compare import theory_key
from ...plotting import heatmap, new_figure, note_excluded


def theory_figures(run, c, results, hyst) -> None:
    """copy-head-theory: the softmax reduced action, both heads' branches, grid refinement,
    exact-action hysteresis and softmax attention on both sides of P*."""
    sm, P_star = results["softmax"], results["softmax"].P_t
    fig, ax = new_figure(1, 3)
    deltas = jnp.linspace(-0.5, 1.5 * np.log(c.L), 400)
    for f in (0.8, 0.9, 1.0, 1.15, 1.35):
        S = np.asarray(jax.vmap(sm.model.action, in_axes=(0, None))(deltas[:, None], f * P_star))
        ax[0, 0].plot(deltas, S - S[0], label=f"P = {f * P_star:.1f}")
    ax[0, 0].set(xlabel="logit gap Delta", ylabel="S(Delta) - S(-0.5)")
    ax[0, 0].set_title(f"softmax reduced action, L={c.L}, V={c.V}", fontsize=9)
    ax[0, 0].legend(fontsize=7)
    refinement, hysteresis = new_figure(1, 2), new_figure(1, 2)
    for j, (name, keys) in enumerate((("softmax", ("a_G",)), ("linear", ("c_1", "c_G")))):
        res, a = results[name], ax[0, j + 1]
        d, r = res.diagram, res.refined
        for k, color in zip(keys, ("C0", "C3"), strict=False):
            a.semilogx(d.P, d.order_global[k], "-", color=color, label=f"{k} (global)")
            a.semilogx(d.P, d.order_up[k], "--", color=color, lw=0.8, label=f"{k} from uniform")
            a.semilogx(d.P, d.order_down[k], ":", color=color, lw=0.8, label=f"{k} from copy")
        if res.info["P_star"]:
            a.axvline(res.info["P_star"], color="0.5", ls="--")
        a.set_xlabel("P (sequences)")
        a.set_title(f"{r.order} (refinement exponent {r.fit.slope:.2f})", fontsize=9)
        a.legend(fontsize=6)
        a = refinement[1][0, j]
        a.loglog(r.spacing, r.largest_step, "o-")
        a.set(xlabel="P-grid spacing h (ln P)", ylabel="largest step of the order parameter")
        a.set_title(f"{name}: step ~ h^{r.fit.slope:.2f}", fontsize=9)
        h, a = hyst[name], hysteresis[1][0, j]
        vals = h["values"][:, :, 0, :]  # (P, start, seed)
        for s in range(vals.shape[-1]):
            a.semilogx(h["P"], vals[:, 0, s], "C0o", ms=3, label="from uniform" if s == 0 else None)
            label = "from copy" if s == 0 else None
            a.semilogx(h["P"], vals[:, 1, s], "C3s", ms=3, mfc="none", label=label)
        a.semilogx(d.P, d.order_up[keys[0]], "C0--", lw=0.8)
        a.semilogx(d.P, d.order_down[keys[0]], "C3:", lw=0.8)
        a.set_xlim(0.7 * h["P"].min(), 1.4 * h["P"].max())
        a.set_xlabel("P (sequences)")
        a.set_title(f"{name}: exact action from two starts", fontsize=9)
        a.legend(fontsize=7)
    run.save_figure(fig, "phase_diagram")
    run.save_figure(refinement[0], "grid_refinement")
    run.save_figure(hysteresis[0], "hysteresis_exact_action")

    fig, ax = new_figure(1, 2)
    for j, f in enumerate((0.8, 1.25)):
        x = ch.global_minimum(sm.model, jnp.asarray(f * P_star)).x
        A = ch.SoftmaxCopyHead().weights(sm.model.scores(x, c.L))
        title = f"softmax A at P = {f * P_star:.1f}"
        heatmap(ax[0, j], np.asarray(A), title=title, xlabel="key m", ylabel="query l")
    run.save_figure(fig, "attention_heatmaps")


def network_figures(run, name, result, a, keys, loss_key: str = "test_loss") -> None:
    """Order parameters ``keys`` and a loss (``loss_key``; chain means for samples) of the
    trained networks or chains against the theory ``a``'s global minimum (and its test loss,
    where ``a`` has one)."""
    d, P, keep = a.diagram, result.params["P"], result.ok()
    curves = {k: (d.P, d.order_global[theory_key(a.model, k)]) for k in keys}
    if hasattr(a, "loss"):
        curves["test_loss"] = (d.P, a.loss[0])
    fig, ax = new_figure(1, len(keys) + 1)
    for panel, key in zip(ax[0], (*keys, loss_key), strict=True):
        vals = result.outputs[key]
        vals = np.nanmean(vals, axis=1) if vals.ndim > 1 else vals
        panel.semilogx(P[keep], vals[keep], "o", ms=3, alpha=0.6, label=key)
        if key in curves:
            panel.semilogx(*curves[key], "k-", label="theory")
        panel.set(xlabel="P (sequences)", ylabel=key)
        panel.legend(fontsize=7)
        note_excluded(panel, result.n_failed(), len(P))
    run.save_figure(fig, f"{name}_order_parameters")


def posterior_figures(run, a, result) -> None:
    """copy-head-sgld: the chains' order parameters against the marginal theory, and
    histograms of the transition's order parameter from both starts (at the first P of the
    hysteresis scan and at the largest P)."""
    key = a.config.transition_key()
    network_figures(run, "sgld", result, a, a.config.keys(), loss_key="mode_" + key)
    P, start = result.params["P"], result.params["start"]
    shown = [*a.window_P[:1], float(np.unique(P)[-1])]
    fig, ax = new_figure(1, len(shown))
    for j, p in enumerate(shown):
        for b in (0.0, 1.0):
            samples = np.ravel(result.outputs[key][(P == p) & (start == b)])
            ax[0, j].hist(samples, bins=40, alpha=0.6, label=f"from {'copy' if b else 'uniform'}")
        ax[0, j].set_title(f"sgld: {key} at P = {p:g}", fontsize=8)
        ax[0, j].legend(fontsize=7)
    run.save_figure(fig, "sgld_posterior_histograms")
