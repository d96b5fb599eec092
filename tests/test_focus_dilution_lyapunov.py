"""The rank-one manifold (focus_dilution.md, stages 3-4): the stall's split spectrum, the branch
of critical points as the asymmetry delta grows, and the orders of its eigenvalues."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn.gradflow as gf
from jaxdyn import Status, fit_power_law
from jaxdyn.gradflow import _markov


@pytest.fixture(scope="module")
def branch():
    c = jnp.asarray(_markov.default_direction(4))
    deltas = np.concatenate([[0.0], 0.001 * 2.0 ** np.arange(5)])
    pis = jax.vmap(lambda x: gf.symmetry_breaking_pi(0.75, x, c))(jnp.asarray(deltas))
    chains = jax.vmap(lambda p: gf.MarkovChain.paper(p, 0.5))(pis)
    model0 = gf.init_transformer(jax.random.key(0), 4, 1, 1, 1e-3)
    first = jax.tree_util.tree_map(lambda x: x[0], chains)
    stall = gf.rank_one_critical_point(model0, first, 5000.0)
    found = gf.track_rank_one_branch(stall.point.model, chains)
    return (
        deltas,
        jax.tree_util.tree_map(np.asarray, stall),
        jax.tree_util.tree_map(np.asarray, found),
    )


def _local_exponents(x, y):
    return np.diff(np.log(np.abs(y))) / np.diff(np.log(x))


def test_symmetric_stall_is_a_critical_point_with_a_zero_transverse_block(branch):
    _, stall, b = branch
    assert Status.code(stall.point.status) == Status.code(Status.successful)
    assert np.all(Status.code(b.point.status) == Status.code(Status.successful))
    assert float(stall.point.grad_norm) < 1e-12
    scale = np.max(np.abs(stall.tangential))
    np.testing.assert_allclose(stall.transverse, 0.0, atol=1e-8 * scale)
    # tangentially it is a minimum of the rank-one flow: no positive eigenvalue
    assert np.all(stall.tangential < 1e-8 * scale)


def test_transverse_block_is_plus_minus_the_singular_values_of_grad_M(branch):
    _, _, b = branch
    np.testing.assert_allclose(b.grad_Phi_norm, 0.0, atol=1e-12)
    sv = np.sort(np.concatenate([b.grad_M_singular_values, -b.grad_M_singular_values], 1))[:, ::-1]
    scale = np.max(np.abs(b.tangential))
    k = b.transverse.shape[1]
    top, bottom = b.transverse[:, :2], b.transverse[:, -2:]
    np.testing.assert_allclose(top, sv[:, :2], atol=1e-8 * scale)
    np.testing.assert_allclose(bottom, sv[:, -2:], atol=1e-8 * scale)
    assert k > 4 and np.all(np.abs(b.transverse[:, 2:-2]) < 1e-8 * scale)


def test_transverse_rate_is_linear_and_simple_tangential_eigenvalues_quadratic_in_delta(branch):
    deltas, _, b = branch
    x = deltas[1:]
    e = _local_exponents(x, b.transverse[1:, 0])
    # the local exponent's change over one refinement bounds its remaining error
    assert abs(e[0] - 1.0) <= abs(e[0] - e[1]), e
    tang = b.tangential[1:]
    steps = np.abs(np.diff(tang, axis=0))
    simple = [-2, -1]  # the two most stable eigenvalues are simple at delta = 0
    assert np.min(np.abs(np.diff(b.tangential[0]))[-2:]) > 1e-3
    for i in simple:
        # the local exponents oscillate by ~1e-3 around 2 (no monotone refinement to read an
        # error from): the power law's confidence interval over the branch is the test
        fit = fit_power_law(x[:-1], steps[:, i])
        assert fit.contains(2.0), (fit, _local_exponents(x[:-1], steps[:, i]))
