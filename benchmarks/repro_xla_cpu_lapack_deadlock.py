"""Minimal reproducer: XLA CPU deadlocks when several CPU devices run batched LAPACK at once.

jax/jaxlib 0.10.2, CPU backend, ``jax_num_cpu_devices`` > 1. Each device runs, concurrently
(asynchronous dispatch), a jitted vmapped function made of a ``lax.fori_loop`` over a large
array followed by a batched ``jnp.linalg.eigvalsh``. With two devices on a two-core machine
the process hangs with no CPU use within a few repetitions; with one device it never does.

Native stacks of the hung process (``gdb -p PID -batch -ex "thread apply all bt"``): both
threads of XLA's intra-op pool ("tf_XLAEigen", one per core) sit in

    absl::BlockingCounter::Wait  <- jax::ParallelBatchMap  <- jax::EigenvalueDecompositionSymmetric
    <- lapack_dsyevd_ffi  <- xla::cpu::CustomCallThunk

jaxlib's LAPACK kernels split a batch into tasks on that same pool and block until they are
done. After the loop's parallel kernels, XLA's thunk executor runs the custom call *on a pool
thread*; once every pool thread is such a waiting caller, no thread is left to run the tasks.
Two devices on a two-thread pool are enough. The same holds for every batched LAPACK custom
call (eigh, cholesky, LU/solve, QR, SVD). Flags that do not help: ``OPENBLAS_NUM_THREADS=1``,
``--xla_cpu_multi_thread_eigen=false``, ``--xla_cpu_parallel_codegen_split_count=1``.
(Reports elsewhere say jaxlib 0.11 builds this parallel path out; it is not installable here.)

jaxdyn therefore spreads work over cores with one process per core (``jaxdyn run
--processes``), each with one CPU device, rather than with several devices in one process.

    python benchmarks/repro_xla_cpu_lapack_deadlock.py [--tries 3] [--timeout 60]

prints one JSON line: for 1 and 2 devices, how many of the tries completed and how many hung.
"""

import argparse
import json
import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import sys
    import jax
    jax.config.update("jax_num_cpu_devices", int(sys.argv[1]))
    import jax.numpy as jnp
    import numpy as np

    def member(a, m):
        x = jax.lax.fori_loop(0, 200, lambda i, x: jnp.tanh(x) * 0.5 + a, a)
        return jnp.linalg.eigvalsh(m @ m.T + x.sum())   # batched LAPACK after the loop

    program = jax.jit(jax.vmap(member))
    rng = np.random.default_rng(0)
    inputs = [jax.device_put((rng.normal(size=(2, 100_000)), rng.normal(size=(2, 64, 64))), d)
              for d in jax.devices()]
    for _ in range(20):
        jax.block_until_ready([program(*x) for x in inputs])  # all devices at once
    print("completed")
    """
)


def attempt(devices: int, timeout: float) -> str:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", PROGRAM, str(devices)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return "hung"
    return "completed" if "completed" in proc.stdout else f"error: {proc.stderr[-300:]}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    import jax

    report = {"reproducer": "xla_cpu_lapack_deadlock", "jax": jax.__version__}
    for devices in (1, 2):
        outcomes = [attempt(devices, args.timeout) for _ in range(args.tries)]
        report[f"devices_{devices}"] = {
            "completed": outcomes.count("completed"),
            "hung": outcomes.count("hung"),
            "other": [o for o in outcomes if o not in ("completed", "hung")],
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
