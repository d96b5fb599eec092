"""Executing segmented members: advance the unfinished ones, re-batch, repeat.

For one chunk of members on one device:

1. ``init`` (vmapped in groups of ``vmap_width``) starts every member and takes its first
   segment of at most ``segment_steps`` steps;
2. the unfinished members are packed into groups of ``segment_width`` (the last one padded),
   each group is advanced by one segment, and this repeats until every member is done;
3. ``finish`` (vmapped in groups of ``vmap_width``) turns every state into outputs.

Member states live on the host between segments (numpy gather and scatter). Three programs
are compiled (``init``, one segment, ``finish``) and reused for every segment and chunk. On
CPUs, XLA's vectorised code gives a member the same bits at every group width that is a
multiple of the SIMD lane count (4 float64 / 8 float32 lanes with AVX2 or AVX-512 at XLA's
default 256-bit vectors), so with widths that are multiples of 8 a member's result does not
depend on which members shared its groups (tests/test_sweep_segmented.py).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from ._programs import compiled_bytes, grouped, outputs_and_status, to_host
from ._segmented import AbstractSegmentedMember


def segment_width(requested: int, vmap_width: int, platform: str) -> int:
    """Width of the groups of unfinished members (``SweepOptions.segment_width``)."""
    if requested:
        return min(requested, vmap_width)
    return min(8, vmap_width) if platform == "cpu" else vmap_width


def pack(active: np.ndarray, width: int) -> list[np.ndarray]:
    """Member indices of each group of ``width`` covering ``active``; the last group is padded
    with copies of its first member (the padding's results are discarded)."""
    groups = []
    for start in range(0, active.size, width):
        idx = active[start : start + width]
        if idx.size < width:
            idx = np.concatenate([idx, np.full(width - idx.size, idx[0])])
        groups.append(idx)
    return groups


def _take(tree, idx):
    return jax.tree.map(lambda x: x[idx], tree)


class SegmentedPrograms:
    """The compiled programs of one segmented member for one chunk size on one device."""

    def __init__(
        self,
        member: AbstractSegmentedMember,
        width,
        group_width,
        segment_steps,
        params,
        seeds,
        device,
    ):
        self.member, self.width, self.group_width = member, width, group_width
        self.segment_steps, self.device = segment_steps, device

        def init(p, s):
            state = member.init(p, jax.random.key(s), segment_steps)
            return state, member.done(state)

        def advance(p, s, state):
            state = member.advance(p, jax.random.key(s), state, segment_steps)
            return state, member.done(state)

        def finish(p, s, state):
            return outputs_and_status(member.finish(p, jax.random.key(s), state))

        put = lambda tree: jax.device_put(tree, device)  # noqa: E731
        self._params_example, self._seeds_example = params, seeds
        grouped_init = grouped(init, width)
        self.init = jax.jit(grouped_init).lower(*put((params, seeds))).compile()
        state_shape = jax.eval_shape(grouped_init, params, seeds)[0]
        self.finish = (
            jax.jit(grouped(finish, width)).lower(*put((params, seeds)), state_shape).compile()
        )
        self._advance_fn = jax.jit(jax.vmap(advance))
        on_device = jax.sharding.SingleDeviceSharding(device)
        self._advance_args = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(
                (group_width,) + x.shape[1:], x.dtype, sharding=on_device
            ),
            (params, seeds, state_shape),
        )
        self._advance: Callable | None = None
        self.compilations = 2
        self.segments = 0  # rounds of the last run (init included)
        self.lane_steps = 0  # lanes x segment_steps of the last run: what the device paid
        self.bytes_per_device = compiled_bytes(self.init) + compiled_bytes(self.finish)

    def advance(self) -> Callable:
        """The compiled one-segment program (compiled when first needed)."""
        if self._advance is None:
            self._advance = self._advance_fn.lower(*self._advance_args).compile()
            self.compilations += 1
        return self._advance

    def run(self, params: dict, seeds: np.ndarray, n_real: int | None = None):
        """``(outputs, status codes, segments run)`` of one chunk of members (on the host);
        members from ``n_real`` on are padding and are not advanced past ``init``."""
        put = lambda tree: jax.device_put(tree, self.device)  # noqa: E731
        states, done = to_host(self.init(*put((params, seeds))))
        leaves, treedef = jax.tree.flatten(states)
        leaves = [np.array(x) for x in leaves]  # writable host copies
        done = np.array(done)
        if n_real is not None:
            done[n_real:] = True
        n_segments = 1
        self.lane_steps = seeds.shape[0] * (self.segment_steps or 0)
        active = np.flatnonzero(~done)
        while active.size:
            in_flight = []
            for idx in pack(active, self.group_width):
                state = jax.tree.unflatten(treedef, [x[idx] for x in leaves])
                args = put((_take(params, idx), seeds[idx], state))
                in_flight.append((idx, self.advance()(*args)))  # dispatched asynchronously
                self.lane_steps += idx.size * self.segment_steps
            for idx, handle in in_flight:
                new_state, new_done = to_host(handle)
                real = np.unique(idx, return_index=True)[1]  # drop the padding copies
                for full, part in zip(leaves, jax.tree.leaves(new_state), strict=True):
                    full[idx[real]] = part[real]
                done[idx[real]] = new_done[real]
            n_segments += 1
            active = np.flatnonzero(~done)
        self.segments = n_segments
        states = jax.tree.unflatten(treedef, leaves)
        outputs, status = to_host(self.finish(*put((params, seeds, states))))
        return outputs, status, n_segments
