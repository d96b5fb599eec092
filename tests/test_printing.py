"""Results print their numbers and enumerations their public names (issue 45)."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn import Status
from jaxdyn._printing import SHOWN_ELEMENTS, AbstractResult


class _Result(AbstractResult):
    scalar: jax.Array
    small: jax.Array
    large: jax.Array
    status: Status
    batch: Status


def _example(seed):
    key = jax.random.key(seed)
    large = jax.random.normal(key, (SHOWN_ELEMENTS + 1 + seed, 3))
    large = large.at[0, 0].set(jnp.nan)
    flags = jax.random.bernoulli(key, 0.5, (7,))
    batch = jax.vmap(lambda f: Status.where(f, Status.successful, Status.blowup))(flags)
    return (
        _Result(jnp.asarray(0.1 + seed), jnp.arange(3.0) * seed, large, Status.steady_state, batch),
        large,
        flags,
    )


def test_a_result_prints_values_ranges_and_names():
    for seed in range(3):
        result, large, flags = _example(seed)
        text = repr(result)
        assert f"scalar={0.1 + seed!r}" in text.replace("np.float64(", "").replace(")", "")
        assert "small=[0., " in text
        finite = np.asarray(large)[np.isfinite(large)]
        assert f"in [{finite.min():.4g}, {finite.max():.4g}] (1 non-finite)" in text
        bits = large.dtype.itemsize * 8
        assert f"f{bits}[{large.shape[0]},3]" in text
        assert "status=Status.steady_state" in text
        n_ok = int(np.sum(flags))
        tally = [f"blowup {7 - n_ok}"] * (n_ok < 7) + [f"successful {n_ok}"] * (n_ok > 0)
        assert f"batch=Status[7]: {', '.join(tally)}" in text
        assert "f64[]" not in text and "_status" not in text


def test_a_traced_result_prints_without_error():
    result, _, _ = _example(0)
    seen = []
    jax.jit(lambda r: seen.append(repr(r)) or r.scalar)(result)
    assert "scalar=" in seen[0] and "[13,3]" in seen[0]
