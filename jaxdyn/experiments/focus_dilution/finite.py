"""``focus-dilution-finite``: finite-(N, s) training approaches the population flow along the
whole trajectory (focus_dilution.md, "Population loss").

Full-batch gradient descent with step ``lr`` on ``n`` sampled sequences of length ``s`` is
compared, record by record (``t = k lr``), with two references from the same initialisation:
gradient descent on the population loss with the same step (the flow discretised exactly as
the training is, so the difference is the finite-sample effect alone) and the flow itself. The
errors are the maxima over the trajectory of the loss difference and of the token-type
attention difference ``max_qk |w_qk - w*_qk|``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ... import fit_power_law, gradflow as gf
from ...plotting import band, new_figure
from ...runs import ConfigError, ExperimentConfig, Run, negative_control, register_experiment
from ...sweep import Grid
from ._common import HEADLINE_PI, chain, entropy_of


@dataclasses.dataclass(frozen=True, kw_only=True)
class FiniteConfig(ExperimentConfig):
    """Finite-(N, s) gradient descent (one sweep over sizes and seeds, one compiled program) and
    Adam at the largest size, against the population references.

    Attributes:
        pi: stationary distribution of the paper's family.
        lam: self-transition weight of the paper's family.
        m: embedding width.
        m_attn: attention width m'.
        eps: initialisation scale. Finite-sample gradient noise (of order ``(n s)^{-1/2}``)
            seeds the unstable attention mode at the saddle unless it is below the amplitude the
            initialisation leaves there (of order ``eps``), so the population limit needs
            ``n s >> eps^{-2}``; ``eps = 0.05`` makes it reachable at these sizes.
        sizes_n: sequence counts (increasing, at least 3, paired with ``sizes_s``).
        sizes_s: sequence lengths.
        n_seeds: seeds per size (data and initialisation).
        lr: gradient-descent step (flow time ``t = k lr``).
        num_steps: gradient-descent steps.
        record_every: steps between records.
        adam_lr: Adam's learning rate.
        adam_steps: Adam's steps (at the largest size).
        flow_reference: also compare with the flow itself (reported beside the evidence, which
            compares with gradient descent on the population loss); --quick leaves it out.
    """

    pi: tuple[float, ...] = HEADLINE_PI
    lam: float = 0.5
    m: int = 6
    m_attn: int = 6
    eps: float = 0.05
    sizes_n: tuple[int, ...] = (256, 1024, 4096, 16384)
    sizes_s: tuple[int, ...] = (16, 32, 64, 128)
    n_seeds: int = 4
    lr: float = 0.5
    num_steps: int = 400
    record_every: int = 10
    adam_lr: float = 0.01
    adam_steps: int = 1000
    flow_reference: bool = True

    def validate(self) -> None:
        chain(self.pi, self.lam)
        if not (0 < self.eps < 0.1 and self.lr > 0 and self.adam_lr > 0):
            raise ConfigError("need eps in (0, 0.1), lr > 0 and adam_lr > 0")
        if len(self.sizes_n) != len(self.sizes_s) or len(self.sizes_n) < 3:
            raise ConfigError(
                f"sizes_n and sizes_s must pair up (>= 3 sizes), got {self.sizes_n}, {self.sizes_s}"
            )
        if any(n < 1 for n in self.sizes_n) or any(s < 2 for s in self.sizes_s):
            raise ConfigError("sizes_n must be >= 1 and sizes_s >= 2")
        if self.num_steps % self.record_every or self.adam_steps % self.record_every:
            raise ConfigError("num_steps and adam_steps must be multiples of record_every")
        if self.n_seeds < 2:
            raise ConfigError(f"n_seeds must be >= 2 (a spread over seeds), got {self.n_seeds}")

    @classmethod
    def quick(cls) -> dict:
        return {
            "sizes_n": (64, 256, 1024),
            "sizes_s": (8, 16, 32),
            "n_seeds": 3,
            "adam_steps": 400,
            "flow_reference": False,
        }


def _prefix_batch(sequences, n, s, d: int):
    """The :class:`gradflow.Batch` of the first ``n`` sequences cut to their first ``s + 1``
    tokens (``n``, ``s`` traced; the arrays keep the padded shape), and ``n_max / n``, the
    factor that turns the padded mean into the mean over the ``n`` sequences. A prefix of a
    chain sampled from ``x_1`` is a sample of the shorter length, so one padded draw serves
    every size."""
    n_max, s_max = sequences.shape[0], sequences.shape[1] - 1
    dtype = jnp.result_type(float)
    inputs = jax.nn.one_hot(sequences[:, :-1], d, dtype=dtype)
    inputs = inputs * (jnp.arange(s_max) < s)[None, :, None].astype(dtype)
    used = (jnp.arange(n_max) < n).astype(dtype)
    batch = gf.Batch(
        query=jax.nn.one_hot(sequences[:, s - 1], d, dtype=dtype).T,
        log_counts=jnp.log(jnp.sum(inputs, axis=1)).T,
        targets=(jax.nn.one_hot(sequences[:, s], d, dtype=dtype) * used[:, None]).T,
    )
    return batch, n_max / n


# the optimisers the sweeps compare, learning rate injected at run time (descend sets it)
_OPTIMIZERS = {
    "gd": optax.inject_hyperparams(optax.sgd)(learning_rate=0.0),
    "adam": optax.inject_hyperparams(optax.adam)(learning_rate=0.0),
}


def _member(config: FiniteConfig, mc: gf.MarkovChain, optimizer: str, num_steps: int):
    """GD (or Adam) on ``n`` sampled sequences of length ``s``, ``(n, s)`` a parameter: one
    compiled program for every size (sequences drawn at the largest size and cut, the data
    key folded with the size so that sizes draw independently)."""
    n_max, s_max = max(config.sizes_n), max(config.sizes_s)

    def member(params, key):
        k_data, k_init = jax.random.split(key)  # k_init: the references' initialisation
        k_data = jax.random.fold_in(k_data, params["size"])
        sequences = gf.sample_sequences(k_data, mc, n_max, s_max + 1)
        batch, scale = _prefix_batch(sequences, params["n"], params["s"], mc.d)
        model0 = gf.init_transformer(k_init, mc.d, config.m, config.m_attn, config.eps)
        tr = gf.descend(
            model0,
            lambda mm: scale * batch.loss(mm),
            mc,
            lr=params["lr"],
            num_steps=num_steps,
            record_every=config.record_every,
            optimizer=_OPTIMIZERS[optimizer],
        )
        return {
            "population_loss": tr.population_loss,
            "attention": tr.attention,
            "status": tr.status,
        }

    return member


def _references(
    config: FiniteConfig, mc: gf.MarkovChain, seeds: np.ndarray
) -> dict[str, np.ndarray]:
    """Per seed, from the seed's initialisation (the key split ``train_finite`` uses): gradient
    descent on the population loss (same step) and (``flow_reference``) the flow, at the
    record times."""
    ts = jnp.arange(config.num_steps // config.record_every + 1) * config.record_every * config.lr

    def one(seed):
        k_init = jax.random.split(jax.random.key(seed))[1]
        model0 = gf.init_transformer(k_init, mc.d, config.m, config.m_attn, config.eps)
        ref = gf.descend(
            model0,
            lambda mm: gf.population_loss(mm, mc),
            mc,
            lr=config.lr,
            num_steps=config.num_steps,
            record_every=config.record_every,
        )
        out = {"loss_descent": ref.population_loss, "attention_descent": ref.attention}
        if config.flow_reference:
            flow = gf.trajectory_metrics(gf.population_flow(model0, mc, ts).models, mc)
            out.update(loss_flow=flow["loss"], attention_flow=flow["attention"])
        return out

    return {k: np.asarray(v) for k, v in jax.jit(jax.vmap(one))(jnp.asarray(seeds)).items()}


@register_experiment(
    "focus-dilution-finite",
    FiniteConfig,
    "finite-(N, s) gradient descent and Adam approach the population flow along the trajectory",
    title="Finite samples against the population flow",
    docs="focus_dilution.md#finite-sizes",
)
def run_finite(config: FiniteConfig, run: Run) -> None:
    """Finite-(N, s) gradient descent and Adam against the population flow along the trajectory."""
    mc = chain(config.pi, config.lam)
    pi = mc.pi
    H = entropy_of(pi)
    ts = np.arange(config.num_steps // config.record_every + 1) * config.record_every * config.lr
    seeds = Grid.product({"lr": [config.lr]}, seeds=config.n_seeds, base_seed=config.seed).seeds
    refs = _references(config, mc, seeds)
    sizes = list(zip(config.sizes_n, config.sizes_s, strict=True))
    grid = Grid.zip(
        {
            "n": [n for n, _ in sizes],
            "s": [s for _, s in sizes],
            "size": list(range(len(sizes))),
            "lr": [config.lr] * len(sizes),
        },
        seeds=seeds,
    )
    res = run.sweep("gd", _member(config, mc, "gd", config.num_steps), grid)
    references = ("descent", "flow") if config.flow_reference else ("descent",)
    rows = []
    fig, axes = new_figure(1, 3)
    for i, (n, s) in enumerate(sizes):
        sel = np.asarray(res.params["size"]) == i
        ok = res.ok()[sel]
        loss = np.asarray(res.outputs["population_loss"])[sel]
        att = np.asarray(res.outputs["attention"])[sel]
        row = {"n": n, "s": s, "ok": int(ok.sum())}
        for ref in references:
            row[f"loss_error_{ref}"] = np.max(np.abs(loss - refs[f"loss_{ref}"]), axis=1)[ok]
            row[f"attention_error_{ref}"] = np.max(
                np.abs(att - refs[f"attention_{ref}"]), axis=(1, 2, 3)
            )[ok]
        rows.append(row)
        band(axes[0, 0], ts, loss, ok=ok, label=f"GD n={n}, s={s}")
    if config.flow_reference:
        axes[0, 0].plot(ts, refs["loss_flow"][0], "k--", lw=1, label="population flow")
    # the predicted error scale: the loss sits on one target per sequence (n^{-1/2}) and a
    # window of s keys estimates the key distribution with an O(1/s) bias of the softmax
    scale = np.concatenate(
        [np.full(r["ok"], max(r["n"] ** -0.5, 1.0 / r["s"]), float) for r in rows]
    )
    summary = {}
    for key in ("loss_error_descent", "attention_error_descent"):
        err = np.concatenate([r[key] for r in rows])
        summary[key] = fit_power_law(scale, err).as_dict()
        what = key.split("_")[0]
        run.evidence(
            f"finite_converges[{what}]",
            gf.claims.finite_converges(what, scale, err),
            note=f"max over the trajectory of |{what} difference| between GD on samples and GD "
            "on the population loss (same step, same initialisation), power law in "
            "h = max(n^-1/2, 1/s) over (size, seed) runs",
        )
    run.scalar("error_fits", summary)
    table = {
        f"n{r['n']}_s{r['s']}": {
            k: [float(np.mean(v)), float(np.std(v, ddof=1) / np.sqrt(len(v)))]
            for k, v in r.items()
            if k.endswith(("descent", "flow"))
        }
        for r in rows
    }
    run.scalar("max_errors_mean_and_se", table)
    for key, ax in (("loss_error", axes[0, 1]), ("attention_error", axes[0, 2])):
        for ref, style in zip(references, ("o-", "s--"), strict=False):
            means = [np.mean(r[f"{key}_{ref}"]) for r in rows]
            ax.loglog([r["n"] * r["s"] for r in rows], means, style, label=f"vs population {ref}")
        ax.set_xlabel("n s")
        ax.set_title(f"max over the trajectory: {key.replace('_', ' ')}", fontsize=9)
        ax.legend(fontsize=7)
    i = int(np.argmax(config.sizes_n))
    largest = {"n": [config.sizes_n[i]], "s": [config.sizes_s[i]], "size": [i]}
    grid = Grid.zip({**largest, "lr": [config.adam_lr]}, seeds=seeds)
    res = run.sweep("adam", _member(config, mc, "adam", config.adam_steps), grid)
    final = np.asarray(res.outputs["population_loss"])[res.ok()][:, -1]
    run.evidence(
        "adam_escapes_unigram_plateau",
        gf.claims.adam_escapes_unigram_plateau(final, H),
        note=f"final population loss of every Adam run ({final.tolist()}) vs H(pi)",
    )
    axes[0, 0].axhline(H, color="0.3", ls=":", lw=0.8)
    axes[0, 0].set_title("GD (t = k lr) vs population flow", fontsize=10)
    axes[0, 0].set_xlabel("t")
    axes[0, 0].legend(fontsize=7)
    run.save_figure(fig, "finite_vs_population")
    run.save_arrays(ts=ts)


@negative_control("focus-dilution-finite", "finite_converges")
def _error_that_does_not_shrink():
    rng = np.random.default_rng(1)
    scale = np.repeat([1 / 8, 1 / 16, 1 / 32], 3)
    return gf.claims.finite_converges("loss", scale, 0.02 * np.exp(0.1 * rng.normal(size=9)))


@negative_control("focus-dilution-finite", "adam_escapes_unigram_plateau")
def _adam_with_attention_frozen():
    # uniform attention cannot beat H(pi): the runs end on the plateau
    return gf.claims.adam_escapes_unigram_plateau([0.7271401, 0.7271405], 0.72714)
