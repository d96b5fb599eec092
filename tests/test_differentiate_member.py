"""Gradients taken inside sweep members (the documented way to differentiate a sweep)."""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import differentiate_in_a_sweep as example  # noqa: E402


@pytest.mark.slow
@pytest.mark.heavy
def test_member_gradient_matches_the_closed_form_and_finite_differences():
    # closed form: d/dr x0 exp(-r t1) = -t1 x0 exp(-r t1); solver tolerance 1e-10
    assert example.main() < 1e-8
    rate, x0, t1, h = 0.7, 1.2, 1.5, 1e-5
    grad = jax.grad(lambda r: example.final_state(r, x0, t1)[0])(rate)
    fd = example.final_state(rate + h, x0, t1)[0] - example.final_state(rate - h, x0, t1)[0]
    # central difference: O(h^2) truncation plus solver error / h
    np.testing.assert_allclose(grad, fd / (2 * h), rtol=1e-6)
    assert float(jnp.abs(grad + t1 * x0 * jnp.exp(-rate * t1))) < 1e-8
