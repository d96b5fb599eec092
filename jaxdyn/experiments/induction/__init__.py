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
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax

from ... import induction as ind
from ...evidence import ErrorModel, Evidence, Verdict
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
        seeds: independently initialised and trained networks (>= 2: the induction score's
            standard error is across seeds).
        held_out: held-out sequences scored at each checkpoint (sets the loss's error band).
        predictor_sequences: Monte-Carlo sequences for the predictors' expected losses.
        confidence: of every band and interval.
        llc_checkpoints: how many checkpoints (of seed 0) get a learning-coefficient estimate.
        llc_sequences, llc_chains, llc_draws, llc_burnin, llc_step_size, llc_localization,
            llc_batch_size: :func:`jaxdyn.llc.estimate_llc` on ``llc_sequences`` fresh
            sequences (n counts sequences).
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
    llc_chains: int = 4
    llc_draws: int = 200
    llc_burnin: int = 50
    llc_step_size: float = 1e-4
    llc_localization: float = 100.0
    llc_batch_size: int = 64

    def validate(self) -> None:
        def need(ok, msg):
            if not ok:
                raise ConfigError(msg)

        need(self.states >= 2, f"states must be >= 2, got {self.states}")
        need(self.length >= 4, f"length must be >= 4, got {self.length}")
        need(self.concentration > 0, f"concentration must be > 0, got {self.concentration}")
        need(self.width >= 1 and self.layers >= 1, "width and layers must be >= 1")
        need(
            self.seeds >= 2, f"seeds must be >= 2 (standard errors across seeds), got {self.seeds}"
        )
        need(self.checkpoints >= 6, f"checkpoints must be >= 6, got {self.checkpoints}")
        need(self.steps >= self.checkpoints, "steps must be >= checkpoints")
        need(self.held_out >= 2 and self.predictor_sequences >= 2, "need >= 2 sequences")
        need(0 < self.confidence < 1, f"confidence must be in (0, 1), got {self.confidence}")
        need(self.llc_checkpoints >= 0, "llc_checkpoints must be >= 0")
        need(self.learning_rate > 0 and self.llc_step_size > 0, "step sizes must be > 0")

    @classmethod
    def quick(cls) -> dict:
        return {
            "width": 16,
            "steps": 800,
            "learning_rate": 0.03,
            "checkpoints": 22,
            "seeds": 4,
            "x64": False,
            "held_out": 512,
            "predictor_sequences": 8192,
            "llc_checkpoints": 10,
            "llc_sequences": 256,
            "llc_chains": 3,
            "llc_draws": 80,
            "llc_burnin": 30,
            "llc_batch_size": 32,
        }

    @property
    def task(self) -> ind.InContextMarkov:
        return ind.InContextMarkov(
            states=self.states, length=self.length, concentration=self.concentration
        )

    def model(self, key) -> ind.AttentionOnlyTransformer:
        return ind.AttentionOnlyTransformer(
            key=key, states=self.states, length=self.length, width=self.width, layers=self.layers
        )


def _register(fn):
    return register_experiment(
        NAME,
        InductionConfig,
        "two-layer attention-only transformer on in-context Markov chains: stages, heads, LLC",
        title="Induction heads on in-context Markov chains",
        docs="induction.md#experiment",
        paper=True,
    )(fn)


@_register
def run_induction(c: InductionConfig, run: Run) -> None:
    """Train the seeds (one sweep), decide the stage claims, estimate the LLC along training."""
    task = c.task
    k_held, k_uni, k_bi, k_llc = jax.random.split(jax.random.key(c.seed + 10_000), 4)
    held = task.sample(k_held, c.held_out)
    steps = ind.checkpoint_steps(c.steps, c.checkpoints)
    _, unravel = jax.flatten_util.ravel_pytree(
        eqx.filter(c.model(jax.random.key(0)), eqx.is_inexact_array)
    )

    def member(params, key):
        k_model, k_train = jax.random.split(key)
        optimiser = optax.adam(params["learning_rate"])
        _, traj = ind.train(
            c.model(k_model),
            task,
            optimiser,
            key=k_train,
            checkpoints=steps,
            batch_size=c.batch_size,
            held_out=held,
        )
        flat = jax.vmap(
            lambda m: jax.flatten_util.ravel_pytree(eqx.filter(m, eqx.is_inexact_array))[0]
        )(traj.models)
        return {
            "sequence_loss": traj.sequence_loss,
            "previous_token": traj.previous_token,
            "induction": traj.induction,
            "induction_baseline": traj.induction_baseline,
            "weights": flat,
        }

    grid = Grid.product({"learning_rate": [c.learning_rate]}, seeds=c.seeds, base_seed=c.seed)
    layer_names = np.array([f"layer {i + 1}" for i in range(c.layers)])
    result = run.sweep(
        "train",
        member,
        grid,
        dims={
            "sequence_loss": ("step", "sequence"),
            "previous_token": ("step", "layer"),
            "induction": ("step", "layer"),
            "weights": ("step", "weight"),
        },
        coords={"step": steps, "layer": layer_names},
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
    prev = result.outputs["previous_token"][ok]
    induction = result.outputs["induction"][ok]
    baseline = float(result.outputs["induction_baseline"][0])

    # the Bayes predictors, independently of the network, on fresh sequences
    uni, uni_se = (
        float(v) for v in task.expected_loss(k_uni, task.unigram, sequences=c.predictor_sequences)
    )
    bi, bi_se = (
        float(v) for v in task.expected_loss(k_bi, task.bigram, sequences=c.predictor_sequences)
    )
    lnk = float(np.log(c.states))
    run.scalar("unigram_loss", uni)
    run.scalar("bigram_loss", bi)
    run.scalar("final_loss", float(loss[:, -1].mean()))
    # the networks and the predictors on the same held-out sequences: the plateau band is the
    # standard error of the paired per-sequence difference (the held-out set's own sampling
    # variation cancels); the fresh-sequence estimates above are the predictors' expected losses
    held_np = np.asarray(held)

    def held_out_losses(predictor):
        p = np.asarray(predictor(held))[:, :-1]
        return -np.log(np.take_along_axis(p, held_np[:, 1:, None], -1))[..., 0].mean(-1)

    uni_seq, bi_seq = held_out_losses(task.unigram), held_out_losses(task.bigram)
    for name, seq, mc, mc_se in (("unigram", uni_seq, uni, uni_se), ("bigram", bi_seq, bi, bi_se)):
        run.report(
            f"{name}_loss_on_held_out",
            measured=float(seq.mean()),
            prediction=mc,
            note=f"the Bayes {name} predictor on the held-out sequences (prediction: its expected"
            f" loss on fresh sequences, SE {mc_se:.2g}; held-out SE"
            f" {seq.std(ddof=1) / np.sqrt(seq.size):.2g})",
        )

    def paired_se(seq):
        return (seq_loss - seq).std(-1, ddof=1) / np.sqrt(seq.size)

    kw = dict(confidence=c.confidence)
    run.evidence(
        "unigram_plateau",
        ind.claims.loss_plateau(
            steps,
            loss,
            paired_se(uni_seq),
            level=float(uni_seq.mean()),
            level_se=0.0,
            alternatives=(lnk, float(bi_seq.mean())),
            name="the in-context unigram predictor",
            **kw,
        ),
    )
    run.evidence(
        "bigram_plateau",
        ind.claims.loss_plateau(
            steps,
            loss,
            paired_se(bi_seq),
            level=float(bi_seq.mean()),
            level_se=0.0,
            alternatives=(float(uni_seq.mean()),),
            name="the in-context bigram predictor",
            **kw,
        ),
    )
    run.evidence(
        "previous_token_head_first",
        ind.claims.previous_token_head_first(steps, prev[:, :, 0], loss, start_level=uni),
    )
    if c.layers >= 2:
        run.evidence(
            "induction_head", ind.claims.induction_head(induction[:, -1, 1], baseline, **kw)
        )
    run.report("previous_token_final", measured=prev[:, -1, 0])
    run.report(
        "induction_final",
        measured=induction[:, -1, -1],
        prediction=baseline,
        note="prediction: the score of uniform causal attention",
    )

    # stage boundaries and the LLC along training (seed 0)
    leave, settle = ind.stage_boundaries(
        steps,
        loss[0],
        paired_se(uni_seq)[0],
        unigram=float(uni_seq.mean()),
        unigram_se=0.0,
        confidence=c.confidence,
    )
    run.report(
        "stage_boundaries",
        measured=[np.nan if b is None else int(steps[b]) for b in (leave, settle)],
        note="steps where seed 0's loss leaves the unigram plateau and where it settles",
    )
    llc_idx, llc, llc_se = _llc_along_training(
        c, run, result.outputs["weights"][np.flatnonzero(ok)[0]], unravel, k_llc, (leave, settle)
    )
    boundaries = [b for b in (leave, settle) if b is not None]
    if llc is None:
        ev = Evidence(
            "the LLC's trend changes at the stage boundaries",
            2,
            np.nan,
            ErrorModel.standard_error(0.0, dof=None),
            Verdict.inconclusive,
            0.0,
            "not run: llc_checkpoints = 0",
        )
    else:
        ev = ind.claims.llc_trend_changes(
            steps[llc_idx], llc, llc_se, [steps[b] for b in boundaries], **kw
        )
    run.evidence("llc_trend_changes", ev)
    llc_steps = steps[llc_idx] if llc is not None else np.zeros(0, int)
    run.save_arrays(
        loss=loss,
        loss_se=loss_se,
        llc=llc if llc is not None else np.zeros(0),
        llc_se=llc_se if llc is not None else np.zeros(0),
        dims={
            "loss": ("seed", "step"),
            "loss_se": ("seed", "step"),
            "llc": ("llc_step",),
            "llc_se": ("llc_step",),
        },
        coords={"seed": result.seeds[ok], "step": steps, "llc_step": llc_steps},
    )
    _figures.figures(
        run,
        steps,
        loss,
        loss_se,
        prev,
        induction,
        baseline,
        levels={
            "ln k": lnk,
            "unigram": (float(uni_seq.mean()), float(np.median(paired_se(uni_seq)))),
            "bigram": (float(bi_seq.mean()), float(np.median(paired_se(bi_seq)))),
        },
        boundaries=[steps[b] for b in boundaries],
        llc=None if llc is None else (steps[llc_idx], llc, llc_se),
        confidence=c.confidence,
    )


def _llc_along_training(c, run, weights, unravel, key, boundaries):
    """LLC estimates at ``llc_checkpoints`` checkpoints of one seed, evenly spaced in the
    checkpoint index (log-spaced in steps) from the first checkpoint at 1% of training on:
    earlier weights are far from any critical point of the loss. Every checkpoint between the
    two stage boundaries is added, so that the middle stage has estimates of its own."""
    if c.llc_checkpoints == 0:
        return None, None, None
    from ... import llc

    n_cp = weights.shape[0]
    first = int(np.searchsorted(ind.checkpoint_steps(c.steps, c.checkpoints), c.steps / 100))
    idx = np.round(np.linspace(first, n_cp - 1, c.llc_checkpoints)).astype(int)
    leave, settle = boundaries
    if leave is not None:
        idx = np.concatenate([idx, np.arange(leave, n_cp if settle is None else settle + 1)])
    idx = np.unique(idx)
    k_data, k_chain = jax.random.split(key)
    data = (c.task.sample(k_data, c.llc_sequences),)
    template = c.model(jax.random.key(0))
    loss_fn = lambda m, batch: ind.next_token_loss(m, batch[0])
    est_llc, est_se = [], []
    for j, i in enumerate(idx):
        model = eqx.combine(
            unravel(jnp.asarray(weights[i])),
            eqx.filter(template, eqx.is_inexact_array, inverse=True),
        )
        est = llc.estimate_llc(
            loss_fn,
            model,
            data,
            key=jax.random.fold_in(k_chain, j),
            num_chains=c.llc_chains,
            num_draws=c.llc_draws,
            num_burnin=c.llc_burnin,
            step_size=c.llc_step_size,
            localization=c.llc_localization,
            batch_size=c.llc_batch_size,
        )
        est_llc.append(float(est.llc))
        est_se.append(float(est.stderr))
    run.log(
        f"LLC at steps {ind.checkpoint_steps(c.steps, c.checkpoints)[idx].tolist()}: "
        + ", ".join(f"{v:.3g}" for v in est_llc)
    )
    return idx, np.array(est_llc), np.array(est_se)


@negative_control(NAME, "unigram_plateau")
def _no_unigram_stage():
    """A loss that falls from ln k to the bigram level in one step never pauses at unigram."""
    steps = ind.checkpoint_steps(1000, 24).astype(float)
    x = np.log1p(steps)
    curve = 0.95 + (np.log(3) - 0.95) / (1 + np.exp(-(4.0 - x) / 0.3))
    loss = np.stack([curve, curve])
    return ind.claims.loss_plateau(
        steps,
        loss,
        np.full_like(loss, 0.004),
        level=1.04,
        level_se=0.002,
        alternatives=(np.log(3), 0.95),
    )


@negative_control(NAME, "bigram_plateau")
def _settles_above():
    """A loss that settles above the bigram loss (what a model unable to reach it shows)."""
    steps = ind.checkpoint_steps(1000, 24).astype(float)
    x = np.log1p(steps)
    curve = 0.99 + (1.04 - 0.99) / (1 + np.exp(-(5.0 - x) / 0.15))
    loss = np.stack([curve, curve])
    return ind.claims.loss_plateau(
        steps, loss, np.full_like(loss, 0.004), level=0.95, level_se=0.002, alternatives=(1.04,)
    )


@negative_control(NAME, "previous_token_head_first")
def _head_after_the_fall():
    """The previous-token score rising a factor 4 in steps after the loss has fallen."""
    steps = ind.checkpoint_steps(1000, 24).astype(float)
    x = np.log1p(steps)
    loss = 0.95 + 0.09 / (1 + np.exp(-(5.0 - x) / 0.15)) + 0.06 / (1 + np.exp(-(2.0 - x) / 0.15))
    prev = 0.1 + 0.6 / (1 + np.exp(-(x - 5.0 - np.log(4.0)) / 0.2))
    return ind.claims.previous_token_head_first(steps, prev[None], loss[None], start_level=1.04)


@negative_control(NAME, "induction_head")
def _content_blind():
    """Scores at the uniform-attention baseline (a one-layer model cannot key on x_{s})."""
    return ind.claims.induction_head([0.38, 0.4, 0.39], 0.39)


@negative_control(NAME, "llc_trend_changes")
def _steady_llc():
    """An LLC with one steady trend in ln(step): no kink to find."""
    rng = np.random.default_rng(0)
    steps = ind.checkpoint_steps(1000, 24)[1:].astype(float)
    llc = 3 + 0.5 * np.log1p(steps) + 0.05 * rng.normal(size=steps.size)
    return ind.claims.llc_trend_changes(steps, llc, np.full(steps.size, 0.05), steps[[8, 15]])
