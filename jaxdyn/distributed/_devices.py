"""One XLA device per CPU core, so that the sweep engine's sharding uses every core.

XLA runs one compiled program on one CPU device with little parallelism inside small
operations: one program of many small members (particle systems, SGLD chains, Gaussian ODEs)
uses one core of a multi-core CPU. The sweep engine runs several chunks at once on one device
where the program allows it (no LAPACK kernels: docs/scaling.md). Alternatively JAX can split
the host into several CPU devices (``jax_num_cpu_devices``, the option behind
``--xla_force_host_platform_device_count``); the sweep engine then shards members over them as
over GPUs. Results do not change: sweep members are bitwise identical for any device count
(``jaxdyn.sweep.run_sweep``).
"""

from __future__ import annotations

import os

import jax

from .._affinity import usable_cores
from .._compat import backends_are_initialized

__all__ = ["use_cpu_devices", "resolve_cpu_devices", "xla_cpu_setup"]

# jaxdyn's XLA:CPU options (xla_cpu_setup): each is false in jaxdyn and true in XLA by default
_EIGEN = "--xla_cpu_multi_thread_eigen"
_FUSION_EMITTERS = "--xla_cpu_use_fusion_emitters"


def resolve_cpu_devices(n: int | str | None) -> int | None:
    """``"auto"``: the cores this process may use; an int or digit string: that many; ``None``
    or ``""``: leave JAX's default. Raises ``ValueError`` (one line) on anything else."""
    if n is None or (isinstance(n, str) and n.strip() == ""):
        return None
    if isinstance(n, str) and n.strip().lower() == "auto":
        return usable_cores()
    try:
        count = int(n)
    except (TypeError, ValueError):
        raise ValueError(f"cpu devices must be a positive integer or 'auto', got {n!r}") from None
    if count < 1:
        raise ValueError(f"cpu devices must be a positive integer or 'auto', got {n!r}")
    return count


def use_cpu_devices(n: int | str = "auto") -> int:
    """Split the host CPU into ``n`` XLA devices (``"auto"``: one per available core).

    Must run before JAX starts its backends (before the first array is created); afterwards
    it only checks that the count already matches. An explicit
    ``--xla_force_host_platform_device_count`` in ``XLA_FLAGS`` wins over ``n``. Returns the
    number of CPU devices JAX will use.
    """
    count = resolve_cpu_devices(n)
    if count is None:
        raise ValueError("use_cpu_devices: n must be a positive integer or 'auto'")
    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return len(jax.devices("cpu"))
    if backends_are_initialized():
        have = len(jax.devices("cpu"))
        if have != count:
            raise RuntimeError(
                f"use_cpu_devices({n!r}): JAX already started with {have} CPU device(s); call "
                f"it before creating any array"
            )
        return have
    jax.config.update("jax_num_cpu_devices", count)
    return count


def xla_cpu_setup(*, elemental_emitters: bool = False) -> dict[str, bool]:
    """Set jaxdyn's XLA:CPU options in ``XLA_FLAGS`` (before JAX starts its backends).

    - ``--xla_cpu_multi_thread_eigen=false`` (always): run XLA's CPU matrix kernels on the
      thread that runs the program. XLA:CPU hands every dot and convolution to Eigen, which
      splits it over XLA's intra-op thread pool and waits for the pieces. For the small batched
      products of sweep members (4 x 4 covariances, 64-token attention, SGLD on small
      networks) the split and the wait cost more than the product: one step of
      ``benchmarks/bench_sweep_heterogeneous.py``'s member (a 4 x 4 covariance ODE, Tsit5)
      vectorised over 32 members took 157 us with the pool and 51 us without it on a 2-core
      machine, pinned to one core or not (docs/benchmarks.md). jaxdyn uses the cores with one
      process per core, which leaves the pool no idle core anyway. What it costs: a single
      process multiplying large matrices (thousands of rows) loses Eigen's multi-core
      speed-up.
    - ``--xla_cpu_use_fusion_emitters=false`` (with ``elemental_emitters=True``): generate the
      CPU code of fused elementwise operations with XLA's elemental emitters instead of its
      MLIR fusion emitters. They compile faster and run slower: on the main job
      (``jaxdyn reproduce --quick``, 2 cores, cold cache, two pairs of runs back to back) 169
      instead of 263 and 214 instead of 272 seconds of XLA compilation over the 23
      experiments, wall time 197 s instead of 249 s and 251 s instead of 260 s, every verdict
      the same. But particle systems run slower: one RK4 step of softmax attention on 256 or
      2,048 tokens (d = 64) 1.7-1.9x, a sweep of 1,024 64-token systems 3.2x, while a sweep
      of 256 ``simulate_gaussian`` solves at d = 5 runs as fast (``benchmarks/probe_emitters.py``,
      one core, warm). So they pay where compilation is most of the time: the command line
      uses them for ``--quick`` runs (and the tests, which are quick-sized), not at full
      size.

    The ``jaxdyn`` command line and its worker processes call it before JAX starts; call it at
    the top of a script that runs sweeps with :func:`jaxdyn.sweep.run_sweep`. An option
    ``XLA_FLAGS`` already sets is left as it is (your choice wins, e.g.
    ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=true`` keeps the pool). Nothing changes once JAX
    has started its backends. Returns ``{option: whether jaxdyn's value is in effect}`` for
    the options asked for. The options exist in the jaxlib versions ``pyproject.toml`` allows
    (XLA stops a process at an unknown flag): both names are in the XLA of jaxlib 0.7.0, its
    lower bound, and of 0.10.2.

    Args:
        elemental_emitters: also set ``--xla_cpu_use_fusion_emitters=false`` (for runs that
            are mostly compilation, or sweeps of small states; not for particle systems).
    """
    options = {_EIGEN: "false"}
    if elemental_emitters:
        options[_FUSION_EMITTERS] = "false"
    flags = os.environ.get("XLA_FLAGS", "")
    started = backends_are_initialized()
    in_effect = {}
    for option, value in options.items():
        chosen = [f.partition("=") for f in flags.split() if f.partition("=")[0] == option]
        if chosen:  # the last setting is the one XLA applies (a bare flag means true)
            in_effect[option.removeprefix("--")] = chosen[-1][2].lower() in ("false", "0")
        elif started:
            in_effect[option.removeprefix("--")] = False
        else:
            flags = f"{flags} {option}={value}".strip()
            in_effect[option.removeprefix("--")] = True
    if not started:
        os.environ["XLA_FLAGS"] = flags
    return in_effect
