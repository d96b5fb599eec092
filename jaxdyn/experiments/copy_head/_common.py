"""Shared pieces of the copy-head experiments: configs, the cache-sized sweep, hysteresis
between two starts, and the extra (L, V) settings of a run."""

from __future__ import annotations

import dataclasses
import math
import types
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from ... import copyhead as ch
from ...copyhead import _compare, _hysteresis, _phase, _reduced, _task
from ...runs import ConfigError, ExperimentConfig

ATTENTIONS = ("linear", "softmax")
SCORE_DIMS = ("query_position", "key_position")  # an L x L score matrix: query row, key column


def require(condition, message: str) -> None:
    """Raise a one-line ConfigError unless ``condition``."""
    if not condition:
        raise ConfigError(message)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CopyHeadConfig(ExperimentConfig):
    """Settings every copy-head experiment shares (copy_head.md, "Validation protocol").

    Attributes:
        L, V: sequence length and vocabulary.
        temperature, sigma_w2, sigma_g2: likelihood temperature and prior variances.
        alpha: linear attention A = G / L^alpha.
        precision: "single" (default) or "double": the arithmetic of the iterative loops
            (SGLD, MALA, Adam) over the O(L^2 V^2) statistics. Every end point, mode or chain
            state a check uses is measured in float64 on the float64 statistics, with its
            Newton estimate of the distance to the exact minimum, so rounding is inside the
            error model.
        cpu_group_mb: on a CPU, the most megabytes of copy statistics (``2 L^2 V^2`` numbers
            per member) in one vmapped group of a sweep, so that a group's statistics stay in
            the last-level cache through its loops; 0 for no limit. Results are the same
            science for any value; the bits depend on the group width.
    """

    L: int = 32
    V: int = 8
    temperature: float = 1.0
    sigma_w2: float = 1.0
    sigma_g2: float = 1.0
    alpha: float = 1.0
    precision: str = "single"
    cpu_group_mb: float = 8.0

    RANGES: ClassVar[str] = (
        "L >= 2; V >= 1; cpu_group_mb >= 0; temperature > 0; sigma_w2 > 0; sigma_g2 > 0"
    )

    def validate(self) -> None:
        """The ``RANGES`` of every class in the hierarchy (``ExperimentConfig``), then the rest."""
        super().validate()
        require(
            self.precision in ("single", "double"),
            f"precision must be 'single' or 'double', got {self.precision!r}",
        )
        require(np.isfinite(self.alpha), f"alpha must be finite, got {self.alpha}")

    @property
    def loop_dtype(self):
        return jnp.float32 if self.precision == "single" else jnp.float64

    def priors(self) -> dict:
        """The likelihood temperature and the prior variances, by name."""
        return dict(temperature=self.temperature, sigma_w2=self.sigma_w2, sigma_g2=self.sigma_g2)

    def posterior(self, attention: str) -> ch.CopyHeadPosterior:
        """The Bayesian copy head of ``attention`` ("softmax", or "linear" with ``alpha``)."""
        linear = attention == "linear"
        head = ch.LinearCopyHead(alpha=self.alpha) if linear else ch.SoftmaxCopyHead()
        return ch.CopyHeadPosterior(head, **self.priors())

    def reduced(self, attention: str, objective: str = "marginal") -> ch.AbstractReducedModel:
        """The reduced model of ``attention`` at (L, V); ``objective`` "marginal" or "map"."""
        common = dict(L=self.L, V=self.V, objective=getattr(ch.Objective, objective))
        if attention == "softmax":
            return ch.SoftmaxReduced(**common, **self.priors())
        return ch.LinearReduced(alpha=self.alpha, **common, **self.priors())

    def copy_scores(self, attention: str) -> jax.Array:
        """Copy-pattern start G = gap S: gap = 2 ln L (softmax) or 0.25 L^alpha (linear)."""
        gap = 2.0 * np.log(self.L) if attention == "softmax" else 0.25 * self.L**self.alpha
        return gap * _task.shift_matrix(self.L)


@dataclasses.dataclass(frozen=True, kw_only=True)
class NetworkConfig(CopyHeadConfig):
    """Settings shared by the trained-network and posterior experiments.

    Attributes:
        attention: "softmax" or "linear".
        P_values: P away from the transition (sequences).
        seeds: datasets (checks use standard errors across them: at least 3).
        exclusion_factor: theory comparisons skip P within this factor of the transition.
        window_margin: hysteresis asserted inside a theory coexistence window shrunk by this
            factor at each end, its absence outside the window widened by its square.
        settings: further (L, V, datasets) at which the whole experiment runs again after
            its own (L, V), its records indexed ``[L=..,V=..]`` (copy_head.md, "Power").
    """

    attention: str = "softmax"
    P_values: tuple[float, ...] = (4.0, 8.0, 48.0, 96.0, 256.0)
    seeds: int = 3
    exclusion_factor: float = 1.5
    window_margin: float = 1.1
    settings: tuple[tuple[int, int, int], ...] = ()
    RANGES: ClassVar[str] = "seeds >= 3; exclusion_factor >= 1; window_margin >= 1"

    def validate(self) -> None:
        super().validate()
        require(
            self.attention in ATTENTIONS,
            f"attention must be one of {ATTENTIONS}, got {self.attention!r}",
        )
        require(
            bool(self.P_values) and min(self.P_values) > 0,
            f"P_values must be non-empty and > 0, got {self.P_values}",
        )
        for setting in self.settings:
            require(
                len(setting) == 3 and setting[0] >= 2 and setting[1] >= 1 and setting[2] >= 3,
                f"settings are (L >= 2, V >= 1, datasets >= 3), got {setting}",
            )

    def keys(self) -> tuple[str, ...]:
        """Order parameters compared with theory: c_G (softmax); c_1 and c_G (linear)."""
        return ("c_G",) if self.attention == "softmax" else ("c_1", "c_G")

    def transition_key(self) -> str:
        """The order parameter that leaves zero at the transition: c_G (softmax), c_1
        (linear pooling onset)."""
        return "c_G" if self.attention == "softmax" else "c_1"


def statistics_bytes(config: CopyHeadConfig) -> int:
    """Bytes of one member's copy statistics (``2 L^2 V^2`` entries) in the loops' dtype."""
    return 2 * config.L**2 * config.V**2 * jnp.dtype(config.loop_dtype).itemsize


def cache_width(config: CopyHeadConfig) -> int:
    """The most members whose statistics fit in ``config.cpu_group_mb`` MB (at least one)."""
    return max(1, int(config.cpu_group_mb * 2**20) // statistics_bytes(config))


def snug_width(n_members: int, width: int) -> int:
    """The narrowest vmap width that runs ``n_members`` in as few groups as ``width`` does."""
    return math.ceil(n_members / math.ceil(n_members / width))


def snug_sweep(run, name: str, member, grid, config: CopyHeadConfig, **labels):
    """``run.sweep`` in the fewest equal groups of at most the run's ``vmap_width`` (at most
    :func:`cache_width` on a CPU unless ``cpu_group_mb`` is 0). The width depends only on the
    grid, the config and the platform, so results are the same for any process count."""
    width = run.options.vmap_width
    if jax.default_backend() == "cpu" and config.cpu_group_mb > 0 and cache_width(config) < width:
        width = cache_width(config)
        run.log(
            f"sweep '{name}': groups of at most {width} (cpu_group_mb = {config.cpu_group_mb:g})"
        )
    options = dataclasses.replace(run.options, vmap_width=snug_width(len(grid), width))
    return run.sweep(name, member, grid, options=options, **labels)


def check_hysteresis(run, prefix, result, values, a, order):
    """Hysteresis between the uniform (``start = 0``) and the copying (``start = 1``) start per
    dataset and P, against the theory ``a`` of the given ``order``. First order with a
    coexistence window ``(lo, hi)``: runs more than half the jump apart are in different
    minima; every dataset must disagree well inside the window (``lo m < P < hi / m``, m the
    config's ``window_margin``) and agree well outside it (``P < lo / m^2`` or
    ``P > hi m^2``). Otherwise the starts must agree within 0.1 x the largest
    order-parameter amplitude. Returns the pair disagreement."""
    P, seeds, start, ok = result.params["P"], result.seeds, result.params["start"], result.ok()
    info, amplitude = a.info, a.diagram.order_global["amplitude"]
    first = order is ch.TransitionOrder.first and info["coexistence"] is not None
    tol = 0.5 * info["jump"] if first else 0.1 * float(np.max(np.abs(amplitude)))
    hyst = _hysteresis.pair_disagreement(P, seeds, start, values, ok, tolerance=tol)
    if first:
        (lo, hi), m = info["coexistence"], a.config.window_margin
        inside = "two coexisting minima: every dataset's two starts stay apart inside the theory's"
        rows = (
            ("hysteresis_inside_window", inside + " coexistence window",
             (hyst.P > lo * m) & (hyst.P < hi / m), True,
             f"theory coexistence ({lo:.4g}, {hi:.4g}); P in ({lo * m:.4g}, {hi / m:.4g})"),
            ("no_hysteresis_outside_window",
             "one minimum outside the coexistence window: both starts agree",
             (hyst.P < lo / m**2) | (hyst.P > hi * m**2), False,
             f"P outside ({lo / m**2:.4g}, {hi * m**2:.4g})"),
        )  # fmt: skip
    else:
        claim = f"theory {order.name}: one minimum at every P, both starts agree"
        span = f"the starts agree within 0.1 x max amplitude ({tol:.3g})"
        rows = (("no_hysteresis", claim, hyst.P > 0, False, span),)
    for name, claim, mask, expected, span in rows:
        evidence = ch.claims.hysteresis(claim, hyst.disagree_fraction[mask], expected=expected)
        run.evidence(f"{prefix}_{name}", evidence, note=f"{span}; per P {hyst.where(mask)}")
    return hyst


def reduced_theory(c, attention, objective, lo=None, hi=None, *, n_P=60, refine=True):
    """The reduced theory a run of ``attention`` is checked against, on [lo, hi] (by default
    [P_min / 2, 2 P_max] of a :class:`NetworkConfig`'s ``P_values``): its transition
    (``info``), P_t (P*, the onset, or the refinement window's centre) and ``order`` (by grid
    refinement with ``refine``, else the landscape's)."""
    lo, hi = lo or 0.5 * min(c.P_values), hi or 2.0 * max(c.P_values)
    model = c.reduced(attention, objective)
    diagram, _, info = _phase.transition_with_onset(model, lo, hi, n_P)
    refined = ch.transition_order(model, lo, hi) if refine or info["P_star"] is None else None
    P_t = info["P_star"] or float(np.sqrt(np.prod(refined.window)))
    order = refined.order if refine else info["transition_order"]
    a = types.SimpleNamespace(config=c, model=model, diagram=diagram, info=info, P_t=P_t)
    a.refined, a.order, a.first = refined, order, order is ch.TransitionOrder.first
    return a


def record_theory(run, a, arrays: dict, **extra) -> None:
    """The theory ``a`` as the scalar ``theory`` (objective, transition, ``extra``) and its
    ``arrays`` as ``theory.<name>`` along its P grid ``theory_P``."""
    label = _reduced.objective_label(a.model.objective)
    run.scalar("theory", {"objective": label, **a.info, **extra})  # the order by its name
    save_record(run, "theory.", {**arrays, "P": a.diagram.P}, "theory_P", a.diagram.P)


def check_theory(run, a, result, mask, key: str, names: str, check: str, claim: str) -> dict:
    """The runs ``mask`` of ``result`` against the theory ``a`` at their P
    (:func:`jaxdyn.copyhead._compare.corrected_comparison` of the outputs ``names`` formats:
    the value, its bootstrap, their optimiser errors), recorded as evidence: the theory inside
    every 99% t x SE + bound interval, the alternative off by the effect
    (:func:`jaxdyn.copyhead._compare.theory_effect`: the transition's jump, or the change over
    the range); ``inconclusive`` unless the standard errors are at most effect / 5 (its
    power, recorded as ``<check before _matches_theory>_power``)."""
    value, boot, error, boot_error = (n.format(key) for n in names.split())
    error = 2.0 * result.outputs[error] + result.outputs[boot_error]
    cfg, raw, boot = a.config, result.masked(value), result.masked(boot)
    c = _compare.corrected_comparison(
        result.params["P"], result.seeds, mask, raw, boot, error, cfg.posterior(cfg.attention),
        a.model, key, cfg.L, cfg.V,
    )  # fmt: skip
    effect_size = _compare.theory_effect(
        a.model, a.diagram, a.P_t, a.first, key, getattr(a, "loss", ())
    )
    power = _compare.power_record(c["table"], effect_size)
    run.scalar(check.split("_matches_theory")[0] + "_power", power)
    evidence = ch.claims.matches_theory(
        claim,
        c["table"],
        c["theory"],
        np.full(c["theory"].shape, effect_size),
        bound=c["optimiser_allowance"] + c["theory_solver_error"],
        basis="bootstrap-corrected (2 x - x_boot) per dataset; alternative: off by the effect; "
        f"bound: {_compare.NEWTON_SAFETY:g} x mean Newton estimate + the reduced solver's error",
    )
    run.evidence(
        check,
        ch.claims.powered(evidence, power),
        note=f"P = {c['P'].tolist()} (uncorrected {np.round(c['uncorrected'], 5).tolist()}); "
        f"effect {effect_size:.4g}; SE/effect {np.round(c['se'] / effect_size, 3).tolist()}",
    )
    return c


def check_coverage(run, check: str, what: str, posterior, G, mask, seeds, note: str) -> None:
    """Per dataset, the share of the attention patterns ``posterior.attention(G[mask])``'s
    non-uniform part in span{U, S} (:func:`jaxdyn.copyhead.coverage`), claimed >= 0.9."""
    A = jax.vmap(posterior.attention)(jnp.asarray(G[mask]))
    seeds = seeds[mask]
    per_dataset = [float(ch.coverage(A[seeds == s])) for s in np.unique(seeds)]
    claim = f"span{{U, S}} captures the vast majority (>= 0.9) of {what} in the copy phase"
    run.evidence(
        check,
        ch.claims.copy_span_coverage(claim, per_dataset),
        note=f"{note}; per dataset {np.round(per_dataset, 4).tolist()}",
    )


def save_record(run, prefix: str, record: dict, dim: str, coord) -> None:
    """``record``'s arrays as ``<prefix><name>`` along ``dim`` (coordinate ``coord``), a
    second axis (a reduced state) named ``state``."""
    dims = {f"{prefix}{k}": (dim, "state")[: np.ndim(v)] for k, v in record.items()}
    run.save_arrays(
        dims=dims, coords={dim: coord}, **{f"{prefix}{k}": v for k, v in record.items()}
    )


class SettingRun:
    """A run seen through one extra (L, V) setting: every check, scalar, array, figure and
    sweep it records is named with the setting (checks as ``name[L=16,V=8]``, sharing the
    negative control of ``name``); everything else is the run's."""

    def __init__(self, run, L: int, V: int):
        self._run, self.tag, self._file = run, f"L={L},V={V}", f"L{L}_V{V}"

    def __getattr__(self, name):
        return getattr(self._run, name)

    evidence, consistency, scalar, report = (
        lambda self, name, *a, _m=m, **k: getattr(self._run, _m)(f"{name}[{self.tag}]", *a, **k)
        for m in ("evidence", "consistency", "scalar", "report")
    )

    def save_arrays(self, *, dims=None, coords=None, **arrays):
        """The arrays as ``<setting>.<name>``; a coordinate this call declares (and every
        dimension named after it) as ``<setting>_<coordinate>`` (its values are the
        setting's own)."""
        rename = {name: f"{self._file}_{name}" for name in (coords or {})}
        renamed = lambda names: tuple(rename.get(d, d) for d in names)
        coords = {
            rename[k]: (renamed(v[0]), v[1]) if isinstance(v, tuple) else v
            for k, v in (coords or {}).items()
        }
        dims = {f"{self._file}.{k}": renamed(v) for k, v in (dims or {}).items()}
        return self._run.save_arrays(
            dims=dims, coords=coords, **{f"{self._file}.{k}": v for k, v in arrays.items()}
        )

    def save_figure(self, fig, name, **kwargs):
        return self._run.save_figure(fig, f"{name}_{self._file}", **kwargs)

    def sweep(self, name, *args, **kwargs):
        return self._run.sweep(f"{name}_{self._file}", *args, **kwargs)


def for_each_setting(c: NetworkConfig, run, experiment) -> None:
    """``experiment(config, run)`` at the config's own (L, V), then at each extra setting
    ``(L, V, datasets)`` of ``c.settings`` through a :class:`SettingRun`."""
    experiment(c, run)
    for L, V, seeds in c.settings:
        run.log(f"setting L = {L}, V = {V} with {seeds} datasets")
        setting = dataclasses.replace(c, L=L, V=V, seeds=seeds, settings=())
        experiment(setting, SettingRun(run, L, V))
