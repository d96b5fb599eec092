"""The sweep engine: hyperparameters x seeds as one jit(vmap) program, chunked and sharded."""

from ._engine import SweepResult as SweepResult, run_sweep as run_sweep
from ._grid import Grid as Grid
