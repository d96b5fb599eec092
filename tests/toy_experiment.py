"""A small registered experiment for testing the core (loaded via JAXDYN_EXPERIMENT_MODULES).

dy/dt = r y^2 with y(0) = y0 drawn from the member's key: the closed form is
y(t) = y0 / (1 - r y0 t), which blows up at t* = 1 / (r y0) when r y0 > 0. Members whose
blow-up happens before t1 are stopped by an event and get Status.BLOWUP.
"""

import dataclasses

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn._status import Status, status_from_diffrax
from jaxdyn.runs import ConfigError, ExperimentConfig, register_experiment
from jaxdyn.sweep import Grid, run_sweep


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToyConfig(ExperimentConfig):
    rates: tuple[float, ...] = (-1.0, -0.5, 0.1, 0.5, 2.0)
    seeds: int = 4
    t1: float = 1.0

    def validate(self):
        if self.t1 <= 0:
            raise ConfigError(f"t1 must be positive, got {self.t1}")

    @classmethod
    def quick(cls):
        return {"seeds": 2}


def toy_member(params, key):
    r = params["rate"]
    y0 = jax.random.uniform(key, (), minval=0.5, maxval=1.5)
    t1 = params["t1"]
    ts = jnp.linspace(0.0, 1.0, 11) * t1

    def cond(t, y, args, **kw):
        return y - 1e3

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, a: a * y**2),
        diffrax.Tsit5(),
        0.0,
        t1,
        0.01,
        y0,
        args=r,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10),
        event=diffrax.Event(cond),
        max_steps=4096,
        throw=False,
    )
    status = status_from_diffrax(sol.result)
    status = jnp.where(sol.event_mask, jnp.int32(Status.BLOWUP), status)
    exact = y0 / (1.0 - r * y0 * ts)
    return {"y": sol.ys, "y0": y0, "exact": exact, "status": status}


@register_experiment("toy-blowup", ToyConfig, "test-only: dy/dt = r y^2 sweep", paper=False)
def run_toy(config: ToyConfig, run):
    grid = Grid.product(
        {"rate": list(config.rates), "t1": [config.t1]}, seeds=config.seeds, base_seed=config.seed
    )
    result = run_sweep(
        toy_member,
        grid,
        name="toy",
        run=run,
    )
    run.record_sweep(result)
    ok = result.ok
    err = np.max(np.abs(result.outputs["y"][ok] - result.outputs["exact"][ok]))
    run.check("closed_form", expected=0.0, measured=float(err), tolerance=1e-5)
    run.scalar("blowups", int(np.sum(result.status == Status.BLOWUP)))
