"""Probe: where the beta sweep's time goes (``bench_pde_particles``' beta sweep, jaxdyn's
part), and what XLA options and formulations of the sphere velocity change.

The kernel is the sweep's shape without the engine: 1024 systems of 64 tokens on the sphere in
d = 8, 100 RK4 steps to t = 1, as ``lax.map`` over groups of 32 (the engine's ``vmap_width``)
of ``vmap`` of a ``fori_loop``, float32, one core, warm (compiled beforehand), best of 3.
Variants of the velocity ``P_x^perp sum_j softmax_j(beta <x_i, x_j>) x_j``:

- ``bounded``: ``SphereSoftmax``'s (``exp(beta G - beta)``, products, then normalised);
- ``no_exp`` / ``no_division`` / ``no_projection``: one part removed (what it costs);
- ``diag_matvec``: ``|x|^2`` read off the diagonal of ``G = x x^T`` and the radial dot as a
  matrix-vector product.

Each runs with the engine's options and with ``xla_cpu_prefer_vector_width=512``. Prints one
JSON object (not a benchmark with a target: it explains ``pde_particles.json``'s beta sweep).

    python benchmarks/probe_beta_sweep_kernel.py
"""

from __future__ import annotations

import json
import os
import sys
import time

os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:1])

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from bench_pde_particles import handwritten_rk4  # noqa: E402  (this folder, as a script)

SYSTEMS, N, D, STEPS, WIDTH = 1024, 64, 8, 100, 32
H = 1.0 / STEPS


def _projection(avg, x):
    return avg - jnp.sum(avg * x, -1, keepdims=True) / jnp.sum(x * x, -1, keepdims=True) * x


def bounded(x, b):
    E = jnp.exp(b * (x @ x.T) - b)
    return _projection((E @ x) / jnp.sum(E, -1, keepdims=True), x)


def no_exp(x, b):
    E = b * (x @ x.T) - b
    return _projection((E @ x) / jnp.sum(E, -1, keepdims=True), x)


def no_division(x, b):
    E = jnp.exp(b * (x @ x.T) - b)
    return _projection(E @ x, x)


def no_projection(x, b):
    E = jnp.exp(b * (x @ x.T) - b)
    return (E @ x) / jnp.sum(E, -1, keepdims=True)


def diag_matvec(x, b):
    G = x @ x.T
    E = jnp.exp(b * G - b)
    avg = (E @ x) / jnp.sum(E, -1, keepdims=True)
    ones = jnp.ones((D,), x.dtype)
    return avg - ((avg * x) @ ones / jnp.diagonal(G))[:, None] * x


def _program(velocity, options):
    one = handwritten_rk4(velocity, H, STEPS)

    def sweep(x, b):
        groups = (x.reshape(-1, WIDTH, N, D), b.reshape(-1, WIDTH))
        return jax.lax.map(lambda g: jax.vmap(one)(*g), groups).reshape(x.shape)

    return jax.jit(sweep).lower(*_inputs()).compile(compiler_options=options)


def _inputs():
    x = np.random.default_rng(0).normal(size=(SYSTEMS, N, D)).astype(np.float32)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    betas = np.repeat(np.geomspace(0.5, 8.0, 16).astype(np.float32), SYSTEMS // 16)
    return x, betas


def main() -> None:
    engine = {"xla_cpu_multi_thread_eigen": False}
    wide = {**engine, "xla_cpu_prefer_vector_width": 512}
    x, betas = _inputs()
    reference = None
    rows = {}
    for label, options in (("engine_options", engine), ("vector_width_512", wide)):
        for velocity in (bounded, no_exp, no_division, no_projection, diag_matvec):
            program = _program(velocity, options)
            out = jax.block_until_ready(program(x, betas))
            times = []
            for _ in range(3):
                start = time.perf_counter()
                jax.block_until_ready(program(x, betas))
                times.append(time.perf_counter() - start)
            row = {"seconds": min(times)}
            if velocity in (bounded, diag_matvec):
                reference = out if reference is None else reference
                row["max_abs_gap_to_bounded"] = float(np.max(np.abs(out - reference)))
            rows[f"{label}/{velocity.__name__}"] = row
            print(f"{label}/{velocity.__name__}: {row['seconds']:.3f} s", file=sys.stderr)
    result = {
        "probe": "beta_sweep_kernel",
        "size": {"systems": SYSTEMS, "tokens": N, "d": D, "rk4_steps": STEPS, "width": WIDTH},
        "load_average_1_5_15min": list(os.getloadavg()),
        **rows,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
