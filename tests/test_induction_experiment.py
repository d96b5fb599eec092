"""The induction-head experiment: its negative controls, its config's validation, and (slow)
a quick run that decides the stage claims."""

import json

import numpy as np
import pytest

import jaxdyn.experiments.induction as exp
from jaxdyn.evidence import Verdict
from jaxdyn.runs import ConfigError, negative_controls, run_experiment


def test_every_evidence_check_has_a_negative_control_that_is_not_holds():
    controls = {k: f for k, f in negative_controls().items() if k[0] == exp.NAME}
    assert set(c for _, c in controls) == {
        "unigram_plateau",
        "bigram_plateau",
        "previous_token_head_first",
        "induction_head",
        "llc_trend_changes",
    }
    for key, control in controls.items():
        assert control().verdict in (Verdict.refuted, Verdict.inconclusive), key


@pytest.mark.parametrize(
    "bad", [{"seeds": 1}, {"states": 1}, {"concentration": 0.0}, {"checkpoints": 3}]
)
def test_config_rejects_invalid_science_before_running(bad):
    with pytest.raises(ConfigError):
        exp.InductionConfig(**bad).validate()


@pytest.mark.slow
def test_quick_run_decides_the_stage_claims(tmp_path):
    out = run_experiment(exp.NAME, out=tmp_path / "run", quick=True, processes=1)
    summary = json.loads((out / "summary.json").read_text())
    checks = {c["name"]: c for c in summary["checks"]}
    assert checks["all_seeds_trained"]["passed"]
    assert checks["induction_head"]["verdict"] == "holds"
    assert checks["previous_token_head_first"]["verdict"] == "holds"
    for name in ("unigram_plateau", "bigram_plateau"):
        assert checks[name]["verdict"] in ("holds", "refuted", "inconclusive")
    # decided at the quick size (common random numbers along training, 48 chains)
    assert checks["llc_trend_changes"]["verdict"] in ("holds", "refuted")
    assert (out / "figures" / "induction_head.png").exists()
    arrays = np.load(out / "results.npz")
    assert np.all(np.isfinite(arrays["llc"]))


@pytest.mark.slow
def test_one_layer_model_is_not_an_induction_head():
    """Negative control on a trained network: one layer cannot compose a previous-token head
    with a match, so its induction score must not be called an induction head."""
    import jax
    import optax

    import jaxdyn.induction as ind

    task = ind.InContextMarkov(states=3, length=32)
    held = task.sample(jax.random.key(1), 256)
    cps = ind.checkpoint_steps(800, 8)

    def one(key):
        km, kt = jax.random.split(key)
        model = ind.AttentionOnlyTransformer(key=km, states=3, length=32, width=16, layers=1)
        return ind.train(
            model, task, optax.adam(0.03), key=kt, checkpoints=cps, batch_size=64, held_out=held
        )[1]

    traj = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(0), 3))
    ev = ind.claims.induction_head(
        np.asarray(traj.induction[:, -1, 0]), float(traj.induction_baseline[0])
    )
    assert ev.verdict is not Verdict.holds, ev


def test_llc_along_training_uses_common_random_numbers():
    """Every checkpoint samples with the same chains' noise: equal weights give equal rows,
    other weights other rows, and the chains differ from each other."""
    import equinox as eqx
    import jax

    import jaxdyn.induction as ind
    from jaxdyn.induction import _llc

    tokens = np.random.default_rng(0).integers(0, 3, size=(16, 8))
    model = eqx.filter_jit(ind.AttentionOnlyTransformer)(
        key=jax.random.key(1), states=3, length=8, width=4, layers=1
    )
    w = np.asarray(_llc.flat_weights(model))
    other = w + 0.1 * np.random.default_rng(0).normal(size=w.size)
    kw = dict(num_chains=3, num_draws=4, num_burnin=2, step_size=1e-4, batch_size=4)
    rows = _llc.llc_along_training(
        model, np.stack([w, other, w]), tokens, key=jax.random.key(3), **kw
    )
    assert rows.shape == (3, 3)
    np.testing.assert_array_equal(rows[0], rows[2])
    assert not np.allclose(rows[0], rows[1])
    assert np.unique(rows[0]).size == 3
