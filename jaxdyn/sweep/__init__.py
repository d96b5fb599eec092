"""The sweep engine: hyperparameters x seeds as one jit(vmap) program, chunked and sharded.

```python
from jaxdyn.sweep import Grid, SweepOptions, run_sweep

result = run_sweep(member, Grid.product({"lam": [0.3, 0.5]}, seeds=8),
                   options=SweepOptions(vmap_width=16))
```

Members whose cost varies (adaptive ODE solves with events) run in segments, so that a sweep
costs about the sum of its members' work (docs/scaling.md): a member function calling one of
the library's simulators (their solve is a :meth:`DiffeqProblem.solve`) is segmented by the
engine itself; a :class:`DiffeqMember` (or any :class:`AbstractSegmentedMember`) states the
segments explicitly.
"""

from ._devices import (
    use_cpu_devices as use_cpu_devices,
    xla_cpu_setup as xla_cpu_setup,
)
from ._diffeq import (
    DiffeqMember as DiffeqMember,
    DiffeqProblem as DiffeqProblem,
    DiffeqState as DiffeqState,
    solve_is_routed as solve_is_routed,
)
from ._engine import clear_caches as clear_caches, run_sweep as run_sweep
from ._grid import Grid as Grid
from ._options import SweepOptions as SweepOptions
from ._result import SweepResult as SweepResult
from ._segmented import (
    AbstractSegmentedMember as AbstractSegmentedMember,
    unsegmented as unsegmented,
)

# What a user calls (issue 44); the rest stays importable for jaxdyn's own modules while the
# sweep seam moves (xla_cpu_setup / use_cpu_devices to the command line and launcher).
__all__ = [
    "AbstractSegmentedMember",
    "DiffeqMember",
    "DiffeqProblem",
    "Grid",
    "SweepOptions",
    "SweepResult",
    "run_sweep",
]
