"""Executing segmented members: advance the unfinished ones, re-batch, repeat.

For one chunk of members on one device:

1. ``init`` (vmapped in groups of ``vmap_width``) starts every member without taking a step
   (``member.init(params, key, 0)``): every step is then taken by the segment programs, and
   ``init`` compiles in a fraction of their time (it holds no solver loop);
2. the unfinished members are packed into groups (``_packing.pack``): the cheapest cover
   by groups of ``vmap_width``, of ``segment_width`` and, with ``segment_widths > 2``, of
   the widths between (only the last group padded); each group is advanced by one segment;
   this repeats until every member is done, so the slowest members finish in the cheapest
   groups. The narrower widths are used only once the chunk's groups of ``vmap_width``
   alone have lost ``narrow_after`` lane-steps to the cheapest cover (each width is one more
   compiled program, which a short chunk would not earn back);
3. ``finish`` (vmapped in groups of ``vmap_width``) turns every state into outputs.

A chunk's member states stay on the device between segments (each segment program gathers
its group by index and scatters it back); only the "done" flags go to the host. Each program
(``init``, one segment at each group width, ``finish``) is compiled once, when first
needed, and reused for every segment and chunk. On CPUs, XLA's vectorised code gives many
members the same bits at every group width that is a multiple of the SIMD lane count (4 float64
/ 8 float32 lanes), but not every member (the Transformer PDE's rank ODE differs at round-off
level between widths 4 and 32), so a member's result may depend on the groups it was advanced
in; the default chunks therefore do not depend on the number of processes
(``_chunks.segmented_chunk``), and ``segment_width = vmap_width`` gives bitwise the results
of the unsegmented path.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ._diffeq import advance_shared, shared_structure, start_shared
from ._packing import cover_lanes, group_widths, pack, segment_width
from ._programs import (
    DEVICE_EVENT,
    SMALL_STATE,
    CompileCounter,
    ConcurrentCompiler,
    _ByIdentity,
    compiled_bytes,
    grouped,
    outputs_and_status,
    runs_concurrently,
    static_member,
    to_host,
    xla_options,
)
from ._segmented import AbstractSegmentedMember


class _Packed:
    """A member state flattened into one vector per dtype (and back), so that a chunk's
    states are a handful of ``(members, size)`` arrays that programs gather from and scatter
    into by index."""

    def __init__(self, state_shape):
        self.state_shape = state_shape
        leaves, self.treedef = jax.tree.flatten(state_shape)
        self.shapes = [x.shape for x in leaves]
        self.dtypes = sorted({x.dtype.str for x in leaves})
        self.slots = []  # (dtype, start, stop) of each leaf in its dtype's vector
        used = dict.fromkeys(self.dtypes, 0)
        for x in leaves:
            size = int(np.prod(x.shape))
            self.slots.append((x.dtype.str, used[x.dtype.str], used[x.dtype.str] + size))
            used[x.dtype.str] += size

    def _key(self):
        return (self.treedef, tuple(self.shapes), tuple(self.slots))

    def __hash__(self) -> int:  # a static argument of the chunk programs
        return hash(self._key())

    def __eq__(self, other) -> bool:
        return isinstance(other, _Packed) and self._key() == other._key()

    def pack(self, state) -> dict[str, jax.Array]:
        parts = {d: [] for d in self.dtypes}
        for leaf, (d, _, _) in zip(jax.tree.leaves(state), self.slots, strict=True):
            parts[d].append(jnp.ravel(leaf))
        return {d: jnp.concatenate(v) for d, v in parts.items()}

    def unpack(self, packed: dict[str, jax.Array]):
        leaves = [
            packed[d][a:b].reshape(shape)
            for (d, a, b), shape in zip(self.slots, self.shapes, strict=True)
        ]
        return jax.tree.unflatten(self.treedef, leaves)


def _state_packing(member, params, seeds) -> _Packed:
    """The packing of one member's state (from its shape: no computation)."""
    one = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), (params, seeds))
    shape = jax.eval_shape(lambda p, s: member.init(p, jax.random.key(s), 0), *one)
    return _Packed(shape)


def _start_one(member, packing, p, s):
    state = member.init(p, jax.random.key(s), 0)
    return packing.pack(state), member.done(state)


# The programs take the state's packing (``_state_packing``, found once per member and shapes)
# as a static argument, so that none of them traces the member's ``init`` again to find it.


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _sweep_init(member, width, packing, params, seeds):
    """Every member of a chunk started (``member.init(params, key, 0)``), packed."""
    return grouped(lambda p, s: _start_one(member, packing, p, s), width)(params, seeds)


@functools.partial(jax.jit, static_argnums=(0, 1, 2), donate_argnums=(5,))
def _sweep_advance(member, segment_steps, packing, params, seeds, states, idx, n_real):
    """One segment of the group ``idx`` of a chunk: gathered by index, advanced by
    ``segment_steps`` steps, scattered back in place (padding lanes, copies of the group's
    first member, write nowhere)."""

    def advance_one(p, s, packed):
        state = member.advance(p, jax.random.key(s), packing.unpack(packed), segment_steps)
        return packing.pack(state), member.done(state)

    p, s = jax.tree.map(lambda x: x[idx], (params, seeds))
    group = jax.tree.map(lambda x: x[idx], states)
    group, done = jax.vmap(advance_one)(p, s, group)
    target = jnp.where(jnp.arange(idx.shape[0]) < n_real, idx, states_size(states))
    return {d: x.at[target].set(group[d], mode="drop") for d, x in states.items()}, done


@functools.partial(jax.jit, static_argnums=(0, 1, 2), donate_argnums=(3,))
def _sweep_advance_shared(structure, segment_steps, packing, states, idx, n_real):
    """One segment of the group ``idx`` of solves in their shared form
    (``_diffeq.SharedState``): the problem comes from the state, so the program depends on the
    problem's structure and shapes only, not on the member function or its parameters."""

    def advance_one(packed):
        state = advance_shared(structure, packing.unpack(packed), segment_steps)
        return packing.pack(state), state.solve.done

    group = jax.tree.map(lambda x: x[idx], states)
    group, done = jax.vmap(advance_one)(group)
    target = jnp.where(jnp.arange(idx.shape[0]) < n_real, idx, states_size(states))
    return {d: x.at[target].set(group[d], mode="drop") for d, x in states.items()}, done


@functools.partial(jax.jit, static_argnums=(0, 1))
def _sweep_problems(member, width, params, seeds):
    """The array leaves of every member's shared problem (no solver code: cheap to compile)."""
    return grouped(lambda p, s: member.problem_arrays(p, jax.random.key(s)), width)(params, seeds)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _sweep_start_shared(structure, width, packing, arrays):
    """Every solve of a chunk started from its shared problem's arrays, packed: one program
    for every member function whose solves share the structure."""

    def start(a):
        state = start_shared(structure, a)
        return packing.pack(state), state.solve.done

    return grouped(start, width)(arrays)


class _SharedStart:
    """A chunk's start as two programs: the member's problems, then the shared start."""

    def __init__(self, problems, start):
        self.problems, self.start = problems, start

    def __call__(self, params, seeds):
        return self.start(self.problems(params, seeds))


class _SharedAdvance:
    """A compiled shared segment program called as the member's own one is."""

    def __init__(self, compiled):
        self.compiled = compiled

    def __call__(self, params, seeds, states, idx, n_real):
        return self.compiled(states, idx, n_real)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _sweep_finish(member, width, packing, params, seeds, states):
    """Every member's outputs and status code from its final state."""

    def finish(p, s, packed):
        return outputs_and_status(member.finish(p, jax.random.key(s), packing.unpack(packed)))

    return grouped(finish, width)(params, seeds, states)


class SegmentedPrograms:
    """The compiled programs of one segmented member for one chunk size on one device.

    A chunk's parameters, seeds and (packed) states stay on the device for the whole chunk;
    a segment program gathers its group's members by index, advances them and scatters them
    back in place (the state buffers are donated), so between segments only the ``done``
    flags travel to the host. The executables come from jit's own cache: a second sweep of
    the same member and shapes compiles nothing.
    """

    def __init__(
        self,
        member: AbstractSegmentedMember,
        width,
        requested_width,
        segment_steps,
        params,
        seeds,
        device,
        width_count: int = 2,
        narrow_after: int = 0,
        cache=None,
    ):
        self.cache = cache
        self.member, self.width = static_member(member), width
        self.segment_steps, self.device = segment_steps, device
        on_device = jax.sharding.SingleDeviceSharding(device)
        self._spec = lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=on_device)  # noqa: E731
        example = jax.tree.map(self._spec, (params, seeds))
        self.packing = _state_packing(self.member, params, seeds)
        size = sum(int(np.prod(shape)) for shape in self.packing.shapes)
        self.xla = xla_options(device.platform, small=size <= SMALL_STATE)
        static = (self.member, width, self.packing)
        state_shape = self.packing.state_shape
        narrow = segment_width(requested_width, width, device.platform, state_shape)
        self.group_widths = group_widths(narrow, width, width_count)
        self.narrow_after = narrow_after
        self._example = example
        self._advance: dict[int, Callable] = {}
        self._compiling = threading.Lock()  # chunks running at once share these programs
        packed_shape = _sweep_init.eval_shape(*static, *example)[0]
        self._packed = jax.tree.map(self._spec, packed_shape)
        with CompileCounter() as counter, ConcurrentCompiler() as compiler:
            # Every program a chunk will run is lowered here, one after another, and each is
            # handed to the compiler as soon as it is lowered: with several cores, XLA compiles
            # the earlier programs while Python traces the later ones. The narrower segment
            # widths are compiled ahead only where they are used from the first segment
            # (``narrow_after = 0``) and cores are free to compile them
            # (widest first: the longest compilations start first).
            ahead = self.group_widths if compiler.concurrent and narrow_after == 0 else ()
            advances = {w: self._lower_advance(w, compiler) for w in sorted(ahead, reverse=True)}
            if shared_structure(self.member) is None:
                init = compiler.submit(_sweep_init.lower(*static, *example), self.xla)
            else:
                init = self._shared_start(example, compiler)
            finish = compiler.submit(_sweep_finish.lower(*static, *example, self._packed), self.xla)
            self.init, self.finish = init(), finish()
            for w, wait in advances.items():
                self._advance[w] = wait()
        self.out_shape = _sweep_finish.eval_shape(*static, *example, self._packed)
        self.compilations = counter.count
        self.bytes_per_device = compiled_bytes(self.finish) + (
            compiled_bytes(self.init.start)
            if isinstance(self.init, _SharedStart)
            else compiled_bytes(self.init)
        )

    def advance(self, width: int) -> Callable:
        """The compiled one-segment program for groups of ``width`` (compiled when first
        needed unless compiled ahead; shared between members whose solves share a form,
        ``_lower_advance``)."""
        with self._compiling:
            if width not in self._advance:
                with CompileCounter() as counter, ConcurrentCompiler(threads=1) as compiler:
                    self._advance[width] = self._lower_advance(width, compiler)()
                self.compilations += counter.count
            return self._advance[width]

    @functools.cached_property
    def concurrent(self) -> bool:
        """Whether chunks may run these programs at once in threads
        (:func:`~jaxdyn.sweep._programs.runs_concurrently`: no custom call in the start, the
        widest segment program or the finish). The narrower segment programs, compiled
        later, are the same member at another width."""
        programs = [self.finish, self.advance(self.width)]
        if isinstance(self.init, _SharedStart):
            programs += [self.init.problems, self.init.start]
        else:
            programs.append(self.init)
        return all(runs_concurrently(getattr(p, "compiled", p)) for p in programs)

    def _lower_advance(self, width: int, compiler) -> Callable[[], Callable]:
        """Lower the one-segment program for groups of ``width`` (unless the cache holds it) and
        hand it to ``compiler``; returns a function that waits for it (and files a shared
        program in the cache)."""
        idx = self._spec(np.zeros(width, np.int32))
        n_real = self._spec(np.int32(0))
        structure = shared_structure(self.member)
        if structure is None:
            return compiler.submit(
                _sweep_advance.lower(
                    self.member,
                    self.segment_steps,
                    self.packing,
                    *self._example,
                    self._packed,
                    idx,
                    n_real,
                ),
                self.xla,
            )
        shapes = tuple((d, x.shape) for d, x in sorted(self._packed.items()))
        key = (structure, self.segment_steps, self.packing, self.device, shapes, width)
        shared = self.cache.shared
        if key in shared:
            return lambda: shared[key]
        compiled = compiler.submit(
            _sweep_advance_shared.lower(
                structure, self.segment_steps, self.packing, self._packed, idx, n_real
            ),
            self.xla,
        )

        def wait() -> Callable:
            if key not in shared:
                self.cache.remember(shared, key, _SharedAdvance(compiled()))
            return shared[key]

        return wait

    def _shared_start(self, example, compiler) -> Callable[[], _SharedStart]:
        """Lower a chunk's problems program and, unless the cache holds it, the shared start
        program, handing each to ``compiler``; returns a function that waits for both (and
        files the shared start in the cache)."""
        problems = compiler.submit(
            _sweep_problems.lower(self.member, self.width, *example), self.xla
        )
        arrays = jax.tree.map(
            self._spec, _sweep_problems.eval_shape(self.member, self.width, *example)
        )
        structure = shared_structure(self.member)
        shapes = tuple((x.shape, x.dtype.str) for x in jax.tree.leaves(arrays))
        key = (
            "start",
            structure,
            self.packing,
            self.device,
            jax.tree.structure(arrays),
            shapes,
            self.width,
        )
        shared = self.cache.shared
        start = None
        if key not in shared:
            start = compiler.submit(
                _sweep_start_shared.lower(structure, self.width, self.packing, arrays), self.xla
            )

        def wait() -> _SharedStart:
            if key not in shared:
                self.cache.remember(shared, key, start())
            return _SharedStart(problems(), shared[key])

        return wait

    def run(self, params: dict, seeds: np.ndarray, n_real: int | None = None, record=True):
        """``(outputs, status codes, segments run, lane-steps)`` of one chunk of members (on
        the host); lane-steps are the lanes x ``segment_steps`` the device paid. Members from
        ``n_real`` on are padding and are not advanced past ``init``. Several chunks may run
        at once, in threads (``concurrent``). With ``record``, the time
        spent in the compiled programs and waiting for them is recorded as a
        ``jax.monitoring`` event (``DEVICE_EVENT``; compilation excluded)."""
        device_s = 0.0
        start = time.perf_counter()
        params, seeds = jax.device_put((params, seeds), self.device)
        states, done = self.init(params, seeds)
        done = to_host(done).copy()
        device_s += time.perf_counter() - start
        if n_real is not None:
            done[n_real:] = True
        n_segments = 1
        lane_steps = 0
        active = np.flatnonzero(~done)
        # Lane-steps the groups of the widest width alone spent beyond the cheapest cover by
        # all widths: the narrower widths are used once they reach ``narrow_after``.
        wide_only, fixed, lost = (self.width,), self.group_widths[0], 0
        while active.size:
            in_flight = []
            widths = self.group_widths if lost >= self.narrow_after else wide_only
            if widths == wide_only:
                lost += self.segment_steps * (
                    cover_lanes(active.size, wide_only, fixed)
                    - cover_lanes(active.size, self.group_widths, fixed)
                )
            groups = [(idx, self.advance(idx.size)) for idx in pack(active, widths)]
            start = time.perf_counter()
            for idx, program in groups:
                real = int(np.unique(idx).size)  # the padding repeats idx[0] at the end
                states, group_done = program(
                    params, seeds, states, idx.astype(np.int32), np.int32(real)
                )  # dispatched asynchronously
                in_flight.append((idx[:real], group_done))
                lane_steps += idx.size * self.segment_steps
            for idx, group_done in in_flight:
                done[idx] = to_host(group_done)[: idx.size]
            device_s += time.perf_counter() - start
            n_segments += 1
            active = np.flatnonzero(~done)
        start = time.perf_counter()
        outputs, status = to_host(self.finish(params, seeds, states))
        device_s += time.perf_counter() - start
        if record:
            jax.monitoring.record_event_duration_secs(DEVICE_EVENT, device_s)
        return outputs, status, n_segments, lane_steps


def states_size(states) -> int:
    """Members in a chunk's packed states."""
    return next(iter(states.values())).shape[0]


def segmented_programs(member, device, width, options, params, seeds, cache):
    """``(SegmentedPrograms, compilations done now)`` for one chunk size on ``device``, from
    ``cache`` (a :class:`~jaxdyn.sweep.SweepCache`) when a sweep built them before."""
    specs = jax.tree.map(lambda x: (np.shape(x), np.asarray(x).dtype.str), (params, seeds))
    key = (
        static_member(member),
        device,
        width,
        options.segment_width,
        options.segment_steps,
        options.segment_widths,
        options.narrow_after,
        jax.tree.structure(specs),
        tuple(jax.tree.leaves(specs)),
        jax.config.jax_enable_x64,
    )
    try:
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in cache.programs:
        return cache.programs[key], 0
    programs = SegmentedPrograms(
        member,
        width,
        options.segment_width,
        options.segment_steps,
        params,
        seeds,
        device,
        options.segment_widths,
        options.narrow_after,
        cache,
    )
    if key is not None and not isinstance(key[0], _ByIdentity):
        cache.remember(cache.programs, key, programs)
    return programs, programs.compilations


def segmented_out_shape(member, width, segment_steps, params, seeds):
    """Shapes of one chunk's ``(outputs, status)``, without compiling anything."""

    def whole(p, s):
        key = jax.random.key(s)
        state = member.init(p, key, 0)
        return outputs_and_status(member.finish(p, key, state))

    return jax.eval_shape(grouped(whole, width), params, seeds)
