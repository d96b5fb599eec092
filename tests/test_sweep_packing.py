"""Packing unfinished members into groups (``jaxdyn/sweep/_packing.py``), and sweeps with more
than two group widths (``SweepOptions(segment_widths=...)``)."""

import itertools

import jax
import numpy as np
import pytest
from test_sweep_segmented import _collatz_reference, _Halving

from jaxdyn.sweep import Grid, SweepOptions, run_sweep
from jaxdyn.sweep._packing import cheapest_cover, group_widths, pack
from jaxdyn.sweep._scheduler import SegmentedPrograms


def _brute_force_cost(n, widths):
    """Least ``sum(w + widths[0])`` over all multisets of widths covering ``n``."""
    best = np.inf
    limits = [-(-n // w) + 1 for w in widths]
    for counts in itertools.product(*(range(k + 1) for k in limits)):
        if sum(c * w for c, w in zip(counts, widths, strict=True)) >= n:
            cost = sum(c * (w + widths[0]) for c, w in zip(counts, widths, strict=True))
            best = min(best, cost)
    return best


def test_group_widths_double_the_narrow_width_up_to_the_wide_one():
    assert group_widths(4, 32, 2) == (4, 32)
    assert group_widths(4, 32, 3) == (4, 8, 32)
    assert group_widths(4, 32, 4) == (4, 8, 16, 32)
    assert group_widths(4, 32, 9) == (4, 8, 16, 32)
    assert group_widths(4, 32, 1) == (32,)
    assert group_widths(32, 32, 3) == (32,)
    assert group_widths(3, 20, 3) == (3, 6, 20)


def test_cheapest_cover_is_the_brute_force_optimum_on_random_widths():
    rng = np.random.default_rng(0)
    for _ in range(60):
        narrow = int(rng.integers(1, 9))
        wide = int(narrow * rng.integers(2, 12))
        widths = group_widths(narrow, wide, int(rng.integers(2, 5)))
        n = int(rng.integers(1, 3 * wide))
        cover = cheapest_cover(n, widths)
        assert sum(cover) >= n and list(cover) == sorted(cover, reverse=True)
        assert set(cover) <= set(widths)
        cost = sum(w + widths[0] for w in cover)
        assert cost == _brute_force_cost(n, widths), (n, widths, cover)
        # no group could be dropped: the padding is less than the narrowest group used
        assert sum(cover) - n < min(cover)


def test_pack_covers_every_active_member_once_and_pads_only_the_last_group():
    rng = np.random.default_rng(1)
    for n in [1, 3, 4, 5, 15, 16, 17, 31, 33, 70, 200]:
        active = np.sort(rng.choice(1000, n, replace=False))
        groups = pack(active, (4, 8, 32))
        flat = np.concatenate(groups)
        assert sorted(set(flat.tolist())) == active.tolist()
        assert [g.size for g in groups] == list(cheapest_cover(n, (4, 8, 32)))
        for g in groups[:-1]:
            assert np.unique(g).size == g.size
        last = groups[-1]
        assert np.all(last[np.unique(last).size :] == last[0])


@pytest.mark.parametrize("count", [3, 4])
def test_more_group_widths_give_the_same_exact_results(count):
    """An integer member (no round-off): every width of the ladder is used and the results are
    those of a Python loop."""
    long = [27, 871, 77031, 837799, 63728127, 670617279, 9780657630, 97, 6171, 8400511]
    xs = np.array([2 ** (1 + i % 19) for i in range(86)] + long, dtype=np.int64)
    xs = xs[np.random.default_rng(2).permutation(xs.size)]
    expected = np.array([_collatz_reference(int(x)) for x in xs])
    options = SweepOptions(segment_steps=5, vmap_width=32, segment_width=4, segment_widths=count)
    result = run_sweep(_Halving(), Grid.zip({"x": xs}), options=options)
    np.testing.assert_array_equal(result.outputs["n"], expected[:, 0])
    np.testing.assert_array_equal(result.outputs["peak"], expected[:, 1])

    params, seeds = {"x": xs}, np.zeros(xs.size, np.int64)
    jax.clear_caches()  # each program compiled here, once (jit's cache serves later sweeps)
    programs = SegmentedPrograms(
        _Halving(), 32, 4, 5, params, seeds, jax.devices()[0], width_count=count
    )
    outputs, _, _, _ = programs.run(params, seeds)
    np.testing.assert_array_equal(outputs["n"], expected[:, 0])
    assert programs.group_widths == group_widths(4, 32, count)
    assert set(programs._advance) == set(programs.group_widths)  # each compiled, when needed
    assert programs.compilations == 2 + len(programs.group_widths)


def test_segment_widths_is_validated():
    with pytest.raises(ValueError, match="segment_widths"):
        SweepOptions(segment_widths=0)
    with pytest.raises(ValueError, match="segment_widths"):
        SweepOptions().updated({"segment_widths": -1}, source="--sweep")


def test_narrow_widths_are_used_only_after_the_wide_groups_lost_narrow_after_lane_steps():
    """``narrow_after``: a chunk runs in groups of ``vmap_width`` alone (one compiled segment
    program) until those groups have spent that many lane-steps beyond the cheapest cover;
    the results are exact either way."""
    long = [27, 871, 77031, 837799, 63728127, 670617279]
    xs = np.array([2 ** (1 + i % 7) for i in range(58)] + long, dtype=np.int64)
    expected = np.array([_collatz_reference(int(x)) for x in xs])
    params, seeds = {"x": xs}, np.zeros(xs.size, np.int64)
    lanes = {}
    for after in (0, 2_000, 10**9):
        programs = SegmentedPrograms(
            _Halving(), 32, 4, 5, params, seeds, jax.devices()[0], narrow_after=after
        )
        outputs, _, _, lanes[after] = programs.run(params, seeds)
        np.testing.assert_array_equal(outputs["n"], expected[:, 0])
        np.testing.assert_array_equal(outputs["peak"], expected[:, 1])
        used = set(programs._advance)
        assert used == ({32} if after == 10**9 else {4, 32}), (after, used)
    # the narrow groups save lane-steps; used later, they save fewer
    assert lanes[0] < lanes[2_000] < lanes[10**9]
    with pytest.raises(ValueError, match="narrow_after"):
        SweepOptions(narrow_after=-1)
