"""Compiled chunk programs: one member function, vmapped in fixed-width groups, over devices."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from .._compat import patch_equinox_closure_convert
from .._status import Status, as_status, mark_nonfinite

SWEEP_AXIS = "sweep"


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
    return out, jnp.asarray(status._value, jnp.int32)


def batched_member_program(fn: Callable, vmap_width: int) -> Callable:
    """``(params, seeds) -> (outputs, status codes)`` for a batch of members on one device.

    Members are vectorised in groups of a fixed width and the groups are looped over with
    ``lax.map``. XLA's vectorised code can round differently for different batch widths, so a
    fixed width keeps every member's result bitwise independent of the chunk size and of the
    number of devices.
    """
    return grouped(lambda p, s: _member_outputs(fn, p, s), vmap_width)


def grouped(fn: Callable, vmap_width: int) -> Callable:
    """``fn`` of one member, applied to a leading member axis in vmapped groups of
    ``vmap_width`` (a ``lax.map`` over the groups when there are several)."""
    vmapped = jax.vmap(fn)

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


def put_global(host_array: np.ndarray, sharding) -> jax.Array:
    """Place a host array sharded over the sweep axis; works unchanged across processes."""
    return jax.make_array_from_callback(host_array.shape, sharding, lambda index: host_array[index])


def to_host(tree):
    """This process's arrays on the host (sweep programs only use local devices)."""
    return jax.tree_util.tree_map(np.asarray, jax.device_get(tree))


class ShardedProgram:
    """One executable for the whole chunk: ``jax.shard_map`` over the ``sweep`` mesh axis.

    On a single device the shard_map is dropped (a plain jit of the same batched program).
    """

    mode = "shard_map"

    def __init__(self, fn, mesh, width, params, seeds):
        batched = batched_member_program(fn, width)
        self.n_devices = mesh.devices.size
        self.sharding = NamedSharding(mesh, PartitionSpec(SWEEP_AXIS))
        if self.n_devices == 1:
            program = jax.jit(batched)
        else:
            patch_equinox_closure_convert()
            # check_vma=False: diffrax/optimistix internals are not annotated for varying axes.
            program = jax.jit(
                jax.shard_map(
                    batched,
                    mesh=mesh,
                    in_specs=(PartitionSpec(SWEEP_AXIS), PartitionSpec(SWEEP_AXIS)),
                    out_specs=PartitionSpec(SWEEP_AXIS),
                    check_vma=False,
                )
            )
        self.compiled = program.lower(params, seeds).compile()
        self.compilations = 1
        self.bytes_per_device = compiled_bytes(self.compiled) / self.n_devices
        self.out_shape = jax.eval_shape(batched, params, seeds)

    def dispatch(self, params, seeds):
        put = lambda x: put_global(x, self.sharding)
        return self.compiled({k: put(v) for k, v in params.items()}, put(seeds))

    def fetch(self, handle):
        return to_host(handle)


class PerDeviceProgram:
    """Fallback when a member function cannot be traced under ``shard_map``.

    Some library internals are not shard_map-safe on this stack (diffrax event root finding
    through optimistix/lineax on jax 0.10: diffrax issue #765, lineax issue #185). Then each
    device gets its slice of the chunk and runs the same single-device program, compiled once
    per device and dispatched asynchronously, so devices still work in parallel and results
    stay identical.
    """

    mode = "per_device"

    def __init__(self, fn, devices, width, params, seeds):
        self.devices = list(devices)
        self.n_devices = len(self.devices)
        self.program = jax.jit(batched_member_program(fn, width))
        self.compiled = []
        for device, (p, s) in zip(self.devices, self._split(params, seeds), strict=True):
            p, s = jax.device_put((p, s), device)
            self.compiled.append(self.program.lower(p, s).compile())
        self.compilations = self.n_devices
        self.bytes_per_device = compiled_bytes(self.compiled[0])
        self.out_shape = jax.eval_shape(batched_member_program(fn, width), params, seeds)

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


_COMPILED: dict = {}
_COMPILED_MAX = 32


def compile_program(fn, mesh, width, params, seeds, log=lambda msg: None):
    """The chunk program, cached per (function, devices, width, input shapes).

    Returns ``(program, number of compilations done now)``; repeated sweeps of the same
    member function (a benchmark, an interactive session) skip tracing and compilation.
    """
    signature = tuple(
        (k, np.shape(v), np.asarray(v).dtype.str) for k, v in sorted(params.items())
    ) + ((np.shape(seeds), np.asarray(seeds).dtype.str),)
    key = (fn, tuple(d.id for d in mesh.devices.flat), width, signature)
    try:
        hash(key)
    except TypeError:  # an unhashable callable: compile without caching
        key = None
    if key is not None and key in _COMPILED:
        return _COMPILED[key], 0
    try:
        program = ShardedProgram(fn, mesh, width, params, seeds)
    except Exception as err:
        if mesh.devices.size == 1:
            raise
        message = (
            f"shard_map could not compile this member function ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:120]}); falling back to per-device dispatch"
        )
        log(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        program = PerDeviceProgram(fn, list(mesh.devices.flat), width, params, seeds)
    if key is not None:
        if len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.pop(next(iter(_COMPILED)))
        _COMPILED[key] = program
    return program, program.compilations


def compiled_bytes(compiled) -> float:
    try:
        stats = compiled.memory_analysis()
        return float(
            stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
        )
    except Exception:  # some backends do not report memory statistics
        return 0.0
