"""The attention-only transformer, its attention order parameters and the training loop."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxdyn.induction as ind


def _model(key=0, layers=2, T=12, k=3, d=8):
    return ind.AttentionOnlyTransformer(
        key=jax.random.key(key), states=k, length=T, width=d, layers=layers
    )


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_model_is_causal_and_patterns_are_causal_distributions(layers):
    model = _model(layers=layers)
    x = jax.random.randint(jax.random.key(1), (12,), 0, 3)
    logp, A = model.forward(x)
    assert A.shape == (layers, 12, 12)
    np.testing.assert_allclose(A.sum(-1), 1.0, atol=1e-12)
    assert float(jnp.abs(jnp.triu(A, k=1)).max()) == 0.0
    np.testing.assert_allclose(jnp.exp(logp).sum(-1), 1.0, atol=1e-12)
    y = x.at[7].set((x[7] + 1) % 3)  # changing a token leaves every earlier prediction alone
    np.testing.assert_allclose(model(y)[:7], logp[:7], atol=1e-12)
    assert float(jnp.abs(model(y)[7:] - logp[7:]).max()) > 0


def test_scores_of_exact_patterns():
    T = 10
    tokens = jnp.array([0, 1, 2, 0, 1, 2, 0, 2, 1, 0])
    shift = jnp.eye(T, k=-1).at[0, 0].set(1.0)
    assert float(ind.previous_token_score(shift)) == 1.0
    # a perfect induction head: all attention on the positions after earlier occurrences
    target = np.zeros((T, T))
    for t in range(T):
        us = [s + 1 for s in range(t) if tokens[s] == tokens[t]]
        if us:
            target[t, us] = 1.0 / len(us)
        else:
            target[t, t] = 1.0
    assert float(ind.induction_score(jnp.asarray(target), tokens)) == pytest.approx(1.0)
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    frac = [
        len({s + 1 for s in range(t) if tokens[s] == tokens[t]}) / (t + 1)
        for t in range(T)
        if any(tokens[s] == tokens[t] for s in range(t))
    ]
    assert float(ind.induction_score(jnp.asarray(uniform), tokens)) == pytest.approx(np.mean(frac))
    assert float(ind.previous_token_score(jnp.asarray(uniform))) == pytest.approx(
        np.mean(1 / np.arange(2, T + 1))
    )


def test_training_records_checkpoints_and_lowers_the_loss():
    task = ind.InContextMarkov(states=3, length=12)
    held = task.sample(jax.random.key(5), 64)
    model = _model()
    cps = ind.checkpoint_steps(40, 5)
    run = jax.jit(
        lambda m, k: ind.train(
            m, task, optax.adam(0.03), key=k, checkpoints=cps, batch_size=16, held_out=held
        )
    )
    final, traj = run(model, jax.random.key(2))
    assert traj.sequence_loss.shape == (cps.size, 64)
    assert traj.previous_token.shape == traj.induction.shape == (cps.size, 2)
    # checkpoint 0 is the untrained model; the last is the returned one
    np.testing.assert_allclose(traj.loss[0], ind.next_token_loss(model, held), rtol=1e-12)
    np.testing.assert_allclose(traj.loss[-1], ind.next_token_loss(final, held), rtol=1e-12)
    np.testing.assert_allclose(traj.model_at(-1).embedding, final.embedding, rtol=0, atol=0)
    assert float(traj.loss[-1]) < float(traj.loss[0]) - 5 * float(traj.loss_se[0])


def test_train_rejects_bad_checkpoints_before_compiling():
    task = ind.InContextMarkov(states=3, length=12)
    held = jnp.zeros((4, 12), int)
    with pytest.raises(ValueError, match="increasing"):
        ind.train(
            _model(),
            task,
            optax.adam(0.1),
            key=jax.random.key(0),
            checkpoints=np.array([0, 5, 5]),
            batch_size=4,
            held_out=held,
        )
    with pytest.raises(ValueError, match="held_out"):
        ind.train(
            _model(),
            task,
            optax.adam(0.1),
            key=jax.random.key(0),
            checkpoints=np.array([0, 5]),
            batch_size=4,
            held_out=held[:, :5],
        )
