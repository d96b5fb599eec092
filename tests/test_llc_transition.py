"""The copy head's transition through the LLC (docs/llc.md, "Copy-head transition"): the
free-energy claim with its negative controls, the crossing arithmetic against a closed form,
and the finite posterior mode the LLC is measured at."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn.copyhead as ch
from jaxdyn.evidence import Verdict
from jaxdyn.llc import _transition as tr, claims


def _points(Ps, dE, lam_pool, lam_copy, se=0.1):
    return [
        tr.PhasePoint(
            int(P),
            (0.0, float(d)),
            (lam_pool, lam_copy),
            (se, se),
            (0.1, 0.5),
            (0.0, float(d) + 0.3 * math.log(P)),
            False,
            False,
        )
        for P, d in zip(Ps, dE, strict=True)
    ]


def test_crossing_matches_closed_form():
    # dF(P) = a - b ln P + (lam_c - lam_p) ln P with a = 40, b = 20, lam_c - lam_p = 5:
    # zero at ln P = a / (b - 5) = 8 / 3; the loss alone at ln P = a / b = 2.
    Ps = np.array([2, 3, 5, 8, 12, 18, 27, 40, 60])
    dE = 40.0 - 20.0 * np.log(Ps)
    pts = _points(Ps, dE, 10.0, 15.0)
    pred = tr.predicted_transitions(pts)
    # piecewise-linear interpolation of a function linear in ln P is exact
    assert pred["ln_P_llc"] == pytest.approx(8.0 / 3.0, rel=1e-12)
    assert pred["ln_P_loss"] == pytest.approx(2.0, rel=1e-12)
    assert pred["ln_P_laplace"] == pytest.approx(40.0 / 19.7, rel=1e-12)
    assert pred["slope"] == pytest.approx(-15.0, rel=1e-12)
    swapped = tr.predicted_transitions(pts, llc=np.array([p.llc for p in pts])[:, ::-1])
    assert swapped["ln_P_llc"] == pytest.approx(40.0 / 25.0, rel=1e-12)


def test_crossing_ignores_points_with_one_mode():
    Ps = np.array([2, 3, 5, 8, 12, 18, 27, 40, 60])
    pts = [
        p._replace(same_mode=True, same_marginal_mode=True)
        for p in _points(Ps, 40.0 - 20.0 * np.log(Ps), 1.0, 1.0)
    ]
    assert math.isnan(tr.predicted_transitions(pts)["ln_P_llc"])


def _decide(predicted, exact, alternatives, correction=0.05, stderr=0.02):
    return claims.free_energy_transition(
        "P*",
        predicted=predicted,
        exact=exact,
        alternatives=alternatives,
        correction=correction,
        stderr=stderr,
    ).verdict


def test_free_energy_transition_and_negative_controls():
    exact = math.log(20.0)
    # the LLC's crossing on the exact P*, the loss alone and the swapped LLC terms far from it
    assert _decide(exact + 0.03, exact, (exact - 0.8, exact + 0.9)) is Verdict.holds
    # negative control: the swapped decision (LLC terms exchanged) taken as the prediction
    assert _decide(exact + 0.9, exact, (exact + 0.03,)) is Verdict.refuted
    # negative control: lambda at the regular count for both phases = the loss alone's crossing
    assert _decide(exact - 0.8, exact, (exact + 0.03,)) is Verdict.refuted
    # an alternative as close as the prediction cannot be rejected
    assert _decide(exact, exact, (exact + 0.01,)) is Verdict.inconclusive
    # no crossing where both phases exist
    assert _decide(math.nan, exact, (exact,)) is Verdict.inconclusive
    # an unbounded correction can never decide for the prediction
    assert _decide(exact, exact, (exact + 5,), correction=math.inf) is Verdict.inconclusive
    with pytest.raises(ValueError):
        _decide(exact, exact, ())


def test_modes_are_finite_and_the_llc_loss_is_the_energy():
    # softmax L = 6, V = 3: both starts give finite posterior modes; n L_n at the mode equals
    # the posterior's joint energy (prior included) computed from the sufficient statistics.
    post = tr.posterior("softmax")
    X, Y = ch.copy_task(jax.random.key(3), 12, 6, 3)
    pool, copy = tr.modes(post, X, Y, 2 * math.log(6))
    for m in (pool, copy):
        assert np.all(np.isfinite(m.G)) and np.max(np.abs(m.G)) < 50
        assert np.isfinite(m.log_det)
    loss = tr.llc_loss(post)
    data = (X, Y, jnp.ones(12, X.dtype))
    nL = 12 * float(loss((jnp.asarray(copy.G), jnp.asarray(copy.W)), data))
    assert nL == pytest.approx(copy.energy, rel=1e-10)
    # a mode: the gradient of L_n vanishes there (to the optimiser's tolerance)
    g = jax.grad(loss)((jnp.asarray(copy.G), jnp.asarray(copy.W)), data)
    assert max(float(jnp.max(jnp.abs(a))) for a in g) < 1e-5
