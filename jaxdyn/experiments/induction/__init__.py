"""induction-head: the copy head as the first layer of an induction head (induction.md).

A two-layer attention-only transformer trained with Adam on in-context Markov chains, seeds as
one sweep; the held-out loss against the Bayes in-context unigram and bigram predictors'
losses, layer 1's previous-token score, layer 2's induction score, and the local learning
coefficient (:func:`jaxdyn.llc.estimate_llc`) at checkpoints of one seed.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import numpy as np
import optax

from ... import induction as ind
from ...induction import _llc
from ...induction._task import predictor_losses
from ...runs import ConfigError, ExperimentConfig, Run, negative_control, register_experiment
from ...sweep import Grid
from . import _figures

__all__: list[str] = []

NAME = "induction-head"


@dataclasses.dataclass(frozen=True, kw_only=True)
class InductionConfig(ExperimentConfig):
    """In-context Markov chains (k states, length T, Dirichlet(alpha) rows) and the network.

    Attributes:
        states, length, concentration: the task (k, T, alpha).
        width, layers: the attention-only transformer (d_model = d_head = width).
        steps, batch_size, learning_rate: Adam (optax.adam) on fresh batches.
        checkpoints: log-spaced checkpoints (0 included) where the held-out set is scored.
        seeds: independently trained networks (>= 2: the induction score's SE is across seeds).
        held_out: held-out sequences scored at each checkpoint (sets the loss's error band).
        predictor_sequences: Monte-Carlo sequences for the predictors' expected losses.
        confidence: of every band and interval.
        llc_checkpoints: how many checkpoints (of seed 0) get a learning-coefficient estimate.
        llc_sequences, llc_chains, llc_draws, llc_burnin, llc_step_size, llc_localization,
            llc_batch_size: :func:`jaxdyn.llc.estimate_llc` on ``llc_sequences`` fresh
            sequences (n counts sequences), the same chains' noise at every checkpoint
            (common random numbers: the trend's error is the spread across chains).
    """

    states: int = 3
    length: int = 32
    concentration: float = 1.0
    width: int = 32
    layers: int = 2
    steps: int = 4000
    batch_size: int = 64
    learning_rate: float = 0.01
    checkpoints: int = 30
    seeds: int = 4
    held_out: int = 1024
    predictor_sequences: int = 16384
    confidence: float = 0.99
    llc_checkpoints: int = 16
    llc_sequences: int = 1024
    llc_chains: int = 32
    llc_draws: int = 100
    llc_burnin: int = 50
    llc_step_size: float = 1e-4
    llc_localization: float = 100.0
    llc_batch_size: int = 16

    def validate(self) -> None:
        for ok, message in (
            (self.states >= 2 and self.length >= 4, "need states >= 2 and length >= 4"),
            (self.concentration > 0, "concentration must be > 0"),
            (min(self.width, self.layers) >= 1, "width and layers must be >= 1"),
            (self.seeds >= 2, "seeds must be >= 2 (standard errors across seeds)"),
            (self.steps >= self.checkpoints >= 6, "need steps >= checkpoints >= 6"),
            (min(self.held_out, self.predictor_sequences) >= 2, "need >= 2 sequences"),
            (0 < self.confidence < 1, "confidence must be in (0, 1)"),
            (self.llc_checkpoints >= 0, "llc_checkpoints must be >= 0"),
            (self.llc_chains >= 2, "llc_chains must be >= 2 (the trend's error is across chains)"),
            (self.learning_rate > 0 and self.llc_step_size > 0, "step sizes must be > 0"),
        ):
            if not ok:
                raise ConfigError(message)

    @classmethod
    def quick(cls) -> dict:
        return {
            "width": 16,
            "steps": 800,
            "learning_rate": 0.03,
            "checkpoints": 22,
            "seeds": 3,
            "x64": False,
            "held_out": 512,
            "predictor_sequences": 8192,
            "llc_checkpoints": 7,
            "llc_sequences": 256,
            "llc_chains": 40,
            "llc_draws": 40,
            "llc_burnin": 20,
            "llc_batch_size": 4,
        }

    def model(self, key) -> ind.AttentionOnlyTransformer:
        return ind.AttentionOnlyTransformer(
            key=key, states=self.states, length=self.length, width=self.width, layers=self.layers
        )


@register_experiment(
    NAME,
    InductionConfig,
    "two-layer attention-only transformer on in-context Markov chains: stages, heads, LLC",
    title="Induction heads on in-context Markov chains",
    docs="induction.md#experiment",
    paper=True,
)
def run_induction(c: InductionConfig, run: Run) -> None:
    """Train the seeds (one sweep), decide the stage claims, estimate the LLC along training."""
    task = ind.InContextMarkov(states=c.states, length=c.length, concentration=c.concentration)
    k_held, k_uni, k_bi, k_llc = jax.random.split(jax.random.key(c.seed + 10_000), 4)
    held = task.sample(k_held, c.held_out)
    steps = ind.checkpoint_steps(c.steps, c.checkpoints)

    def member(params, key):
        k_model, k_train = jax.random.split(key)
        _, traj = ind.train(
            c.model(k_model),
            task,
            optax.adam(params["learning_rate"]),
            key=k_train,
            checkpoints=steps,
            batch_size=c.batch_size,
            held_out=held,
        )
        out = {k: getattr(traj, k) for k in ("sequence_loss", "previous_token", "induction")}
        return out | {
            "induction_baseline": traj.induction_baseline,
            "weights": jax.vmap(_llc.flat_weights)(traj.models),
        }

    result = run.sweep(
        "train",
        member,
        Grid.product({"learning_rate": [c.learning_rate]}, seeds=c.seeds, base_seed=c.seed),
        dims={
            "sequence_loss": ("step", "sequence"),
            "previous_token": ("step", "layer"),
            "induction": ("step", "layer"),
            "weights": ("step", "weight"),
        },
        coords={"step": steps, "layer": np.array([f"layer {i + 1}" for i in range(c.layers)])},
    )
    ok = result.ok()
    run.consistency(
        "all_seeds_trained",
        expected=c.seeds,
        measured=int(ok.sum()),
        basis="every member of the training sweep finished with finite outputs",
    )
    seq_loss = result.outputs["sequence_loss"][ok]
    loss = seq_loss.mean(-1)
    loss_se = seq_loss.std(-1, ddof=1) / np.sqrt(seq_loss.shape[-1])
    prev, induction = result.outputs["previous_token"][ok], result.outputs["induction"][ok]
    baseline = float(result.outputs["induction_baseline"][0])

    # the Bayes predictors, independently of the network: their expected losses on fresh
    # sequences, and their per-sequence losses on the held-out ones; the plateau band is the
    # standard error of the paired per-sequence difference (the held-out set's own sampling
    # variation cancels)
    predictors = {"unigram": (task.unigram, k_uni), "bigram": (task.bigram, k_bi)}
    level, paired_se, expected = {}, {}, {}
    for name, (predictor, key) in predictors.items():
        mc, mc_se = task.expected_loss(key, predictor, sequences=c.predictor_sequences)
        expected[name] = mc = float(mc)
        seq = np.asarray(predictor_losses(predictor, held))
        level[name] = float(seq.mean())
        paired_se[name] = (seq_loss - seq).std(-1, ddof=1) / np.sqrt(seq.size)
        run.scalar(f"{name}_loss", mc)
        run.report(
            f"{name}_loss_on_held_out",
            measured=level[name],
            prediction=mc,
            note=f"the Bayes {name} predictor on the held-out sequences (prediction: its expected"
            f" loss on fresh sequences, SE {float(mc_se):.2g}; held-out SE"
            f" {seq.std(ddof=1) / np.sqrt(seq.size):.2g})",
        )
    run.scalar("final_loss", float(loss[:, -1].mean()))
    lnk = float(np.log(c.states))
    alternatives = {"unigram": (lnk, level["bigram"]), "bigram": (level["unigram"],)}
    for name in predictors:
        run.evidence(
            f"{name}_plateau",
            ind.claims.loss_plateau(
                steps, loss, paired_se[name], level=level[name], level_se=0.0,
                alternatives=alternatives[name], name=f"the in-context {name} predictor",
                confidence=c.confidence,
            ),
        )  # fmt: skip
    run.evidence(
        "previous_token_head_first",
        ind.claims.previous_token_head_first(
            steps, prev[:, :, 0], loss, start_level=expected["unigram"]
        ),
    )
    if c.layers >= 2:
        run.evidence(
            "induction_head",
            ind.claims.induction_head(induction[:, -1, 1], baseline, confidence=c.confidence),
        )
    run.report("previous_token_final", measured=prev[:, -1, 0])
    run.report(
        "induction_final",
        measured=induction[:, -1, -1],
        prediction=baseline,
        note="prediction: the score of uniform causal attention",
    )

    # stage boundaries and the LLC along training (seed 0)
    bounds = ind.stage_boundaries(
        steps,
        loss[0],
        paired_se["unigram"][0],
        unigram=level["unigram"],
        unigram_se=0.0,
        confidence=c.confidence,
    )
    run.report(
        "stage_boundaries",
        measured=[np.nan if b is None else int(steps[b]) for b in bounds],
        note="steps where seed 0's loss leaves the unigram plateau and where it settles",
    )
    idx = _llc.llc_checkpoints(steps, c.llc_checkpoints, bounds) if c.llc_checkpoints else ()
    idx = np.asarray(idx, int)
    per_chain = _llc.llc_along_training(
        eqx.filter_jit(c.model)(jax.random.key(0)),  # one program, not one per eager op
        result.outputs["weights"][np.flatnonzero(ok)[0]][idx],
        task.sample(jax.random.split(k_llc)[0], c.llc_sequences),
        key=jax.random.split(k_llc)[1],
        num_chains=c.llc_chains,
        num_draws=c.llc_draws,
        num_burnin=c.llc_burnin,
        step_size=c.llc_step_size,
        localization=c.llc_localization,
        batch_size=c.llc_batch_size,
    )
    llc = per_chain.mean(1)
    llc_se = per_chain.std(1, ddof=1) / np.sqrt(c.llc_chains)
    if idx.size:
        run.log(f"LLC at steps {steps[idx].tolist()}: " + ", ".join(f"{v:.3g}" for v in llc))
    boundaries = [steps[b] for b in bounds if b is not None]
    run.evidence(
        "llc_trend_changes",
        ind.claims.llc_trend_changes(steps[idx], per_chain.T, boundaries, confidence=c.confidence),
    )
    run.save_arrays(
        loss=loss,
        loss_se=loss_se,
        llc=llc,
        llc_se=llc_se,
        llc_per_chain=per_chain,
        dims={
            "loss": ("seed", "step"),
            "loss_se": ("seed", "step"),
            "llc": ("llc_step",),
            "llc_se": ("llc_step",),
            "llc_per_chain": ("llc_step", "chain"),
        },
        coords={
            "seed": result.seeds[ok],
            "step": steps,
            "llc_step": steps[idx],
            "chain": np.arange(c.llc_chains),
        },
    )
    _figures.figures(
        run,
        steps,
        loss,
        prev,
        induction,
        baseline,
        levels={"ln k": lnk} | {k: (level[k], float(np.median(paired_se[k]))) for k in level},
        boundaries=boundaries,
        llc=(steps[idx], llc, llc_se) if idx.size else None,
        confidence=c.confidence,
    )


# Negative controls (tests/test_negative_controls.py): counterfactual curves on the checkpoints
# of a 1000-step run, x = ln(1 + step); each must not say ``holds``.
_STEPS = ind.checkpoint_steps(1000, 24).astype(float)
_X = np.log1p(_STEPS)


def _sigmoid(center, width):
    return 1 / (1 + np.exp(-(_X - center) / width))


@negative_control(NAME, "unigram_plateau")
def _no_unigram_stage():
    """A loss that falls from ln k to the bigram level in one step never pauses at unigram."""
    loss = np.stack([0.95 + (np.log(3) - 0.95) * _sigmoid(4.0, -0.3)] * 2)
    return ind.claims.loss_plateau(
        _STEPS, loss, np.full_like(loss, 0.004), level=1.04, level_se=0.002,
        alternatives=(np.log(3), 0.95),
    )  # fmt: skip


@negative_control(NAME, "bigram_plateau")
def _settles_above():
    """A loss that settles above the bigram loss (what a model unable to reach it shows)."""
    loss = np.stack([0.99 + 0.05 * _sigmoid(5.0, -0.15)] * 2)
    return ind.claims.loss_plateau(
        _STEPS, loss, np.full_like(loss, 0.004), level=0.95, level_se=0.002, alternatives=(1.04,)
    )


@negative_control(NAME, "previous_token_head_first")
def _head_after_the_fall():
    """The previous-token score rising a factor 4 in steps after the loss has fallen."""
    loss = 0.95 + 0.09 * _sigmoid(5.0, -0.15) + 0.06 * _sigmoid(2.0, -0.15)
    prev = 0.1 + 0.6 * _sigmoid(5.0 + np.log(4.0), 0.2)
    return ind.claims.previous_token_head_first(_STEPS, prev[None], loss[None], start_level=1.04)


@negative_control(NAME, "induction_head")
def _content_blind():
    """Scores at the uniform-attention baseline (a one-layer model cannot key on x_{s})."""
    return ind.claims.induction_head([0.38, 0.4, 0.39], 0.39)


@negative_control(NAME, "llc_trend_changes")
def _steady_llc():
    """An LLC with one steady trend in ln(step) (each chain its own offset and noise): no kink
    to find."""
    rng = np.random.default_rng(0)
    offset = 0.5 * rng.normal(size=(16, 1))
    llc = 3 + 0.5 * _X[1:] + offset + 0.05 * rng.normal(size=(16, _X.size - 1))
    return ind.claims.llc_trend_changes(_STEPS[1:], llc, _STEPS[[9, 16]])
