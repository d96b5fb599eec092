"""How a sweep is executed, kept apart from what it computes: :class:`SweepOptions`.

Science configs say *what* to simulate; sweep options say *how* to spread it over vector
lanes, memory, devices and processes. They come from (lowest to highest precedence) the
defaults below, an experiment's own defaults, the ``[sweep]`` table of a TOML config file, and
``--sweep KEY=VALUE`` on the command line. None of them changes a member's result except
``vmap_width`` (XLA's vectorised code may round differently at different widths), which is
therefore fixed per run and stored with the checkpoints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepOptions:
    """Execution options of :func:`jaxdyn.sweep.run_sweep` and :meth:`jaxdyn.runs.Run.sweep`.

    Attributes:
        vmap_width: members vectorised together on a device (fewer for smaller grids). A
            device's share of a chunk is a loop over groups of this width. Larger widths suit
            GPUs; on CPUs 8-64 is best. Results are bitwise identical for any chunk size,
            device count and process count at a fixed width.
        chunk_size: members per compiled call (rounded up to a multiple of devices x width);
            ``0`` chooses it from ``memory_budget_gb``.
        memory_budget_gb: memory the chunks running at once may use per device (arguments,
            outputs and XLA temporaries, from the compiled program's memory analysis). On a
            CPU device with several cores, up to a chunk per core runs at once
            (docs/scaling.md); elsewhere one chunk runs at a time.
        devices: how many of this process's devices to shard over (``None``: all).
        progress: show a progress bar (``None``: when stderr is a terminal).
        segment_steps: for segmented members (:class:`~jaxdyn.sweep.DiffeqMember`,
            :class:`~jaxdyn.sweep.AbstractSegmentedMember`): the most solver steps a member
            takes between two re-batchings of the unfinished members. ``0`` runs every member
            to completion in one vmapped call (cost: width x the slowest member of a group).
            Each member takes the same steps for any value, up to round-off where XLA gives
            the member different bits at different group widths (see ``segment_width``).
        segment_width: the narrowest group of unfinished members of a segmented sweep
            advanced together. ``0`` chooses, on CPUs, the SIMD lane count of the member's
            state (4 for float64, 8 for float32: the narrowest width XLA vectorises, so the
            slowest members finish in the cheapest groups) and ``vmap_width`` on GPUs.
            Narrower than ``vmap_width``, a member whose bits depend on the group width (XLA
            decides; docs/scaling.md) can end at round-off distance from its unsegmented
            result; ``vmap_width`` gives bitwise the unsegmented results.
        segment_widths: how many group widths the unfinished members are packed into:
            ``segment_width`` doubled while below ``vmap_width``, up to this many widths in
            all with ``vmap_width``. Each width is one more compiled program (seconds of
            compilation). The default ``2`` (narrow and wide, the narrow groups only after
            ``narrow_after``) compiles the fewest; ``3`` (4, 8
            and 32 for float64 members on CPUs) finishes the last dozen slow members of a long
            sweep in groups that fit them, at the cost of one more compiled program
            (``benchmarks/bench_sweep_heterogeneous.py``, ``bench_pde_ranks.py``).
        narrow_after: lane-steps (group width x steps) that a chunk's groups of
            ``vmap_width`` alone must have spent beyond the cheapest cover by all the
            ``segment_widths`` before the narrower widths are used (and compiled, when first
            used). The default ``0`` uses them from the first segment: a sweep is then
            straggler-free by default, and a narrower width's program, compiled once, is
            shared by every later chunk and sweep of the same solve structure
            (``benchmarks/probe_narrow_after.py`` compares values). A larger value saves that
            compilation on short one-off sweeps (``jaxdyn run --quick`` uses ``2^19``).
            Decided from the chunk's own members' progress, so the grouping, and hence every
            result, is the same in every run.
    """

    vmap_width: int = 32
    chunk_size: int = 0
    memory_budget_gb: float = 2.0
    devices: int | None = None
    progress: bool | None = None
    segment_steps: int = 128
    segment_width: int = 0
    segment_widths: int = 2
    narrow_after: int = 0

    def __post_init__(self) -> None:
        for name in (
            "vmap_width",
            "chunk_size",
            "segment_steps",
            "segment_width",
            "segment_widths",
            "narrow_after",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"sweep option {name} must be an integer, got {value!r}")
        if self.vmap_width < 1:
            raise ValueError(f"sweep option vmap_width must be >= 1, got {self.vmap_width}")
        if self.segment_steps < 0:
            raise ValueError(
                f"sweep option segment_steps must be >= 0 (0 = unsegmented), got "
                f"{self.segment_steps}"
            )
        if self.segment_width < 0:
            raise ValueError(
                f"sweep option segment_width must be >= 0 (0 = automatic), got {self.segment_width}"
            )
        if self.segment_widths < 1:
            raise ValueError(f"sweep option segment_widths must be >= 1, got {self.segment_widths}")
        if self.narrow_after < 0:
            raise ValueError(
                f"sweep option narrow_after must be >= 0 (0 = at once), got {self.narrow_after}"
            )
        if self.chunk_size < 0:
            raise ValueError(
                f"sweep option chunk_size must be >= 0 (0 = automatic), got {self.chunk_size}"
            )
        budget = self.memory_budget_gb
        if isinstance(budget, bool) or not isinstance(budget, int | float) or not budget > 0:
            raise ValueError(f"sweep option memory_budget_gb must be positive, got {budget!r}")
        if self.devices is not None and (
            isinstance(self.devices, bool) or not isinstance(self.devices, int) or self.devices < 1
        ):
            raise ValueError(
                f"sweep option devices must be a positive integer, got {self.devices!r}"
            )
        if self.progress is not None and not isinstance(self.progress, bool):
            raise ValueError(f"sweep option progress must be true or false, got {self.progress!r}")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def updated(self, values: Mapping[str, Any], *, source: str = "sweep options") -> SweepOptions:
        """A copy with ``values`` applied; unknown keys and bad values raise ``ValueError``."""
        unknown = sorted(set(values) - set(self.field_names()))
        if unknown:
            raise ValueError(
                f"unknown sweep option '{unknown[0]}' ({source}); valid options: "
                f"{', '.join(self.field_names())}"
            )
        values = dict(values)
        if "memory_budget_gb" in values and isinstance(values["memory_budget_gb"], int):
            values["memory_budget_gb"] = float(values["memory_budget_gb"])
        return dataclasses.replace(self, **values)

    def as_dict(self) -> dict[str, Any]:
        """The options as a plain dict (as recorded in a run's config)."""
        return dataclasses.asdict(self)
