"""A small registered experiment for testing the core (loaded with ``--import`` / JAXDYN_IMPORT).

dy/dt = r y^2 with y(0) = y0 drawn from the member's key: the closed form is
y(t) = y0 / (1 - r y0 t), which blows up at t* = 1 / (r y0) when r y0 > 0. Members whose
blow-up happens before t1 are stopped by an event and get Status.blowup.
"""

import dataclasses

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from jaxdyn import Status
from jaxdyn.evidence import Evidence, classified
from jaxdyn.runs import ConfigError, ExperimentConfig, negative_control, register_experiment
from jaxdyn.sweep import Grid


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
        saveat=diffrax.SaveAt(ts=ts, t1=True),
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10),
        # Exact event time by root finding: under shard_map this needs the engine's
        # per-device fallback (diffrax issue #765), which the 8-device test exercises.
        event=diffrax.Event(cond, root_finder=optx.Newton(rtol=1e-10, atol=1e-10)),
        max_steps=4096,
        throw=False,
    )
    status = Status.where(sol.event_mask, Status.blowup, Status.promote(sol.result))
    exact = y0 / (1.0 - r * y0 * ts)
    # After an event diffrax writes the terminal (event) time in the next save slot and
    # fills the rest with inf: the event time is the last finite save time.
    t_stop = jnp.max(jnp.where(jnp.isfinite(sol.ts), sol.ts, -jnp.inf))
    t_event = jnp.where(sol.event_mask, t_stop, jnp.inf)
    return {"y": sol.ys[:-1], "y0": y0, "exact": exact, "t_event": t_event, "status": status}


def blowup_evidence(rate, y0, t1, blown) -> Evidence:
    """Which members blow up before t1: the closed form says exactly those whose event time
    1/(r y0) - 1/(r 1e3) is in (0, t1)."""
    t_event = np.where(rate * y0 > 0, 1.0 / (rate * y0) - 1.0 / (rate * 1e3), np.inf)
    predicted = (t_event > 0) & (t_event < t1)
    return classified(
        "dy/dt = r y^2 reaches y = 1e3 before t1 exactly when the closed form says so",
        prediction=predicted,
        measured=np.asarray(blown),
        basis="event y = 1e3 located by Newton root finding",
    )


@negative_control("toy-blowup", "blowup_members")
def _blowup_with_the_opposite_sign():
    rate = np.array([-1.0, 0.5, 2.0])
    y0 = np.array([1.0, 1.0, 1.0])
    return blowup_evidence(-rate, y0, 1.0, blown=np.array([False, False, True]))


@register_experiment("toy-blowup", ToyConfig, "test-only: dy/dt = r y^2 sweep", paper=False)
def run_toy(config: ToyConfig, run):
    grid = Grid.product(
        {"rate": list(config.rates), "t1": [config.t1]}, seeds=config.seeds, base_seed=config.seed
    )
    result = run.sweep(
        "toy",
        toy_member,
        grid,
        accept=[Status.blowup],
        dims={"y": ("time",), "exact": ("time",)},
        coords={"time": np.linspace(0.0, 1.0, 11) * config.t1},  # the member's save times
    )
    ok = result.ok()  # successful: no blow-up before t1
    err = np.max(np.abs(result.outputs["y"][ok] - result.outputs["exact"][ok]))
    run.consistency(
        "closed_form", expected=0.0, measured=float(err), tolerance=1e-5, basis="rtol 1e-8"
    )
    # The event y = 1e3 happens at t = 1/(r y0) - 1/(r 1e3), located by root finding.
    blown = result.has_status(Status.blowup)
    rate, y0 = result.params["rate"][blown], result.outputs["y0"][blown]
    t_exact = 1.0 / (rate * y0) - 1.0 / (rate * 1e3)
    t_err = float(np.max(np.abs(result.outputs["t_event"][blown] - t_exact), initial=0.0))
    run.consistency("event_time", expected=0.0, measured=t_err, tolerance=1e-6, basis="Newton")
    run.evidence(
        "blowup_members",
        blowup_evidence(result.params["rate"], result.outputs["y0"], config.t1, blown),
    )
    run.report("blowups", measured=int(np.sum(blown)), claim="members that blew up")
    run.scalar("blowups", int(np.sum(blown)))
