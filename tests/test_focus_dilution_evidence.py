"""The focus-and-dilution decision functions (gradflow's evidence): each says holds where the
claim is true, and not holds on a counterfactual; properties over random chains d = 3..8,
non-reversible, with c of either sign (focus_dilution.md, "Stages")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from jax.flatten_util import ravel_pytree

import jaxdyn.gradflow as gf
from jaxdyn.evidence import Verdict
from jaxdyn.gradflow import _linearise, _measure, _stages, claims as _claims


def random_chain(rng, d):
    """A non-reversible chain with a dominant token 0 (c of either sign)."""
    base = np.ones(d)
    base[0] = 1.5 * d
    P = rng.dirichlet(base * rng.uniform(0.3, 3.0), size=d)
    mc = gf.MarkovChain(P)
    pi, P = mc.pi, mc.P
    return np.asarray(pi), np.asarray(P)


# d = 3 and 5 in the fast suite (one compilation per d), every d in the slow one
CHAINS = [(3, 0), (5, 0)] + [pytest.param(d, 0, marks=pytest.mark.slow) for d in (4, 6, 7, 8)]


@pytest.mark.parametrize("d, seed", CHAINS)
def test_saddle_has_one_unstable_mode_of_rate_c_and_a_perturbed_point_does_not(d, seed):
    rng = np.random.default_rng(10 * d + seed)
    pi, P = random_chain(rng, d)
    m, m_attn = 2, 1
    s = gf.unigram_saddle(pi, m, m_attn)
    c = float(_linearise._focus_rate(pi, P, s.gamma, s.beta))
    spec = jax.tree_util.tree_map(np.asarray, _linearise._jacobian_spectrum(s.model, pi, P))
    tol = 1e-8 * max(1.0, float(np.max(np.abs(spec.eigenvalues))))
    ev = gf.claims.unstable_attention_mode(
        spec.eigenvalues, spec.attention_weight, c, m_attn, tolerance=tol
    )
    assert ev.verdict is (Verdict.inconclusive if abs(c) <= tol else Verdict.holds), ev
    # off the saddle (W1 halved) the embedding block is unstable too: not "one mode"
    off = s.model.__class__(W0=s.model.W0, W1=0.5 * s.model.W1, WQ=s.model.WQ, WK=s.model.WK)
    spec_off = jax.tree_util.tree_map(np.asarray, _linearise._jacobian_spectrum(off, pi, P))
    ev_off = gf.claims.unstable_attention_mode(
        spec_off.eigenvalues, spec_off.attention_weight, c, m_attn, tolerance=tol
    )
    assert ev_off.verdict is not Verdict.holds


@pytest.mark.parametrize("d, seed", CHAINS)
@pytest.mark.slow
@pytest.mark.heavy
def test_linear_condensation_aligns_w0_with_pi_and_w1_with_centred_pi(d, seed):
    """theta(t) = e^{J t} theta(0) at the origin (the linearised flow, exact matrix exponential):
    the alignment evidence holds on every chain, and fails for the same matrices measured
    against another chain's pi."""
    rng = np.random.default_rng(100 + 10 * d + seed)
    pi, P = random_chain(rng, d)
    m, m_attn, eps = 3, 2, 1e-3
    model0 = gf.init_transformer(jax.random.key(d), d, m, m_attn, eps)
    zero = jax.tree_util.tree_map(jnp.zeros_like, model0)
    J = np.asarray(_linearise._jacobian(zero, pi, P))
    flat0, unravel = ravel_pytree(model0)
    mu1 = float(gf.condensation_rate(pi))
    t = np.log(0.05 / eps) / mu1  # amplitude ~ 0.05: still linear
    theta = scipy.linalg.expm(J * t) @ np.asarray(flat0)
    model = unravel(jnp.asarray(theta))
    noise = float(np.linalg.norm(flat0))
    amp = float(np.linalg.norm(theta)) - noise  # a lower bound on the unstable part
    ev = gf.claims.condensation_alignment(
        model.W0,
        model.W1,
        pi,
        noise=noise,
        amplitude=amp,
        nonlinearity=0.0,
        rate=mu1,
    )
    assert ev.verdict is Verdict.holds, ev
    other = np.roll(pi, 1)
    ev_other = gf.claims.condensation_alignment(
        model.W0,
        model.W1,
        other,
        noise=noise,
        amplitude=amp,
        nonlinearity=0.0,
        rate=mu1,
    )
    assert ev_other.verdict is Verdict.refuted


def test_stage_order_reads_order_missing_signatures_and_resolution():
    names = list(_stages.STAGE_NAMES)
    ok = _claims._stage_order([15.0, 75.0, 100.0, 300.0], np.full(4, 0.5), names)
    assert ok.verdict is Verdict.holds
    swapped = _claims._stage_order([15.0, 120.0, 100.0, 300.0], np.full(4, 0.5), names)
    assert swapped.verdict is Verdict.refuted
    missing = _claims._stage_order([15.0, 75.0, np.nan, 300.0], np.full(4, 0.5), names)
    assert missing.verdict is Verdict.inconclusive and "dilution" in missing.reason
    close = _claims._stage_order([15.0, 75.0, 75.5, 300.0], np.full(4, 0.5), names)
    assert close.verdict is Verdict.inconclusive
    np.testing.assert_allclose(
        _measure.stage_resolution([0.0, 1.0, 3.0], [2.0, np.nan]), [2.0, np.nan]
    )


def test_entropy_course_is_refuted_only_when_the_horizon_covered_it():
    H = 0.7
    assert gf.claims.entropy_down_up_down(0.5, 0.9, 0.6, H, 1e-4, complete=True).holds
    flat = gf.claims.entropy_down_up_down(H, H, H, H, 1e-4, complete=True)
    assert flat.refuted
    cut = gf.claims.entropy_down_up_down(0.5, 0.9, 0.9, H, 1e-4, complete=False)
    assert cut.inconclusive and "horizon" in cut.reason
    # the down-again leg is a minimum over the rest of the horizon: a longer horizon can only
    # lower it, so a flow still moving at the end leaves it open; a settled flow decides it
    moving = gf.claims.entropy_down_up_down(0.5, 0.9, 0.9, H, 1e-4, complete=True)
    assert moving.inconclusive and "steady state" in moving.reason
    assert gf.claims.entropy_down_up_down(
        0.5, 0.9, 0.9, H, 1e-4, complete=True, settled=True
    ).refuted


def test_escape_time_slope_in_log_inverse_eps_with_one_offset_per_group():
    eps = np.tile([1e-2, 1e-3, 1e-4], 3)
    groups = np.repeat([1.0, 2.0, 3.0], 3)
    x = np.log(1 / eps)
    # deterministic: the law plus its O(eps) next-order term, known to the save spacing 0.01
    y = x + 2 * groups + 3.0 * eps
    res = np.full(9, 0.01)
    ev = gf.claims.escape_time_log_eps(x, y, groups, eps=eps, resolution=res)
    assert ev.holds and ev.error_model.name == "derived_bound"
    # without the nuisance regressor the O(eps) term would bias the slope by about 0.006:
    # a spacing-only tolerance of 1e-4 would refute the law, the fit with eps does not
    assert gf.claims.escape_time_log_eps(x, y, groups, eps=eps, resolution=res / 100).holds
    assert gf.claims.condensation_escape_time(
        x, 1.3 * x + groups, groups, eps=eps, resolution=res
    ).refuted
    slope, se, dof = _measure.pooled_slope(x, 1.3 * x + groups, groups)
    assert slope == pytest.approx(1.3) and dof == 5


def test_equivalence_needs_enough_draws_and_moving_curves_to_hold():
    rng = np.random.default_rng(0)
    course = np.linspace(0.5, 0.3, 5)  # both trainings move by 0.2, ten times the margin
    a = course + 0.001 * rng.normal(size=(8, 5))
    b = course + 0.001 * rng.normal(size=(8, 5))
    assert _claims._equivalent("same", a, b, 0.01).holds
    # curves that stay put agree whatever drives them: no power, not a pass
    still = _claims._equivalent("same", a - course + 0.5, b - course + 0.5, 0.01)
    assert still.inconclusive and "staying put" in still.reason
    assert _claims._equivalent(
        "same", a[:2], b[:2] + 0.003 * rng.normal(size=(2, 5)), 0.002
    ).inconclusive
    assert _claims._equivalent("same", a, b + 0.05, 0.01).refuted


def test_equivalence_states_how_many_draws_would_decide():
    """The projection in the inconclusive reason: with per-draw spread s at every record and a
    measured difference 0, k draws each decide when q(k) s sqrt(2 / k) < effect (q the
    Bonferroni quantile of Welch's t at 2k - 2 dof); k - 1 draws do not."""
    from scipy.stats import t as student_t

    from jaxdyn.gradflow.claims import _draws_to_decide

    records, s, effect = 5, 0.05, 0.02
    k = _draws_to_decide(
        np.zeros(records), np.full(records, s**2), np.full(records, s**2), effect, 0.99
    )

    def half(k):
        return student_t.ppf(1 - 0.01 / (2 * records), 2 * k - 2) * s * np.sqrt(2 / k)

    assert half(k) < effect <= half(k - 1)
    # a difference at the margin: no number of draws decides
    assert (
        _draws_to_decide(
            np.full(records, effect), np.full(records, s**2), np.full(records, s**2), effect, 0.99
        )
        is None
    )
    rng = np.random.default_rng(1)
    course = np.linspace(0.5, 0.3, records)
    e = _claims._equivalent(
        "same",
        course + s * rng.normal(size=(4, records)),
        course + s * rng.normal(size=(4, records)),
        effect,
    )
    assert e.inconclusive and "draws of each would decide" in e.reason


def test_local_order_and_finite_size_exponents():
    x = np.geomspace(1e-3, 1e-2, 5)
    assert _claims._local_order("order 1", x, 0.1 * x * (1 + x**2), 1.0, 2.0).holds
    assert _claims._local_order("order 1", x, 0.1 * x**2, 1.0, 2.0).refuted
    rng = np.random.default_rng(1)
    h = np.repeat([1 / 8, 1 / 16, 1 / 32, 1 / 64], 4)
    err = 0.3 * h * np.exp(0.05 * rng.normal(size=h.size))
    assert _claims._power_law_exponent("exponent 1", h, err).holds
    assert not _claims._power_law_exponent("exponent 1", h, err**0.3).holds


def test_plateau_and_first_phase():
    assert gf.claims.unigram_plateau(0.7272, 1e-3, 0.7271, np.log(4)).holds
    assert gf.claims.unigram_plateau(0.75, 1e-3, 0.7271, np.log(4)).refuted
    assert gf.claims.unigram_plateau(1.0, 1.0, 0.7271, np.log(4)).inconclusive
    assert gf.claims.first_attention_phase(-0.1, -1).holds
    assert gf.claims.first_attention_phase(-0.1, 1).refuted
    assert gf.claims.first_attention_phase(-0.1, 0).inconclusive


def test_order_bound_holds_above_the_order_and_is_refuted_below():
    x = np.array([0.0025, 0.005, 0.01, 0.02])
    assert _claims._order_at_least("O(x^2)", x, x**3 * (1 + x), 2.0).holds
    assert _claims._order_at_least("O(x^2)", x[::-1], (x**3)[::-1], 2.0).holds  # any order
    assert _claims._order_at_least("O(x^2)", x, x * (1 + x), 2.0).refuted


@pytest.mark.parametrize("d, seed", CHAINS[:1] + [pytest.param(5, 1, marks=pytest.mark.slow)])
@pytest.mark.slow
@pytest.mark.heavy
def test_origin_deviation_is_third_order_and_attention_moves_fifth_order(d, seed):
    """grad L is odd (no quadratic term) and dL/dPhi = O(eps^2) at the origin, on any chain:
    the deviation from the linearisation is O(eps^3), the attention's change O(eps^5), within
    the paper's bounds (eps^2, eps^3); an embedding initialised at scale 1 breaks both."""
    rng = np.random.default_rng(7 + d + seed)
    pi, P = random_chain(rng, d)
    chain = gf.MarkovChain(P, pi)
    eps = np.array([0.0025, 0.005, 0.01, 0.02])
    mu1 = float(gf.condensation_rate(pi))
    t1 = float(np.log(0.1 / eps[-1]) / mu1)
    z = gf.init_transformer(jax.random.key(seed), d, 3, 2, 1.0)
    o = gf.origin_scaling(chain, z, eps, t1, num_saves=50)
    np.testing.assert_allclose(o.rate, mu1, rtol=1e-8)
    dev, att = o.deviation[:, -1], o.attention_change[:, -1]
    assert _claims._local_order("3", eps, dev, 3.0, 2.0).holds
    assert _claims._local_order("5", eps, att, 5.0, 3.0).holds
    assert _claims._order_at_least("2", eps, dev, 2.0).holds
    assert _claims._order_at_least("3", eps, att, 3.0).holds
    big = gf.origin_scaling(chain, z, eps, t1, num_saves=50, embedding_scale=1.0)
    assert _claims._order_at_least("2", eps, big.deviation[:, -1], 2.0).refuted
    assert _claims._order_at_least("3", eps, big.attention_change[:, -1], 3.0).refuted


def test_origin_scaling_rejects_bad_inputs():
    chain = gf.MarkovChain.paper(np.array([0.7, 0.2, 0.1]), 0.5)
    z = gf.init_transformer(jax.random.key(0), 3, 2, 2, 1.0)
    with pytest.raises(ValueError, match="at least 2"):
        gf.origin_scaling(chain, z, np.array([0.01]), 1.0)
    with pytest.raises(ValueError, match="t1 > 0"):
        gf.origin_scaling(chain, z, np.array([0.01, 0.02]), -1.0)
    with pytest.raises(ValueError, match="d = 4"):
        gf.origin_scaling(
            chain, gf.init_transformer(jax.random.key(0), 4, 2, 2, 1.0), np.array([0.1, 0.2]), 1.0
        )


def _saddle_trajectory(pi, c, ts, noise=1e-4, seed=0):
    """W0 = gamma alpha^T + noise, (WQ, WK) = the unstable attention mode growing like e^{c t}
    (WQ = alpha q^T, WK = sign(c) alpha q^T) plus a fixed part: the linearisation at the
    saddle, written down."""
    rng = np.random.default_rng(seed)
    d, m, ma = len(pi), 3, 2
    alpha = np.eye(m)[0]
    gamma = 2.0 * pi / np.linalg.norm(pi)
    q = rng.normal(size=ma)
    q /= np.linalg.norm(q)
    rest_q, rest_k = 1e-3 * rng.normal(size=(m, ma)), 1e-3 * rng.normal(size=(m, ma))
    W0 = np.stack([np.outer(gamma, alpha) + noise * rng.normal(size=(d, m)) for _ in ts])
    amp = 1e-3 * np.exp(abs(c) * np.asarray(ts))
    WQ = np.stack([a * np.outer(alpha, q) + rest_q for a in amp])
    WK = np.stack([np.sign(c) * a * np.outer(alpha, q) + rest_k for a in amp])
    return W0, WQ, WK, gamma


@pytest.mark.parametrize("c", [0.08, -0.05])
def test_score_direction_holds_on_the_linearised_saddle_and_not_for_another_pi(c):
    pi = np.array([0.6, 0.25, 0.1, 0.05])
    ts = np.linspace(0.0, 80.0, 81)
    W0, WQ, WK, gamma = _saddle_trajectory(pi, c, ts)
    saddle = np.outer(gamma, np.eye(3)[0])
    sd = _measure.score_angle(ts, W0, WQ, WK, pi, c, saddle, 0.0, 80.0)
    assert gf.claims.score_direction(sd["angle"], sd["bound"]).holds, sd
    # the same flow read against the opposite sign (refuted), or an embedding along another
    # chain's pi (W0 is far from this chain's saddle: no bound)
    wrong = _measure.score_angle(ts, W0, WQ, WK, pi, -c, saddle, 0.0, 80.0)
    assert gf.claims.score_direction(wrong["angle"], wrong["bound"]).refuted
    other = np.array([0.3, 0.3, 0.2, 0.2])
    W0o, WQo, WKo, go = _saddle_trajectory(other, c, ts)
    sd_o = _measure.score_angle(ts, W0o, WQo, WKo, pi, c, np.outer(go, np.eye(3)[0]), 0.0, 80.0)
    assert not gf.claims.score_direction(sd_o["angle"], sd_o["bound"]).holds
    # a flow that has not settled on the saddle: inconclusive
    assert gf.claims.score_direction(sd["angle"], sd["bound"], at_saddle=False).inconclusive
    # attention that never outgrows its initial part: no bound, inconclusive
    early = _measure.score_angle(ts, W0, WQ, WK, pi, c, saddle, 0.0, 2.0)
    assert gf.claims.score_direction(early["angle"], early["bound"]).inconclusive


def test_dilution_rate_reads_the_growth_rate_above_the_saddle_value():
    pi = np.array([0.75, 0.19, 0.05, 0.01])
    c = 0.08
    ts = np.linspace(30.0, 75.0, 46)
    gamma_v = pi / np.linalg.norm(pi)
    saddle = gamma_v[:, None]  # W0 = gamma_v alpha^T with m = 1
    mode = np.array([1.0 - pi[0], -pi[0], -pi[0], -pi[0]])  # grows the dilution mode
    for growth, verdict in ((c, Verdict.holds), (2 * c, Verdict.refuted), (0.0, Verdict.refuted)):
        gamma = gamma_v[None] + 1e-6 * np.exp(growth * ts)[:, None] * mode[None]
        if growth == 0.0:
            gamma = gamma_v[None] + 1e-6 * (1 + 1e-3 * ts)[:, None] * mode[None]
        k = np.full(ts.size, c)
        dr = _measure.dilution_mode_growth(ts, gamma, pi, saddle, k, c, 30.0, 75.0)
        ev = gf.claims.dilution_mode_rate(dr["rate"], dr["half_rates"], dr["rate_error"], c)
        assert ev.verdict is verdict, (growth, dr)
    few = _measure.dilution_mode_growth(ts[:4], gamma[:4], pi, saddle, k[:4], c, 30.0, 75.0)
    assert gf.claims.dilution_mode_rate(
        few["rate"], few["half_rates"], few["rate_error"], c
    ).inconclusive
