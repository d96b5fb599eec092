"""Probe: where the beta sweep's time goes (``bench_pde_particles``' beta sweep, jaxdyn's
part), and what the formulation of the sphere velocity and XLA's vector width change.

The kernel is the sweep's shape without the engine: 1024 systems of 64 tokens on the sphere in
d = 8, 100 RK4 steps to t = 1, as ``lax.map`` over groups of 32 (the engine's ``vmap_width``)
of ``vmap`` of a ``fori_loop``, float32, one core, warm (compiled beforehand), best of 3.
Velocities ``P_x^perp sum_j softmax_j(beta <x_i, x_j>) x_j``:

- ``library``: ``SphereSoftmax(beta, d).velocity`` as jaxdyn writes it (``exp(beta G - beta)``,
  products, row sums as a product with ones, the tangent projection's row dots written out:
  ``jaxdyn.meanfield.fields._wrappers.row_dots``);
- ``reductions``: the same with ``jnp.sum`` reductions for the row sums and row dots (jaxdyn's
  form before);
- ``no_exp`` / ``no_projection``: ``library`` with one part removed (what it costs);
- ``scores_written_out``: ``library`` with the score matrix written as ``d`` broadcast
  products and sums instead of a matrix product, so that XLA fuses the scores into the
  ``exp``'s elementwise code (no product kernel and no score matrix between them);
- ``symmetric_blocks``: ``library`` with a quarter of the exponentials saved by the score
  matrix's symmetry: the tokens in two halves, three blocks of exponentials (``E_11``,
  ``E_12``, ``E_22``) and ``E_21 = E_12^T`` used through the products.

Each runs with the sweep engine's XLA options (``xla_options("cpu")``, which ask for 512-bit
vectors in XLA's fused code, ``xla_cpu_prefer_vector_width=512``) and with
``xla_cpu_prefer_vector_width=256`` instead (LLVM's default on AVX-512 CPUs: what the width
buys). By default XLA:CPU (jaxlib 0.10.2) runs the batched products as YNNPACK kernels
(``library_kernels`` in each row counts them); ``library`` also runs with the library fusions
changed (``LIBRARY_FUSIONS``: YNNPACK off, so XLA emits the products itself; YNNPACK for every
product and for elementwise code; XNNPACK or oneDNN instead). Then one run of each of
``library`` and ``reductions`` under the engine's options is profiled (``jax.profiler``) and
its time split by the kind of kernel (matrix products, the ``exp`` fusion, reductions, other
elementwise fusions). Prints one JSON object (it explains ``pde_particles.json``'s beta sweep;
no target).

    python benchmarks/probe_beta_sweep_kernel.py
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import re
import sys
import tempfile
import time

os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:1])

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from bench_pde_particles import handwritten_rk4  # noqa: E402  (this folder, as a script)

from jaxdyn.meanfield.fields import SphereSoftmax  # noqa: E402
from jaxdyn.meanfield.fields._wrappers import tangent_projection  # noqa: E402
from jaxdyn.sweep._programs import xla_options  # noqa: E402

SYSTEMS, N, D, STEPS, WIDTH = 1024, 64, 8, 100, 32
H = 1.0 / STEPS


def library(x, b):
    return SphereSoftmax(b, D).velocity(x, x)


def reductions(x, b):
    E = jnp.exp(b * (x @ x.T) - b)
    avg = (E @ x) / jnp.sum(E, -1, keepdims=True)
    return avg - jnp.sum(avg * x, -1, keepdims=True) / jnp.sum(x * x, -1, keepdims=True) * x


def no_exp(x, b):
    E = b * (x @ x.T) - b
    return tangent_projection((E @ x) / (E @ jnp.ones(N, x.dtype))[:, None], x)


def no_projection(x, b):
    E = jnp.exp(b * (x @ x.T) - b)
    return (E @ x) / (E @ jnp.ones(N, x.dtype))[:, None]


def scores_written_out(x, b):
    xt = x.T
    G = x[:, :1] * xt[:1, :]
    for k in range(1, D):
        G = G + x[:, k : k + 1] * xt[k : k + 1, :]
    E = jnp.exp(b * G - b)
    return tangent_projection((E @ x) / (E @ jnp.ones(N, x.dtype))[:, None], x)


def symmetric_blocks(x, b):
    half = N // 2
    first, second = x[:half], x[half:]
    e11, e22 = jnp.exp(b * (first @ first.T) - b), jnp.exp(b * (second @ second.T) - b)
    e12 = jnp.exp(b * (first @ second.T) - b)
    with_ones = jnp.concatenate([x, jnp.ones((N, 1), x.dtype)], 1)
    top = e11 @ with_ones[:half] + e12 @ with_ones[half:]
    bottom = e12.T @ with_ones[:half] + e22 @ with_ones[half:]
    sums = jnp.concatenate([top, bottom], 0)
    return tangent_projection(sums[:, :D] / sums[:, D:], x)


_DOT, _ELTWISE = "LIBRARY_FUSION_TYPE_DOT", "LIBRARY_FUSION_TYPE_ELTWISE"
_YNN, _XNN = "xla_cpu_experimental_ynn_fusion_type", "xla_cpu_experimental_xnn_fusion_type"
LIBRARY_FUSIONS = {  # XLA:CPU options of jaxlib 0.10.2 (DebugOptions), added to the engine's
    "ynnpack_off": {_YNN: ""},
    "ynnpack_dot": {_YNN: _DOT},
    "ynnpack_dot_eltwise": {_YNN: f"{_DOT},{_ELTWISE}"},
    "ynnpack_off_xnnpack_dot_eltwise": {_YNN: "", _XNN: f"{_DOT},{_ELTWISE}"},
    "ynnpack_off_onednn_dot_eltwise": {
        _YNN: "",
        "xla_cpu_experimental_onednn_fusion_type": f"{_DOT},{_ELTWISE}",
    },
}


def _library_kernels(program) -> dict[str, int]:
    """How many kernels of the optimised program each library fusion runs (by kind)."""
    found = re.findall(r"%(ynn|xnn|onednn)_fusion\S* = ", program.as_text())
    return dict(collections.Counter(found))


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


def _kernel_kinds(program) -> dict[str, str]:
    """Each fused kernel of the optimised program, by the kind of its root operation."""
    text = program.as_text()
    kinds = {}
    for name, comp in re.findall(r"%(\S+) = \S+ fusion\([^)]*\).*?calls=%([\w.\-]+)", text):
        body = re.search(r"\n%" + re.escape(comp) + r" .*?\n(.*?)\n}", text, re.S)
        root = re.search(r"ROOT %\S+ = \S+ (\w+)", body.group(1)).group(1) if body else "?"
        kinds[name] = {"dot": "matrix products", "exponential": "exp fusion"}.get(
            root, "reductions" if root == "reduce" else "other elementwise"
        )
    return kinds


def _profile(program, x, betas) -> dict[str, float]:
    """Seconds in each kind of kernel during one run (jax.profiler's trace of this process)."""
    kinds = _kernel_kinds(program)
    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder):
            jax.block_until_ready(program(x, betas))
        trace = next(pathlib.Path(folder).rglob("*.xplane.pb"))
        data = jax.profiler.ProfileData.from_file(str(trace))
        seconds = collections.Counter()
        for plane in data.planes:
            for line in plane.lines:
                for event in line.events:
                    if event.name in kinds:
                        seconds[kinds[event.name]] += event.duration_ns / 1e9
    return {kind: round(value, 4) for kind, value in seconds.most_common()}


def _best_of_3(program, x, betas):
    """The program's output and its best time of 3 runs after a warm-up run."""
    out = jax.block_until_ready(program(x, betas))
    times = []
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(program(x, betas))
        times.append(time.perf_counter() - start)
    return out, min(times)


def main() -> None:
    engine = xla_options("cpu")
    narrow = {**engine, "xla_cpu_prefer_vector_width": 256}
    x, betas = _inputs()
    reference = None
    rows = {}
    runs = [
        (label, options, velocity)
        for label, options in (("engine_options", engine), ("vector_width_256", narrow))
        for velocity in (
            library,
            reductions,
            no_exp,
            no_projection,
            scores_written_out,
            symmetric_blocks,
        )
    ]
    runs += [
        (f"library_fusion_{name}", {**engine, **extra}, library)
        for name, extra in LIBRARY_FUSIONS.items()
    ]
    for label, options, velocity in runs:
        program = _program(velocity, options)
        out, seconds = _best_of_3(program, x, betas)
        row = {"seconds": seconds, "library_kernels": _library_kernels(program)}
        if velocity not in (no_exp, no_projection):
            reference = out if reference is None else reference
            row["max_abs_gap_to_library"] = float(np.max(np.abs(out - reference)))
        rows[f"{label}/{velocity.__name__}"] = row
        print(f"{label}/{velocity.__name__}: {row['seconds']:.3f} s", file=sys.stderr)
    profiles = {
        name: _profile(_program(velocity, engine), x, betas)
        for name, velocity in (("library", library), ("reductions", reductions))
    }
    result = {
        "probe": "beta_sweep_kernel",
        "size": {"systems": SYSTEMS, "tokens": N, "d": D, "rk4_steps": STEPS, "width": WIDTH},
        "engine_options": engine,
        "load_average_1_5_15min": list(os.getloadavg()),
        **rows,
        "profiled_seconds_by_kernel_kind_engine_options": profiles,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
