"""The sweep engine: hyperparameters x seeds as one jit(vmap) program, chunked and sharded.

```python
from jaxdyn.sweep import Grid, SweepOptions, run_sweep

result = run_sweep(member, Grid.product({"lam": [0.3, 0.5]}, seeds=8),
                   options=SweepOptions(vmap_width=16))
```

Members whose cost varies (adaptive ODE solves with events) run in segments, so that a sweep
costs about the sum of its members' work (docs/sweep.md). The one seam is
:meth:`DiffeqProblem.solve`: a member function calling one of the library's simulators (they
solve through it), or ``DiffeqProblem(...).solve()`` itself, is segmented by the engine; an
:class:`AbstractSegmentedMember` states its segments explicitly. What the engine remembers
between sweeps is a :class:`SweepCache`.
"""

from typing import TYPE_CHECKING

from jaxdyn._lazy import lazy_attributes as _lazy_attributes

if TYPE_CHECKING:  # the names, for type checkers and readers; loaded on first use below
    from ._cache import SweepCache as SweepCache
    from ._diffeq import DiffeqProblem as DiffeqProblem
    from ._engine import run_sweep as run_sweep
    from ._grid import Grid as Grid
    from ._options import SweepOptions as SweepOptions
    from ._result import SweepResult as SweepResult
    from ._segmented import AbstractSegmentedMember as AbstractSegmentedMember

__all__ = [
    "AbstractSegmentedMember",
    "DiffeqProblem",
    "Grid",
    "SweepCache",
    "SweepOptions",
    "SweepResult",
    "run_sweep",
]

# Loaded on first use (as ``jaxdyn``'s own names): importing this package imports no JAX, so
# that the command line reads configs (``--show-config``) fast.
_HOMES = {
    "SweepCache": "._cache",
    "DiffeqProblem": "._diffeq",
    "run_sweep": "._engine",
    "Grid": "._grid",
    "SweepOptions": "._options",
    "SweepResult": "._result",
    "AbstractSegmentedMember": "._segmented",
}


__getattr__, __dir__ = _lazy_attributes(globals(), _HOMES)
