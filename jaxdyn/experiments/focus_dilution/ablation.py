"""``focus-dilution-ablation``: other transition matrices with the same stationary ``pi``."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ... import gradflow as gf
from ...plotting import new_figure
from ...runs import ConfigError, ExperimentConfig, Run, register_experiment
from ._common import HEADLINE_PI, chain, check_lam, record_analysis, to_host


@dataclasses.dataclass(frozen=True, kw_only=True)
class AblationConfig(ExperimentConfig):
    """Population flows for several ``P`` with one stationary ``pi``: the paper's family at each
    of ``lams`` and ``n_random`` random reversible (Metropolis-Hastings) chains.

    Attributes:
        pi: the shared stationary distribution.
        lams: values of the paper's family ``P = lam I + (1 - lam) 1 pi^T``.
        n_random: random reversible chains (seeded by ``seed``).
        laziness: holding mass of the random chains.
        m: embedding width.
        m_attn: attention width m'.
        eps: initialisation scale.
        num_saves: log-spaced save times (the end time is each chain's default). The
            headline's 2000: with the same widths, tolerances and save count, every compiled
            program of the analysis is the headline's, so a job that runs both compiles them
            once (the persistent compilation cache).
        rtol: relative tolerance of the adaptive solver.
        atol: absolute tolerance of the adaptive solver.
    """

    pi: tuple[float, ...] = HEADLINE_PI
    lams: tuple[float, ...] = (0.2, 0.5, 0.8)
    n_random: int = 3
    laziness: float = 0.2
    m: int = 6
    m_attn: int = 6
    eps: float = 1e-3
    num_saves: int = 2000
    rtol: float = 1e-7
    atol: float = 1e-10

    def validate(self) -> None:
        chain(self.pi, 0.5)
        for lam in self.lams:
            check_lam(lam)
        if self.n_random < 0 or len(self.lams) + self.n_random < 1:
            raise ConfigError("need n_random >= 0 and at least one chain (lams or n_random)")
        if not 0 <= self.laziness < 1:
            raise ConfigError(f"laziness must be in [0, 1), got {self.laziness}")
        if not 0 < self.eps < 0.1:
            raise ConfigError(f"eps must be in (0, 0.1), got {self.eps}")
        if self.m < 2 or self.m_attn < 1 or self.num_saves < 50:
            raise ConfigError(
                f"need m >= 2, m_attn >= 1, num_saves >= 50; "
                f"got {self.m}, {self.m_attn}, {self.num_saves}"
            )

    @classmethod
    def quick(cls) -> dict:
        return {"lams": (0.5,), "n_random": 2}


@register_experiment(
    "focus-dilution-ablation",
    AblationConfig,
    "focus and dilution for other transition matrices with the same pi (the paper's ablation)",
    title="Ablation: other transition matrices with the same pi",
    docs="focus_dilution.md#ablation",
)
def run_ablation(config: AblationConfig, run: Run) -> None:
    """The population flow's rates and stages for several transition matrices sharing ``pi``."""
    pi = np.asarray(chain(config.pi, 0.5).pi)
    chains = {
        f"paper lam={lam:g}": gf.MarkovChain.paper(jnp.asarray(pi), lam)
        for lam in config.lams
    }
    keys = jax.random.split(jax.random.key(config.seed + 1000), max(config.n_random, 1))
    for i in range(config.n_random):
        chains[f"reversible #{i}"] = gf.MarkovChain.reversible(
            pi, keys[i], laziness=config.laziness
        )
    fig, axes = new_figure(1, 3)
    signs = {}
    for name, mc in chains.items():
        a = to_host(
            gf.analyse_flow(
                mc,
                key=jax.random.key(config.seed),
                m=config.m,
                m_attn=config.m_attn,
                eps=config.eps,
                num_saves=config.num_saves,
                rtol=config.rtol,
                atol=config.atol,
            )
        )
        rates = record_analysis(run, a, name, tolerances=(config.rtol, config.atol))
        signs[name] = rates["c"]
        keep = a.ts > 0
        label = f"{name} (c={rates['c']:.3f})"
        axes[0, 0].plot(a.ts[keep], a.metrics["loss"][keep], label=label)
        axes[0, 1].plot(a.ts[keep], a.metrics["frequent_weight"][keep], label=name)
        axes[0, 2].plot(a.ts[keep], a.metrics["entropy_low_queries"][keep], label=name)
    run.scalar("focus_rates", signs)
    titles = ("loss", "attention on the most frequent token", "low-query attention entropy")
    for ax, title in zip(axes[0], titles, strict=True):
        ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("t")
    axes[0, 0].axhline(float(-np.sum(pi * np.log(pi))), color="0.3", ls=":", lw=0.8)
    axes[0, 0].legend(fontsize=7)
    run.save_figure(fig, "ablation")
    run.save_arrays(transition_matrices=np.stack(list(chains.values())))
