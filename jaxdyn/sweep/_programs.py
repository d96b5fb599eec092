"""Compiled chunk programs: one member function, vmapped in fixed-width groups, over devices."""

from __future__ import annotations

import concurrent.futures
import functools
import math
import re
import threading
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from .._affinity import usable_cores
from .._status import Status, as_status, item_code, mark_nonfinite

SWEEP_AXIS = "sweep"


_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_COUNTERS: list[CompileCounter] = []
_LISTENING = threading.Lock()
_listener_installed = False


def _on_event_duration(event: str, duration: float, **kwargs) -> None:
    if event == _COMPILE_EVENT and "_sweep_" in str(kwargs.get("fun_name", "")):
        with _LISTENING:  # compilations may end in a ConcurrentCompiler's threads
            for counter in _COUNTERS:
                counter.count += 1


class CompileCounter:
    """Counts the sweep programs XLA compiles (or loads from the persistent compilation
    cache) inside a ``with`` block, from jax's public monitoring events."""

    def __enter__(self) -> CompileCounter:
        global _listener_installed
        with _LISTENING:
            if not _listener_installed:
                jax.monitoring.register_event_duration_secs_listener(_on_event_duration)
                _listener_installed = True
            self.count = 0
            _COUNTERS.append(self)
        return self

    def __exit__(self, *exc) -> None:
        with _LISTENING:
            _COUNTERS.remove(self)


class ConcurrentCompiler:
    """Compiles lowered programs (``jax.stages.Lowered``) in threads, one per usable core.

    XLA releases Python's lock while it compiles, so the engine lowers a chunk's programs one
    after another and hands each to this compiler at once: the programs compile concurrently
    with each other and with the tracing of the next one. With one core (or ``threads=1``)
    each program is compiled when submitted, as a plain ``lowered.compile()``. Used as a
    ``with`` block, which waits for every submitted compilation (so that a
    :class:`CompileCounter` around it counts them all). Everything it compiles is waited for
    before the engine runs a program, so results never depend on the number of threads.
    """

    def __init__(self, threads: int | None = None):
        threads = usable_cores() if threads is None else threads
        self.concurrent = threads > 1
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="jaxdyn-compile")
            if self.concurrent
            else None
        )

    def submit(self, lowered: jax.stages.Lowered, options: dict) -> Callable[[], Any]:
        """Start compiling ``lowered`` with XLA ``options``; returns a function that waits for
        the ``jax.stages.Compiled`` (raising the compiler's error, if any)."""
        if self._pool is None:
            compiled = lowered.compile(compiler_options=options)
            return lambda: compiled
        return self._pool.submit(lowered.compile, compiler_options=options).result

    def __enter__(self) -> ConcurrentCompiler:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


# Lowering a member under shard_map fails where the single-device program works in two known
# cases on this stack, both met by diffrax's event root finding (optimistix -> lineax):
# lineax's ``ravel_vector`` compares the sharding of a vector with its structure (lineax issue
# #185), and equinox's closure conversion compares shardings (diffrax issue #765;
# equinox PR #1261 fixes it; jaxdyn does not patch equinox, so such a member is dispatched per
# device until equinox releases the fix). Any other error is the member's own and is raised.
_SHARD_MAP_FAILURES = (
    "pytree does not match out_structure",
    "Closure-converted function called with different dynamic arguments",
)


def shard_map_unsupported(err: BaseException) -> bool:
    """Whether ``err`` is one of the known shard_map failures of library internals."""
    return isinstance(err, ValueError) and any(m in str(err) for m in _SHARD_MAP_FAILURES)


def _member_outputs(fn: Callable, params, seed):
    """One member: ``fn(params, key)`` -> ``(outputs without status, int32 status code)``."""
    return outputs_and_status(fn(params, jax.random.key(seed)))


def outputs_and_status(out):
    """A member's output dict -> ``(outputs without status, int32 status code)``.

    A member that returns a ``"status"`` decides its own outcome: its NaN or inf outputs
    ("not reached", "never") are kept as they are. A member without one is ``nonfinite`` when
    an output holds a NaN."""
    if not isinstance(out, dict):
        raise TypeError(
            f"a sweep member function must return a dict of arrays, got {type(out).__name__}"
        )
    out = dict(out)
    status = out.pop("status", None)
    status = mark_nonfinite(Status.successful, out) if status is None else as_status(status)
    return out, jnp.asarray(item_code(status), jnp.int32)


@functools.partial(jax.jit, static_argnums=0)
def member_group(fn: Callable, params, seeds):
    """One vmapped group of a plain sweep's members: ``(outputs, status codes)``.

    A jitted function of its own, so that every program of the same member function and group
    width (each chunk size, the output shapes, the engine's search of the member for a solve,
    :func:`jaxdyn.sweep._diffeq.plan_member`) shares one trace of the member: XLA inlines it
    into each program."""
    return jax.vmap(lambda p, s: _member_outputs(fn, p, s))(params, seeds)


def batched_member_program(fn: Callable, vmap_width: int) -> Callable:
    """``(params, seeds) -> (outputs, status codes)`` for a batch of members on one device.

    Members are vectorised in groups of a fixed width (:func:`member_group`) and the groups
    are looped over with ``lax.map``. XLA's vectorised code can round differently for
    different batch widths, so a fixed width keeps every member's result bitwise independent
    of the chunk size and of the number of devices.
    """
    return in_groups(functools.partial(member_group, fn), vmap_width)


def grouped(fn: Callable, vmap_width: int) -> Callable:
    """``fn`` of one member, applied to a leading member axis in vmapped groups of
    ``vmap_width`` (a ``lax.map`` over the groups when there are several)."""
    return in_groups(jax.vmap(fn), vmap_width)


def in_groups(vmapped: Callable, vmap_width: int) -> Callable:
    """``vmapped`` (a function of one group of ``vmap_width`` members) applied to a leading
    member axis: directly for one group, a ``lax.map`` over the groups for several."""

    def batched(*args):
        n = jax.tree.leaves(args)[0].shape[0]
        if n == vmap_width:
            return vmapped(*args)
        group = lambda x: x.reshape((n // vmap_width, vmap_width) + x.shape[1:])
        out = jax.lax.map(lambda a: vmapped(*a), jax.tree.map(group, args))
        return jax.tree.map(lambda x: x.reshape((n,) + x.shape[2:]), out)

    return batched


def plain_out_shape(fn: Callable, vmap_width: int, params, seeds):
    """Shapes of one chunk's ``(outputs, status)``, without compiling anything."""
    return jax.eval_shape(batched_member_program(fn, vmap_width), params, seeds)


def effective_vmap_width(vmap_width: int, n_members: int) -> int:
    """The vector width actually used: ``vmap_width``, or less for grids smaller than it.

    Depends on the grid size only (never on devices or chunk size), so results do not either.
    """
    return max(1, min(int(vmap_width), 1 << max(0, math.ceil(math.log2(max(n_members, 1))))))


def xla_options(platform: str, *, small: bool = False) -> dict[str, bool | int]:
    """The XLA options the engine compiles its programs with (``jax.jit``'s
    ``compiler_options``: per program, no ``XLA_FLAGS``, nothing set process-wide).

    On CPUs:

    - ``xla_cpu_multi_thread_eigen=False``: XLA:CPU hands every dot to Eigen, which splits it
      over its intra-op thread pool and waits for the pieces. For the small batched products
      of sweep members (covariances of a few dimensions, short token sequences) the split and
      the wait cost far more than the product (benchmarks/results/pde_ranks.json); the
      engine uses the cores with devices and processes instead.
    - ``xla_cpu_prefer_vector_width=512``: on CPUs with 512-bit vectors (AVX-512), XLA's
      fused loops use them instead of LLVM's default of 256 bits, twice the numbers per
      instruction. The exponentials of score matrices are most of a particle sweep besides
      its products: the beta sweep of ``benchmarks/bench_pde_particles.py`` takes a tenth
      to a fifth less time (``benchmarks/probe_beta_sweep_kernel.py``), for a few percent more
      compilation over the main job. It only matters where the CPU has 512-bit vectors.
    - ``xla_cpu_use_fusion_emitters=False`` for ``small`` programs (segmented members whose
      state has at most ``SMALL_STATE`` numbers): XLA's elemental emitters compile faster and
      run such members as fast; larger states (particle systems) keep the fusion emitters,
      which run them faster.

    Other platforms: XLA's defaults.
    """
    if platform != "cpu":
        return {}
    options = {"xla_cpu_multi_thread_eigen": False, "xla_cpu_prefer_vector_width": 512}
    if small:
        options["xla_cpu_use_fusion_emitters"] = False
    return options


SMALL_STATE = 4096  # numbers in one member's state: below, the elemental emitters pay


def put_global(host_array: np.ndarray, sharding) -> jax.Array:
    """Place a host array sharded over the sweep axis; works unchanged across processes."""
    return jax.make_array_from_callback(host_array.shape, sharding, lambda index: host_array[index])


# jax.monitoring events of the sweep engine (read by jaxdyn.runs' profile, or any listener)
SWEEP_EVENT = "/jaxdyn/sweep/duration"  # one run_sweep, wall time
DEVICE_EVENT = "/jaxdyn/sweep/device_duration"  # in compiled sweep programs, or waiting for them
HOST_SYNC_EVENT = "/jaxdyn/sweep/host_sync"  # the host waited for device results


def to_host(tree):
    """This process's arrays on the host (sweep programs only use local devices); each call
    is a host round trip (``HOST_SYNC_EVENT``)."""
    jax.monitoring.record_event(HOST_SYNC_EVENT)
    return jax.tree_util.tree_map(np.asarray, jax.device_get(tree))


class _ByIdentity:
    """An unhashable member (one holding arrays) as a static argument of ``jax.jit``: equal to
    itself only, so jit's cache serves repeated sweeps of the same object."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)


def static_member(fn):
    """``fn`` itself when hashable (equal members share jit's cache), else by identity."""
    try:
        hash(fn)
    except TypeError:
        return _ByIdentity(fn)
    return fn


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _sweep_chunk(fn, width, mesh, params, seeds):
    """One chunk of a plain sweep: members vmapped in groups of ``width``; over ``mesh`` (when
    it has several devices) a ``jax.shard_map`` along the ``sweep`` axis."""
    batched = batched_member_program(fn, width)
    if mesh is None:
        return batched(params, seeds)
    # check_vma=False: diffrax/optimistix internals are not annotated for varying axes.
    return jax.shard_map(
        batched,
        mesh=mesh,
        in_specs=(PartitionSpec(SWEEP_AXIS), PartitionSpec(SWEEP_AXIS)),
        out_specs=PartitionSpec(SWEEP_AXIS),
        check_vma=False,
    )(params, seeds)


def _unsharded(out_info):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), out_info)


class ShardedProgram:
    """One executable for the whole chunk: ``jax.shard_map`` over the ``sweep`` mesh axis.

    On a single device the shard_map is dropped (a plain jit of the same batched program).
    The executable comes from jit's own cache: a second sweep of the same member, width,
    devices and input shapes traces and compiles nothing.
    """

    mode = "shard_map"

    def __init__(self, fn, mesh, width, params, seeds):
        self.n_devices = mesh.devices.size
        self.sharding = NamedSharding(mesh, PartitionSpec(SWEEP_AXIS))
        self.static = (static_member(fn), width, None if self.n_devices == 1 else mesh)
        # On one device the program is lowered for that device alone: its groups then see the
        # avals that member_group was traced with when the engine searched the member for a
        # solve, so jit's cache serves them (a mesh's sharding would trace the member again).
        lowered_sharding = (
            self.sharding if self.n_devices > 1 else SingleDeviceSharding(mesh.devices.flat[0])
        )
        put = lambda x: jax.ShapeDtypeStruct(
            np.shape(x), np.asarray(x).dtype, sharding=lowered_sharding
        )  # noqa: E731
        lowered = _sweep_chunk.lower(*self.static, jax.tree.map(put, params), put(seeds))
        platform = mesh.devices.flat[0].platform
        self.compiled = lowered.compile(compiler_options=xla_options(platform))
        self.bytes_per_device = compiled_bytes(self.compiled) / self.n_devices
        self.concurrent = self.n_devices == 1 and runs_concurrently(self.compiled)
        self.out_shape = _unsharded(lowered.out_info)

    def dispatch(self, params, seeds):
        put = lambda x: put_global(x, self.sharding)
        return self.compiled({k: put(v) for k, v in params.items()}, put(seeds))

    def fetch(self, handle):
        return to_host(handle)


class PerDeviceProgram:
    """Each device runs its slice of the chunk with the single-device program, compiled once
    per device and dispatched asynchronously (devices still work in parallel; results are
    identical). Used when a member cannot be lowered under ``shard_map``
    (:func:`compile_program`)."""

    mode = "per_device"

    def __init__(self, fn, devices, width, params, seeds):
        self.devices = list(devices)
        self.n_devices = len(self.devices)
        self.static = (static_member(fn), width, None)
        self.compiled = []
        for device, (p, s) in zip(self.devices, self._split(params, seeds), strict=True):
            p, s = jax.device_put((p, s), device)
            lowered = _sweep_chunk.lower(*self.static, p, s)
            self.compiled.append(lowered.compile(compiler_options=xla_options(device.platform)))
        self.bytes_per_device = compiled_bytes(self.compiled[0])
        self.concurrent = False  # several devices already run at once
        self.out_shape = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct((seeds.shape[0],) + x.shape[1:], x.dtype),
            _unsharded(lowered.out_info),
        )

    def _split(self, params, seeds):
        n = seeds.shape[0] // self.n_devices
        return [
            ({k: v[d * n : (d + 1) * n] for k, v in params.items()}, seeds[d * n : (d + 1) * n])
            for d in range(self.n_devices)
        ]

    def dispatch(self, params, seeds):
        handles = []
        parts = self._split(params, seeds)
        for device, compiled, (p, s) in zip(self.devices, self.compiled, parts, strict=True):
            handles.append(compiled(*jax.device_put((p, s), device)))
        return handles

    def fetch(self, handles):
        hosts = [to_host(h) for h in handles]
        return jax.tree.map(lambda *xs: np.concatenate(xs), *hosts)


def compile_program(fn, mesh, width, params, seeds, log=lambda msg: None):
    """The chunk program: ``(program, compilations done now)``.

    Sharded over the mesh; per device instead when lowering under ``shard_map`` meets a known
    failure of library internals (:func:`shard_map_unsupported`).
    """
    with CompileCounter() as counter:
        try:
            program = ShardedProgram(fn, mesh, width, params, seeds)
        except ValueError as err:
            if mesh.devices.size == 1 or not shard_map_unsupported(err):
                raise
            message = (
                f"shard_map could not compile this member function ({type(err).__name__}: "
                f"{str(err).splitlines()[0][:120]}); falling back to per-device dispatch"
            )
            log(message)
            warnings.warn(message, RuntimeWarning, stacklevel=3)
            program = PerDeviceProgram(fn, list(mesh.devices.flat), width, params, seeds)
    return program, counter.count


# Custom calls that may run in several programs at once: JAX's host callbacks (pure_callback,
# io_callback, jax.debug, equinox's runtime errors) take Python's lock and return.
_CONCURRENT_CUSTOM_CALLS = frozenset({"xla_ffi_python_cpu_callback", "xla_python_cpu_callback"})


def runs_concurrently(compiled: jax.stages.Compiled) -> bool:
    """Whether calls of ``compiled`` may run at once in threads of one process: its optimised
    HLO holds no custom call other than host callbacks.

    jaxlib's CPU LAPACK kernels (eigh, Cholesky, LU and solves, QR, SVD: custom calls) split a
    batch into tasks on XLA's intra-op thread pool and block until they are done; two
    programs running them at once can leave every pool thread waiting, a deadlock
    (``benchmarks/repro_xla_cpu_lapack_deadlock.py``; docs/scaling.md). Other custom calls
    are treated alike. XLA's own kernels, YNNPACK fusions included, and host callbacks (which
    diffrax's solves hold, through equinox's runtime errors) do not block so. ``False`` where
    XLA gives no text."""
    try:
        text = compiled.as_text()
    except Exception:  # noqa: BLE001  (a backend without HLO text: run one at a time)
        return False
    if not isinstance(text, str):
        return False
    targets = re.findall(r'custom_call_target="([^"]*)"', text)
    if len(targets) != text.count("custom-call("):  # a form this parser does not know
        return False
    return set(targets) <= _CONCURRENT_CUSTOM_CALLS


def compiled_bytes(compiled) -> float:
    try:
        stats = compiled.memory_analysis()
    except NotImplementedError:  # a backend that reports no memory statistics
        return 0.0
    if stats is None:
        return 0.0
    return float(
        stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
    )
