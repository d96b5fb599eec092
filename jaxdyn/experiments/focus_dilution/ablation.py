"""``focus-dilution-ablation``: other transition matrices with the same stationary ``pi``."""

from __future__ import annotations

import jax
import numpy as np

from ... import gradflow as gf
from ...plotting import new_figure
from ...runs import Run
from ._common import keywords, record_analysis, to_host
from ._configs import AblationConfig


def run_ablation(config: AblationConfig, run: Run) -> None:
    """The population flow's rates and stages for several transition matrices sharing ``pi``:
    the paper's family at each of ``lams`` and ``n_random`` random reversible chains."""
    pi = np.asarray(config.pi, float)
    chains = {f"paper lam={lam:g}": gf.MarkovChain.paper(pi, lam) for lam in config.lams}
    keys = jax.random.split(jax.random.key(config.seed + 1000), max(config.n_random, 1))
    for i in range(config.n_random):
        chains[f"reversible #{i}"] = gf.MarkovChain.reversible(
            pi, keys[i], laziness=config.laziness
        )
    fig, axes = new_figure(1, 3)
    signs, kwargs = {}, keywords(config, gf.analyse_flow)
    for name, mc in chains.items():
        a = to_host(gf.analyse_flow(mc, key=jax.random.key(config.seed), **kwargs))
        signs[name] = record_analysis(run, a, config, name)["c"]
        t = a.ts[a.ts > 0]
        for ax, metric in zip(
            axes[0], ("loss", "frequent_weight", "entropy_low_queries"), strict=True
        ):
            ax.plot(t, a.metrics[metric][a.ts > 0], label=f"{name} (c={signs[name]:.3f})")
    run.scalar("focus_rates", signs)
    titles = ("loss", "attention on the most frequent token", "low-query attention entropy")
    for ax, title in zip(axes[0], titles, strict=True):
        ax.set(xscale="log", title=title, xlabel="t")
    axes[0, 0].axhline(float(-np.sum(pi * np.log(pi))), color="0.3", ls=":", lw=0.8)
    axes[0, 0].legend(fontsize=7)
    run.save_figure(fig, "ablation")
    matrices = np.stack([np.asarray(mc.P) for mc in chains.values()])
    tokens = np.arange(matrices.shape[1])
    run.save_arrays(
        transition_matrices=matrices,
        dims={"transition_matrices": ("chain", "query", "key")},
        coords={"chain": list(chains), "query": tokens, "key": tokens},
    )
