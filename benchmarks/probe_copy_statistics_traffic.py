"""Whether copy-head chains are bound by reading the sufficient statistics, and what reading
them half as often would give (a probe: prints one JSON object, writes nothing).

The SGLD, MALA and mode-search chains of copy-head-sgld / -adam spend most of their time in the
O(L^2 V^2) contractions of :class:`jaxdyn.copyhead.CopyStatistics` (``N`` and ``NY``, each
L^2 V^2 numbers, 1 MB per member at L = 64, V = 8 in float32): ``CopyHeadPosterior.grad``
(SGLD's step) reads ``N`` twice and ``NY`` twice. For copy data (targets ``Y = shift(X)``,
cyclic) ``NY[m, l] = N[m, l - 1]``, so every contraction with ``NY`` is one with ``N`` under a
rolled coefficient and the four reads become two: ``N @ [W W^T, W]`` and ``N^T @ [A^T A,
roll(A)^T]``. This script checks that gradient (written here, not in the library) against
``CopyHeadPosterior.grad`` in float64 on random copy data (the same sums, reordered), then
times both in float32 vmapped over ``--members`` chains, as the experiments run them, with the
machine's read bandwidth measured beside them.

    taskset -c 0 python benchmarks/probe_copy_statistics_traffic.py   # one core
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

from jaxdyn import copyhead as ch  # noqa: E402
from jaxdyn.copyhead import _task


def shifted_grad(posterior, W, G, stats):
    """``posterior.grad`` for cyclic copy statistics, reading ``N`` twice and ``NY`` never."""
    L, V = stats.L, stats.V
    A, attention_vjp = jax.vjp(posterior.attention, G)
    N = stats.N.reshape(L * L, V * V)
    WWt = jnp.sum(W[:, None, :] * W[None, :, :], axis=-1)
    QR = N @ jnp.stack([WWt.reshape(V * V), W.reshape(V * V)], axis=1)  # one read of N
    Q = QR[:, 0].reshape(L, L)
    R = jnp.roll(QR[:, 1].reshape(L, L).T, 1, axis=0)  # R[l, m] = (N W)[m, l - 1]
    ATA = jnp.sum(A[:, :, None] * A[:, None, :], axis=0)
    coefficients = jnp.stack([ATA.reshape(L * L), jnp.roll(A, -1, axis=0).T.reshape(L * L)], axis=1)
    MB = N.T @ coefficients  # one read of N: M and B (B's weight on N[m, k] is A[k + 1, m])
    M, B = MB[:, 0].reshape(V, V), MB[:, 1].reshape(V, V)
    T = posterior.temperature
    grad_A = (A @ Q - R) / T
    grad_W = (jnp.sum(M[:, :, None] * W[None, :, :], axis=1) - B) / T + V * W / posterior.sigma_w2
    (grad_G,) = attention_vjp(grad_A.astype(A.dtype))
    return grad_W.astype(W.dtype), (grad_G + G / posterior.sigma_g2).astype(G.dtype)


def per_step_seconds(step, x0, steps: int) -> float:
    @jax.jit
    def chain(x):
        return jax.lax.fori_loop(0, steps, lambda i, x: step(x), x)

    jax.block_until_ready(chain(x0))
    t = time.perf_counter()
    jax.block_until_ready(chain(x0))
    return (time.perf_counter() - t) / steps


def read_bandwidth_gb_s() -> float:
    x = jnp.ones(256 * 1024 * 1024 // 4, jnp.float32)  # 256 MB: no cache holds it
    total = jax.jit(jnp.sum)
    total(x).block_until_ready()
    t = time.perf_counter()
    for _ in range(5):
        total(x).block_until_ready()
    return 5 * x.nbytes / (time.perf_counter() - t) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--L", type=int, default=64)
    parser.add_argument("--V", type=int, default=8)
    parser.add_argument("--P", type=int, default=128)
    parser.add_argument("--members", type=int, default=36)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    L, V = args.L, args.V
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead(), 1.0, 1.0, 1.0)

    # Correctness in float64: random copy data, W and G.
    keys = jax.random.split(jax.random.key(0), 4)
    X, Y = ch.copy_task(keys[0], args.P, L, V)
    stats = ch.copy_statistics(X, Y)
    W = jax.random.normal(keys[1], (V, V))
    G = 2.0 * jax.random.normal(keys[2], (L, L))
    pairs = zip(posterior.grad(W, G, stats), shifted_grad(posterior, W, G, stats), strict=True)
    error = max(float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(a))) for a, b in pairs)

    # Timing in float32, vmapped over members (each its own data), as the chains run.
    def member_stats(k):
        Xk, Yk = ch.copy_task(k, args.P, L, V, dtype=jnp.float32)
        return ch.copy_statistics(Xk, Yk)

    batch = jax.vmap(member_stats)(jax.random.split(keys[3], args.members))
    low = _task.cast_floating(posterior, jnp.float32)
    n = args.members
    WG = (jnp.zeros((n, V, V), jnp.float32), jnp.zeros((n, L, L), jnp.float32))

    def stepper(grad):
        def step(wg):
            gw, gg = jax.vmap(lambda w, g, s: grad(low, w, g, s))(wg[0], wg[1], batch)
            return (wg[0] - 1e-4 * gw, wg[1] - 1e-4 * gg)

        return step

    times = {
        "sgld_step_ms_library": 1e3
        * per_step_seconds(stepper(lambda p, w, g, s: p.grad(w, g, s)), WG, args.steps),
        "sgld_step_ms_shifted": 1e3 * per_step_seconds(stepper(shifted_grad), WG, args.steps),
    }
    statistics_bytes = 2 * args.members * (L * L * V * V) * 4
    print(
        json.dumps(
            {
                "L": L,
                "V": V,
                "members": args.members,
                "max_relative_difference_float64": error,
                **times,
                "sgld_speedup": times["sgld_step_ms_library"] / times["sgld_step_ms_shifted"],
                "statistics_MB_read_per_sgld_step_library": 2 * statistics_bytes / 1e6,
                "statistics_MB_read_per_sgld_step_shifted": statistics_bytes / 1e6,
                "read_bandwidth_GB_s": read_bandwidth_gb_s(),
                "jax_threads_note": "run under taskset -c 0 for one core",
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
