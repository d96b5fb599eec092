"""Finite-sample training, stage detection helpers, real-text loaders and experiment configs
(focus_dilution.md, "Population loss", "Metrics to log", "Real text")."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxdyn.data as jdata
import jaxdyn.gradflow as gf
from jaxdyn import Status
from jaxdyn.data._corpora import corpus_path
from jaxdyn.gradflow import _markov, _metrics, _model, _stages, _text, _train

PI = jnp.array([0.75, 0.19, 0.05, 0.01])
WIKI = corpus_path("wikitext-2")  # the full split when available, else the packaged excerpt
TINY = corpus_path("tinystories")


@pytest.mark.slow
@pytest.mark.heavy
def test_gd_step_is_the_plain_gradient_update_with_a_traced_learning_rate():
    P = _markov.paper_transition(PI, 0.5)
    x = _markov._sample_sequences(jax.random.key(0), P, 64, 9)
    model = gf.init_transformer(jax.random.key(1), 4, 3, 2, 0.3)
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.0)
    step = jax.jit(_train.train_step, static_argnums=2)
    for lr in (0.1, 0.7):  # one compilation, the rate is a run-time array
        state = _train.train_init(model, opt, lr)
        new, loss = step(state, _model.prepare_batch(x, 4), opt)
        g = jax.grad(_model.sequence_loss)(model, x)
        np.testing.assert_allclose(new.model.W0, model.W0 - lr * g.W0, atol=1e-14)
        np.testing.assert_allclose(new.model.WK, model.WK - lr * g.WK, atol=1e-14)
        np.testing.assert_allclose(loss, _model.sequence_loss(model, x), atol=1e-14)
    assert step._cache_size() == 1


@pytest.mark.slow
@pytest.mark.heavy
def test_finite_gradient_descent_approaches_the_population_flow_as_n_and_s_grow():
    P = _markov.paper_transition(PI, 0.5)
    key, k_init = jax.random.split(jax.random.key(3))
    # a small step, so that GD's own discretisation (growth factor 1 + lr mu1 per step instead
    # of exp(lr mu1)) does not shift the escape time
    lr, steps = 0.1, 200
    model0 = gf.init_transformer(k_init, 4, 4, 3, 1e-2)
    ts = np.arange(6) * 40 * lr
    sol = gf.population_flow(model0, gf.MarkovChain(P, PI), ts)
    flow_loss = np.asarray(jax.vmap(lambda m: _model._population_loss(m, PI, P))(sol.models))
    assert flow_loss[-1] < np.log(4) - 0.3  # the comparison spans the condensation
    errors = []
    for n, s in ((64, 8), (2048, 64)):
        run = jax.jit(
            lambda k, n=n, s=s: gf.train_finite(
                k,
                gf.MarkovChain(P, PI),
                n=n,
                s=s,
                m=4,
                m_attn=3,
                eps=1e-2,
                lr=lr,
                num_steps=steps,
                record_every=40,
                init_key=k_init,
            )
        )(key)
        assert bool(run.status == Status.successful)
        errors.append(float(np.max(np.abs(np.asarray(run.population_loss) - flow_loss))))
    # error model: the sampled gradient's noise falls like 1/sqrt(n s) (16x from the first size
    # to the second) and the finite-length bias like 1/s (8x), so the error along the whole
    # trajectory must shrink; asking only a factor 2 leaves room for the GD discretisation
    # error, common to both sizes
    assert errors[1] < 0.5 * errors[0], errors


@pytest.mark.slow
def test_vmapped_seeds_equal_separate_runs():
    P = _markov.paper_transition(PI, 0.5)
    f = lambda k: gf.train_finite(
        k,
        gf.MarkovChain(P, PI),
        n=32,
        s=8,
        m=3,
        m_attn=2,
        eps=0.1,
        lr=0.3,
        num_steps=20,
        record_every=10,
        optimizer=optax.inject_hyperparams(optax.adam)(learning_rate=0.0),
    )
    keys = jax.random.split(jax.random.key(0), 3)
    batched = jax.jit(jax.vmap(f))(keys)
    for i in range(3):
        single = jax.jit(f)(keys[i])
        np.testing.assert_allclose(batched.population_loss[i], single.population_loss, rtol=1e-10)


def test_first_crossing_interpolates_and_searches_only_after_t_min():
    ts = np.array([0.0, 1.0, 2.0, 3.0])
    down = _stages.first_crossing(ts, np.array([1.0, 0.8, 0.4, 0.2]), 0.6, -np.inf, upward=False)
    assert float(down.time) == pytest.approx(1.5) and float(down.value) == 0.4
    # the first upward crossing (at 0.7) is before t_min; the second one is found
    up = _stages.first_crossing(ts, np.array([0.0, 0.9, 0.1, 0.9]), 0.7, 1.5, upward=True)
    assert float(up.time) == pytest.approx(2.75) and float(up.start) == pytest.approx(0.1)
    assert np.isnan(float(_stages.first_crossing(ts, np.zeros(4), 0.7, 0.0, upward=True).time))
    assert np.isnan(float(_stages.first_crossing(ts, np.ones(4), 0.7, np.nan, upward=True).time))


def _synthetic_metrics(ts, pi, dilute=True, grow=True):
    """Curves shaped like the four stages: loss from log d to H(pi) at t = 10, attention on
    the frequent token rising at t = 50, low-query entropy dipping then rising at t = 60,
    a second embedding direction growing at t = 200."""
    H = float(-(pi * np.log(pi)).sum())
    step = lambda t0: 1 / (1 + np.exp(-(ts - t0)))
    f = pi[0] + (1 - pi[0]) * 0.9 * step(50)
    h_low = H - 0.1 * step(45) + (0.6 * step(60) if dilute else 0)
    ratio = 1e-3 + 0.5 * step(200) * grow
    return {
        "loss": np.log(len(pi)) + (H - np.log(len(pi))) * step(10),
        "frequent_weight": f,
        "entropy_low_queries": h_low,
        "sv_W0": np.stack([np.ones_like(ts), ratio], axis=1),
    }


def test_stages_are_found_in_sequence_on_synthetic_curves():
    ts = np.linspace(0.0, 400.0, 4001)
    pi = np.array([0.7, 0.2, 0.1])
    st = gf.detect_stages(ts, _synthetic_metrics(ts, pi), pi)
    t = st.times()
    assert t["condensation"] == pytest.approx(10.0, abs=0.05)
    assert (
        45 < t["focus"] == t["departure"] < 50 < t["dilution"] < 65 < 190 < t["new_direction"] < 200
    )
    assert bool(st.in_order()) and int(st.departure_sign) == 1
    assert float(st.entropy_dip) < float(st.uniform_entropy) < float(st.entropy_peak)
    # without the rise there is no dilution, and no new direction is searched for after it
    st = gf.detect_stages(ts, _synthetic_metrics(ts, pi, dilute=False), pi)
    assert np.isnan(float(st.dilution.time)) and np.isnan(float(st.new_direction.time))
    assert not bool(st.in_order())


def test_dilution_mode_vanishes_on_pi_and_matches_the_symmetric_formula():
    pi = np.array([0.7, 0.1, 0.1, 0.1])
    assert abs(float(_metrics.dilution_mode(3.0 * pi, pi))) < 1e-14
    gamma = np.array([2.0, -0.5, -0.5, -0.5])
    expected = (1 - 0.7) * 2.0 - 3 * 0.7 * (-0.5)
    np.testing.assert_allclose(_metrics.dilution_mode(gamma, pi), expected)


def test_embedding_pca_recovers_a_planar_trajectory():
    t = np.linspace(0, 1, 20)
    rows = np.stack(
        [np.outer(np.cos(t + i), [1, 0, 0]) + np.outer(np.sin(t + i), [0, 1, 0]) for i in range(3)],
        axis=1,
    )
    pca = _metrics.embedding_pca(rows)
    assert pca.shape == (20, 3, 2)
    # a planar motion keeps all its variance in two components: distances are preserved
    d_orig = np.linalg.norm(rows[:, 0] - rows[:, 1], axis=-1)
    d_pca = np.linalg.norm(pca[:, 0] - pca[:, 1], axis=-1)
    np.testing.assert_allclose(d_pca, d_orig, atol=1e-12)


def test_wikitext_loader_detects_format_and_gives_a_stochastic_bigram_chain():
    c = jdata.load_corpus(WIKI, vocab_size=20, max_tokens=50_000)
    assert c.format == "wikitext"
    assert c.vocab[0] == "the" and c.vocab[-1] == "<oov>"
    assert c.tokens.max() < 20 and len(c.tokens) == 50_000
    P, pi = jdata.bigram_chain(c.tokens, c.d)
    gf.MarkovChain(P, pi)
    np.testing.assert_allclose(pi @ P, pi, atol=1e-12)
    np.testing.assert_allclose(pi, jdata.unigram_frequencies(c.tokens, c.d), atol=2e-3)


def test_tinystories_loader_word_and_character_level():
    text = TINY.read_text()
    assert jdata.detect_format(text) == "tinystories"
    words = jdata.load_corpus(TINY, vocab_size=16)
    assert words.format == "tinystories"
    assert {".", ",", "the"} <= set(words.vocab)
    assert "<eos>" in jdata.tokenize(text, "tinystories")
    chars = jdata.load_corpus(TINY, level="char", vocab_size=12)
    assert chars.vocab[0] == " "  # whitespace is the most frequent character
    windows = jdata.stream_windows(chars.tokens, 9, 5, np.random.default_rng(0))
    assert windows.shape == (5, 9)


def test_stream_windows_are_distinct_and_cover_a_short_stream():
    tokens = np.arange(100, dtype=np.int32)  # token = its position: a window is its start
    rng = np.random.default_rng(0)
    w = jdata.stream_windows(tokens, 10, 40, rng)
    assert w.shape == (40, 10)
    np.testing.assert_array_equal(w - w[:, :1], np.broadcast_to(np.arange(10), (40, 10)))
    assert len(np.unique(w[:, 0])) == 40  # drawn without replacement
    # a stream with at most n windows gives every window once, in order
    every = jdata.stream_windows(tokens, 10, 91, rng)
    np.testing.assert_array_equal(every[:, 0], np.arange(91))
    np.testing.assert_array_equal(jdata.stream_windows(tokens, 10, 5000, rng), every)
    with pytest.raises(ValueError, match="fewer than the window length"):
        jdata.stream_windows(tokens[:5], 10, 3, rng)


def test_loader_rejects_missing_file_and_reads_a_corpus_by_name():
    with pytest.raises(ValueError, match="neither a file nor a known corpus"):
        jdata.load_corpus(WIKI.parent / "no_such_file.txt")
    by_name = jdata.load_corpus("wikitext-2", vocab_size=16, max_chars=20_000)
    by_path = jdata.load_corpus(WIKI, vocab_size=16, max_chars=20_000)
    assert by_name.vocab == by_path.vocab
    np.testing.assert_array_equal(by_name.tokens, by_path.tokens)


def test_attention_story_reads_focus_and_dilution_phases():
    prior = np.array([0.5, 0.3, 0.2])
    rows = np.array([prior, [0.95, 0.03, 0.02], prior, [0.34, 0.33, 0.33], [0.05, 0.05, 0.9]])
    story = gf.attention_story(rows, prior, ["a", "b", "c"], threshold=0.05)
    assert story == ["uniform", "focus on 'a'", "uniform", "dilution", "focus on 'c'"]


def test_attention_by_token_sums_to_one_per_query():
    model = gf.init_transformer(jax.random.key(0), 5, 3, 2, 0.5)
    P = _markov.paper_transition(jnp.ones(5) / 5, 0.2)
    w = _markov._sample_sequences(jax.random.key(1), P, 200, 11)
    A, F, counts = jax.jit(_text.attention_by_token, static_argnums=2)(model, w, 5)
    seen = np.asarray(counts) > 0
    np.testing.assert_allclose(np.asarray(A).sum(1)[seen], 1.0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(F).sum(1)[seen], 1.0, atol=1e-12)


def test_experiment_configs_reject_bad_inputs_before_running():
    from jaxdyn.runs import ConfigError, get_experiment, resolve_config

    exp = get_experiment("focus-dilution")
    with pytest.raises(ConfigError, match="sum to 1"):
        resolve_config(exp.config_cls, experiment=exp.name, overrides=["pi=[0.5,0.4]"]).validate()
    with pytest.raises(ConfigError, match="lam"):
        resolve_config(exp.config_cls, experiment=exp.name, overrides=["lam=1.5"]).validate()
    delta = get_experiment("focus-dilution-delta")
    with pytest.raises(ConfigError, match="include 0"):
        resolve_config(
            delta.config_cls, experiment=delta.name, overrides=["deltas=[0.01,0.02]"]
        ).validate()
    text = get_experiment("focus-dilution-text")
    with pytest.raises(ConfigError, match="corpus_path"):
        resolve_config(
            text.config_cls, experiment=text.name, overrides=["corpus_path=/nope.txt"]
        ).validate()
    with pytest.raises(ConfigError, match="solver"):
        resolve_config(
            text.config_cls,
            experiment=text.name,
            overrides=["corpus_path=tinystories", "solver=euler"],
        ).validate()


def test_text_config_choices_are_the_tokeniser_s_and_checked_before_running():
    from typing import get_args, get_type_hints

    from jaxdyn.data._tokenise import Format, Level
    from jaxdyn.runs import ConfigError, get_experiment, resolve_config

    text = get_experiment("focus-dilution-text")
    hints = get_type_hints(text.config_cls)
    assert set(get_args(hints["line_breaks"])) == {lb.value for lb in jdata.LineBreaks}
    assert get_args(hints["corpus_format"]) == get_args(Format)
    assert get_args(hints["level"]) == get_args(Level)
    for bad in ("level=words", "line_breaks=merge", "oov=bucket", "corpus_format=html"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            resolve_config(text.config_cls, experiment=text.name, overrides=[bad])


@pytest.mark.slow
@pytest.mark.heavy
def test_gradient_descent_on_the_population_loss_converges_to_the_flow_at_first_order():
    P = _markov.paper_transition(PI, 0.5)
    model0 = gf.init_transformer(jax.random.key(4), 4, 3, 2, 0.05)
    T = 12.0
    flow = gf.population_flow(
        model0, gf.MarkovChain(P, PI), jnp.array([0.0, T]), rtol=1e-10, atol=1e-12
    )
    last = jax.tree_util.tree_map(lambda x: x[-1], flow.models)
    target = float(_model._population_loss(last, PI, P))
    errors = []
    for lr in (0.2, 0.1, 0.05):
        steps = round(T / lr)
        run = gf.descend(
            model0,
            lambda m: _model._population_loss(m, PI, P),
            gf.MarkovChain(P, PI),
            lr=lr,
            num_steps=steps,
            record_every=steps,
        )
        errors.append(abs(float(run.population_loss[-1]) - target))
    # explicit Euler: the error halves with the step (ratio 2 up to O(lr) corrections)
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all(np.abs(ratios - 2.0) < 0.2), (errors, ratios)


def test_load_corpus_keeps_included_words_and_reads_a_prefix():
    c = jdata.load_corpus(WIKI, vocab_size=16, include=("continue",), max_chars=300_000)
    assert "continue" not in jdata.load_corpus(WIKI, vocab_size=16, max_chars=300_000).vocab
    assert c.d == 17 and c.vocab[-2:] == ("continue", "<oov>")
    assert int(np.sum(c.tokens == c.vocab.index("continue"))) == 3  # rare in the excerpt
    assert len(jdata.load_corpus(WIKI, vocab_size=16, max_chars=100_000).tokens) < len(c.tokens) / 2
    with pytest.raises(ValueError, match="do not occur"):
        jdata.load_corpus(WIKI, vocab_size=16, include=("zzzzqqq",), max_chars=10_000)


def _markov_text(tmp_path, P, words, n, seed=0):
    rng = np.random.default_rng(seed)
    x, out = 0, []
    for _ in range(n):
        x = rng.choice(len(words), p=P[x])
        out.append(words[x])
    path = tmp_path / "markov.txt"
    path.write_text("\n".join(" ".join(out[i : i + 20]) for i in range(0, n, 20)) + "\n")
    return path


def test_synthetic_markov_text_gives_back_its_chain_and_drops_the_oov_bucket(tmp_path):
    """Text generated from a known chain: the word-level bigram chain recovers pi within its
    sampling error; with drop_oov the rare words leave the stream and every vocabulary entry
    is a real word; an absent query is reported as missing, not an error."""
    P = np.array(
        [
            [0.5, 0.2, 0.2, 0.05, 0.05],
            [0.6, 0.1, 0.1, 0.1, 0.1],
            [0.3, 0.3, 0.3, 0.05, 0.05],
            [0.7, 0.1, 0.1, 0.05, 0.05],
            [0.4, 0.2, 0.2, 0.1, 0.1],
        ]
    )
    words = ["alpha", "beta", "gamma", "delta", "omega"]
    n = 20_000
    path = _markov_text(tmp_path, P, words, n)
    pi_true = np.asarray(_markov.stationary_distribution(P))
    c = jdata.load_corpus(path, fmt="plain", vocab_size=7)
    assert set(c.vocab) == set(words) | {"<nl>", jdata.OOV}
    keep = [c.vocab.index(w) for w in words]
    freq = jdata.unigram_frequencies(c.tokens, c.d)[keep]
    freq = freq / freq.sum()
    # a Markov chain's frequencies have a standard error of order sqrt(pi / n) x its mixing
    np.testing.assert_allclose(freq, pi_true, atol=5 * np.sqrt(pi_true.max() / n) * 3)
    small = jdata.load_corpus(
        path, fmt="plain", vocab_size=4, drop_oov=True, include=("zeta",), missing="skip"
    )
    assert jdata.OOV not in small.vocab and small.missing == ("zeta",)
    assert small.oov_share > 0.05  # delta and omega (and <nl>) were the bucket
    assert set(small.vocab) <= set(words) | {"<nl>"}
    picked = jdata.medium_frequency_tokens(small, 1)
    assert len(picked) == 1 and picked[0] in words
