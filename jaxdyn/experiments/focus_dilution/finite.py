"""``focus-dilution-finite``: finite-(N, s) gradient descent and Adam against the population
references from the same initialisation (``gradflow._finite``; focus_dilution.md, "Population
loss"), record by record along the whole trajectory."""

from __future__ import annotations

import numpy as np

from ... import entropy, gradflow as gf
from ...gradflow._finite import (
    finite_checks,
    finite_member,
    population_references,
    trajectory_errors,
)
from ...plotting import band, new_figure
from ...runs import Run
from ...sweep import Grid
from ._common import keywords
from ._configs import FiniteConfig


def run_finite(config: FiniteConfig, run: Run) -> None:
    """Finite-(N, s) gradient descent and Adam against the population references."""
    mc = gf.MarkovChain.paper(np.asarray(config.pi, float), config.lam)
    H = float(entropy(mc.pi))
    ts = np.arange(config.num_steps // config.record_every + 1) * config.record_every * config.lr
    seeds = Grid.product({"lr": [config.lr]}, seeds=config.n_seeds, base_seed=config.seed).seeds
    settings = keywords(config, population_references)
    refs = population_references(mc, seeds, flow=config.flow_reference, **settings)
    sizes = list(zip(config.sizes_n, config.sizes_s, strict=True))
    n_max, s_max, tokens = max(config.sizes_n), max(config.sizes_s), np.arange(mc.d)

    def sweep(name, optimizer, num_steps, grid, clock, times):
        own = {"optimizer": optimizer, "num_steps": num_steps}
        member = finite_member(mc, n_max, s_max, **keywords(config, finite_member) | own)
        return run.sweep(
            name,
            member,
            grid,
            coords={clock: times, "query": tokens, "key": tokens},
            dims={"population_loss": (clock,), "attention": (clock, "query", "key")},
        )

    columns = {"n": list(config.sizes_n), "s": list(config.sizes_s)}
    columns |= {"size": list(range(len(sizes))), "lr": [config.lr] * len(sizes)}
    res = sweep("gd", "gd", config.num_steps, Grid.zip(columns, seeds=seeds), "time", ts)
    references = ("descent", "flow") if config.flow_reference else ("descent",)
    loss, att = res.outputs["population_loss"], res.outputs["attention"]
    rows = trajectory_errors(res.params["size"], res.ok(), loss, att, refs, sizes)
    finite_checks(run, rows)
    fig, axes = new_figure(1, 3)
    for i, (n, s) in enumerate(sizes):
        sel = np.asarray(res.params["size"]) == i
        band(axes[0, 0], ts, np.asarray(loss)[sel], ok=res.ok()[sel], label=f"GD n={n}, s={s}")
    if config.flow_reference:
        axes[0, 0].plot(ts, refs["loss_flow"][0], "k--", lw=1, label="population flow")
    for key, ax in (("loss_error", axes[0, 1]), ("attention_error", axes[0, 2])):
        for ref, style in zip(references, ("o-", "s--"), strict=False):
            means = [np.mean(r[f"{key}_{ref}"]) for r in rows]
            ax.loglog([r["n"] * r["s"] for r in rows], means, style, label=f"vs population {ref}")
        ax.set_xlabel("n s")
        ax.set_title(f"max over the trajectory: {key.replace('_', ' ')}", fontsize=9)
        ax.legend(fontsize=7)
    i = int(np.argmax(config.sizes_n))
    largest = {"n": [config.sizes_n[i]], "s": [config.sizes_s[i]], "size": [i]}
    # Adam's clock is its step count (its step is not lr times the gradient)
    adam_steps = np.arange(config.adam_steps // config.record_every + 1) * config.record_every
    grid = Grid.zip({**largest, "lr": [config.adam_lr]}, seeds=seeds)
    res = sweep("adam", "adam", config.adam_steps, grid, "step", adam_steps)
    final = np.asarray(res.outputs["population_loss"])[res.ok()][:, -1]
    run.evidence(
        "adam_escapes_unigram_plateau",
        gf.claims.adam_escapes_unigram_plateau(final, H),
        note=f"final population loss of every Adam run ({final.tolist()}) vs H(pi)",
    )
    axes[0, 0].axhline(H, color="0.3", ls=":", lw=0.8)
    axes[0, 0].set(title="GD (t = k lr) vs population flow", xlabel="t")
    axes[0, 0].legend(fontsize=7)
    run.save_figure(fig, "finite_vs_population")
    run.save_arrays(ts=ts)
