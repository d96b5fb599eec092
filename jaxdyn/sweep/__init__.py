"""The sweep engine: hyperparameters x seeds as one jit(vmap) program, chunked and sharded."""

from ._devices import use_cpu_devices as use_cpu_devices
from ._engine import SweepResult as SweepResult, run_sweep as run_sweep
from ._grid import Grid as Grid
