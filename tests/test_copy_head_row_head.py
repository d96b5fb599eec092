"""A head of your own at any L: a row-statistics head (the mixing head 0.8 softmax(G) + 0.2 / L)
gets a closed-form reduced model from its one method, equal to the dense population action;
its P* at L = 2^8..2^40 and its asymptotic law; and ``locate_transition``'s whole coexistence
window against spinodals found by brute force on an independent reduced action."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn.copyhead as ch
from jaxdyn.copyhead import _phase, _task


class Mixing(ch.AbstractRowHead):
    """A = 0.8 row-softmax(G) + 0.2 / L: a mixture with uniform attention."""

    def row_weights(self, values, counts):
        L = jnp.sum(counts)
        soft = jnp.exp(values - jax.scipy.special.logsumexp(values, b=counts))
        return 0.8 * soft + 0.2 / L


class Sparsemax(ch.AbstractRowHead):
    """sparsemax(G / 0.5) with multiplicities: the threshold t with sum_j c_j (v_j - t)_+ = 1."""

    def row_weights(self, values, counts):
        v = values / 0.5
        order = jnp.argsort(-v)
        vs, cs = v[order], counts[order]
        cum_c, cum_cv = jnp.cumsum(cs), jnp.cumsum(cs * vs)
        t = (cum_cv - 1.0) / cum_c  # threshold if the first k distinct values are in the support
        support = vs > t
        k = jnp.max(jnp.where(support, jnp.arange(v.size), 0))
        return jnp.maximum(v - t[k], 0.0)


def _dense(head, L, V):
    direction = (_task.shift_matrix(L) - 1.0 / L)[None]  # row-centred copy scores
    return ch.HeadReduced(head, direction, V=V, lo=-1.0, hi=2 * np.log(L) + 8, grid_points=401)


@pytest.mark.parametrize("head", [Mixing(), Sparsemax()])
def test_row_weights_give_the_dense_head_rows(head):
    G = jax.random.normal(jax.random.key(0), (7, 7))
    A = head.weights(G)
    assert np.allclose(np.sum(A, axis=-1), 1.0, atol=1e-12)
    # two-level rows with multiplicities equal the dense row
    row = jnp.array([1.3] + [-0.2] * 6)
    dense = head.row_weights(row, jnp.ones(7))
    reduced = head.row_weights(jnp.array([1.3, -0.2]), jnp.array([1.0, 6.0]))
    assert np.allclose(dense[:2], reduced, atol=1e-12)


@pytest.mark.parametrize("head", [Mixing(), Sparsemax()])
@pytest.mark.parametrize("L", [16, 32, 64])
def test_closed_form_action_equals_the_dense_population_action(head, L):
    V = 8
    closed, dense = ch.RowHeadReduced(head, L=L, V=V), _dense(head, L, V)
    for P in (3.0, 25.0, 400.0):
        for delta in (-0.5, 0.7, 3.0, 2 * np.log(L)):
            x = jnp.array([delta])
            a, b = float(closed.action(x, P)), float(dense.action(x, P))
            assert abs(a - b) < 1e-10 * (1 + abs(b)), (L, P, delta, a, b)
            assert abs(float(closed.order(x)["a_G"] - dense.order(x)["c_G"])) < 1e-12


_SLOW = [pytest.mark.slow, pytest.mark.heavy]


@pytest.mark.parametrize("L", [16, pytest.param(32, marks=_SLOW), pytest.param(64, marks=_SLOW)])
def test_mixing_P_star_closed_form_equals_dense(L):
    """P* (sequences) at equal action of the two minima, bisected 40 times in ln P on the
    closed-form model and on the dense one (Newton on each model's own action) from the same
    coexisting starts; equal within the solvers' tolerance."""
    V = 8
    closed, dense = ch.RowHeadReduced(Mixing(), L=L, V=V), _dense(Mixing(), L, V)
    diagram = ch.phase_diagram(closed, np.geomspace(15.0, 60.0, 200))
    assert diagram.coexistence.any()
    stars = [_phase.first_order_point(m, diagram) for m in (closed, dense)]
    assert 15.0 < stars[0] < 60.0
    assert abs(np.log(stars[0] / stars[1])) < 1e-8, stars


def _independent_spinodals(p_of, L, V, P_lo, P_hi):
    """Brute force on an independent reduced action (numpy, the page's population formula):
    the P range where the action on a fine Delta grid has two local minima, each end bisected
    in ln P on the count of minima."""
    delta = np.linspace(-1.0, 2 * np.log(L) + 8, 40001)
    p, q = p_of(delta)
    r = p + (L - 1) * q
    frob2, rowsum2, tau, total = L * (p**2 + (L - 1) * q**2), L * r**2, L * p, L * r
    kappa, T = 1.0 / V, 1.0

    def count(P):
        m_perp, m_par = P * frob2 / V, P * rowsum2 / V
        b_perp, b_par = P * tau / V, P * total / V
        S = (
            (L - 1) * delta**2 / 2
            + 0.5 * V * ((V - 1) * np.log1p(kappa * m_perp / T) + np.log1p(kappa * m_par / T))
            - ((V - 1) * b_perp**2 / (T / kappa + m_perp) + b_par**2 / (T / kappa + m_par))
            / (2 * T)
        )
        return int(np.sum((S[1:-1] < S[:-2]) & (S[1:-1] < S[2:])))

    Ps = np.geomspace(P_lo, P_hi, 400)
    two = np.array([count(P) >= 2 for P in Ps])
    i, j = np.flatnonzero(two)[[0, -1]]
    assert 0 < i and j < Ps.size - 1, "window not inside the scan"

    def bisect(inside, outside):
        for _ in range(40):
            mid = np.sqrt(inside * outside)
            inside, outside = (mid, outside) if count(mid) >= 2 else (inside, mid)
        return np.sqrt(inside * outside)

    return bisect(Ps[i], Ps[i - 1]), bisect(Ps[j], Ps[j + 1])


def _softmax_p(L):
    def p_of(delta):
        p = 1.0 / (1.0 + (L - 1) * np.exp(-delta))
        return p, (1 - p) / (L - 1)

    return p_of


def _mixing_p(L):
    def p_of(delta):
        p, q = _softmax_p(L)(delta)
        return 0.8 * p + 0.2 / L, 0.8 * q + 0.2 / L

    return p_of


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.parametrize(
    "model, p_of",
    [
        (ch.SoftmaxReduced(L=64, V=8), _softmax_p(64)),
        (ch.RowHeadReduced(Mixing(), L=64, V=8), _mixing_p(64)),
    ],
    ids=["softmax", "mixing"],
)
def test_locate_transition_returns_the_whole_coexistence_window(model, p_of):
    """L = 64, V = 8: the window from a narrow search range (5..200, which clips it without
    the widening) equals the independent spinodals within 1%."""
    _, _, info = ch.locate_transition(model, 5.0, 200.0, 60)
    assert info["transition_order"] is ch.TransitionOrder.first and not info["clipped"]
    lower, upper = _independent_spinodals(p_of, 64, 8, 1.0, 1e3)
    assert abs(info["coexistence"][0] / lower - 1) < 0.01, (info["coexistence"], lower, upper)
    assert abs(info["coexistence"][1] / upper - 1) < 0.01, (info["coexistence"], lower, upper)


@pytest.mark.slow
@pytest.mark.heavy
def test_mixing_head_P_star_up_to_L_2_40_follows_L_ln2_L_asymptotically():
    """P*_seq of the mixing head's closed-form model at L = 2^8..2^40 (V = 4); its local
    exponent in ln ln L extrapolated to L -> infinity (claims.asymptotic_law) against 2
    (P* ~ L ln^2 L supervised tokens) and the alternative 1 (L ln L)."""
    Ls = 2.0 ** np.arange(8, 41, 4)
    P = np.array(
        [
            ch.locate_transition(ch.RowHeadReduced(Mixing(), L=L, V=4), 0.05, 1e6, 30)[2]["P_star"]
            for L in Ls
        ]
    )
    m = np.diff(np.log(P)) / np.diff(np.log(np.log(Ls)))
    ev = ch.claims.asymptotic_law("mixing P* ~ L ln^2 L", np.sqrt(Ls[1:] * Ls[:-1]), m, 2.0, 1.0)
    assert ev.holds, ev
    assert m[-1] < 1.85  # the local exponent alone, at L = 2^40, is still far from 2
