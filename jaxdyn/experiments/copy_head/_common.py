"""Shared pieces of the copy-head experiments: config validation, heads, datasets, theory."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from ... import copyhead as ch
from ..._validation import require_positive as _require_positive
from ...copyhead import _hysteresis, _phase, _task
from ...evidence import Evidence, Verdict
from ...runs import ConfigError, ExperimentConfig

ATTENTIONS = ("linear", "softmax")
# The dims of an L x L score matrix G: a row is the position that attends (the query), a
# column the position it attends to (the key).
SCORE_DIMS = ("query_position", "key_position")


def require(condition: bool | np.bool_, message: str) -> None:
    """Raise a one-line ConfigError unless ``condition``."""
    if not condition:
        raise ConfigError(message)


def require_positive(**values: float | int) -> None:
    """Raise a one-line ConfigError unless every value is positive and finite (the rule of
    ``jaxdyn._validation.require_positive``)."""
    for name, v in values.items():
        try:
            _require_positive(name, v)
        except ValueError as error:
            raise ConfigError(str(error)) from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class CopyHeadConfig(ExperimentConfig):
    """Settings every copy-head experiment shares (copy_head.md, "Validation protocol").

    Attributes:
        L, V: sequence length and vocabulary.
        temperature, sigma_w2, sigma_g2: likelihood temperature and prior variances.
        alpha: linear attention A = G / L^alpha.
        precision: "single" (default) or "double": the arithmetic of the experiments'
            iterative loops over the O(L^2 V^2) statistics (SGLD, MALA's action, Adam).
            Single precision halves their memory traffic (2-3x faster on CPUs). Every end
            point, mode or chain state the checks use is measured in float64 on the float64
            statistics, and the Newton estimate of its distance to the exact minimum (the
            checks' optimisation bound) is float64 too, so the rounding is inside the error
            model; chain means are compared with standard errors over datasets.
        cpu_group_mb: on a CPU, the most megabytes of copy statistics (``N`` and ``NY``,
            ``2 L^2 V^2`` numbers per member) in one vmapped group of a sweep's members; 0 for
            no limit. The chains, MALA and Adam read every member's statistics at each step,
            so a group whose statistics fit in the last-level cache reads them from cache
            rather than from memory: at L = 64, V = 8 (2 MB per member in single
            precision) groups of 4 run copy-head-sgld's sweep about twice as fast as groups
            of 18 on a 32 MB-cache CPU, and a second experiment beside it slows it less
            (docs/benchmarks.md). Results are the same science for any value; the bits
            depend on the group width.
    """

    L: int = 32
    V: int = 8
    temperature: float = 1.0
    sigma_w2: float = 1.0
    sigma_g2: float = 1.0
    alpha: float = 1.0
    precision: str = "single"
    cpu_group_mb: float = 8.0

    def validate(self) -> None:
        require(self.L >= 2, f"L must be >= 2, got {self.L}")
        require(
            np.isfinite(self.cpu_group_mb) and self.cpu_group_mb >= 0,
            f"cpu_group_mb must be finite and >= 0, got {self.cpu_group_mb}",
        )
        require(
            self.precision in ("single", "double"),
            f"precision must be 'single' or 'double', got {self.precision!r}",
        )
        require(self.V >= 1, f"V must be >= 1, got {self.V}")
        require_positive(
            temperature=self.temperature, sigma_w2=self.sigma_w2, sigma_g2=self.sigma_g2
        )
        require(np.isfinite(self.alpha), f"alpha must be finite, got {self.alpha}")

    @property
    def loop_dtype(self):
        """dtype of the iterative loops (``precision``)."""
        return jnp.float32 if self.precision == "single" else jnp.float64

    def lowered(self, tree):
        """``tree`` (statistics, posterior, scores) in :attr:`loop_dtype`."""
        return _task.cast_floating(tree, self.loop_dtype)

    def head(self, attention: str) -> ch.AbstractCopyHead:
        if attention == "linear":
            return ch.LinearCopyHead(alpha=self.alpha)
        return ch.SoftmaxCopyHead()

    def posterior(self, attention: str) -> ch.CopyHeadPosterior:
        return ch.CopyHeadPosterior(
            self.head(attention), self.temperature, self.sigma_w2, self.sigma_g2
        )

    def reduced(self, attention: str, objective: str = "marginal") -> ch.AbstractReducedModel:
        common = dict(
            L=self.L,
            V=self.V,
            temperature=self.temperature,
            sigma_w2=self.sigma_w2,
            sigma_g2=self.sigma_g2,
            objective=ch.Objective.marginal if objective == "marginal" else ch.Objective.map,
        )
        if attention == "softmax":
            return ch.SoftmaxReduced(**common)
        return ch.LinearReduced(alpha=self.alpha, **common)

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
            its own (L, V), its records indexed ``[L=..,V=..]`` (:func:`for_each_setting`);
            datasets per setting from a power computation (copy_head.md, "Power").
    """

    attention: str = "softmax"
    P_values: tuple[float, ...] = (4.0, 8.0, 48.0, 96.0, 256.0)
    seeds: int = 3
    exclusion_factor: float = 1.5
    window_margin: float = 1.1
    settings: tuple[tuple[int, int, int], ...] = ()

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
        require(self.seeds >= 3, f"seeds must be >= 3 (standard errors), got {self.seeds}")
        for setting in self.settings:
            require(
                len(setting) == 3 and setting[0] >= 2 and setting[1] >= 1 and setting[2] >= 3,
                f"settings are (L >= 2, V >= 1, datasets >= 3), got {setting}",
            )
        require(
            self.exclusion_factor >= 1 and self.window_margin >= 1,
            f"exclusion_factor and window_margin must be >= 1, got "
            f"{self.exclusion_factor}, {self.window_margin}",
        )


def snug_sweep(run, name: str, member, grid, config: CopyHeadConfig, **labels):
    """``run.sweep`` with the vmap width narrowed so that the members fill whole groups: the
    fewest groups of at most the run's ``vmap_width``, of equal width (a 66-member sweep runs
    as 3 x 22, not as 3 x 32 with 30 padding members computed and discarded). On a CPU the
    width is at most :func:`cache_width` (unless ``config.cpu_group_mb`` is 0), so that one
    group's statistics stay in cache through its chains; the run's log says so when that
    narrows it. The width depends only on the grid, the config and the platform, so results
    stay bitwise the same for any process count. ``labels`` (``dims=``, ``coords=``,
    ``expected=``) go to ``run.sweep``."""
    width = run.options.vmap_width
    if jax.default_backend() == "cpu" and config.cpu_group_mb > 0 and cache_width(config) < width:
        width = cache_width(config)
        run.log(
            f"sweep '{name}': groups of at most {width} (cpu_group_mb = {config.cpu_group_mb:g}: "
            f"{statistics_bytes(config) / 2**20:g} MB of statistics per member)"
        )
    snug = snug_width(len(grid), width)
    options = dataclasses.replace(run.options, vmap_width=snug)
    return run.sweep(name, member, grid, options=options, **labels)


def statistics_bytes(config: CopyHeadConfig) -> int:
    """Bytes of one member's copy statistics ``N`` and ``NY`` (``L^2 V^2`` entries each) in
    the loops' dtype: what every step of its chains and descents reads."""
    return 2 * config.L**2 * config.V**2 * jnp.dtype(config.loop_dtype).itemsize


def cache_width(config: CopyHeadConfig) -> int:
    """The most members whose statistics fit in ``config.cpu_group_mb`` MB (at least one)."""
    return max(1, int(config.cpu_group_mb * 2**20) // statistics_bytes(config))


def snug_width(n_members: int, width: int) -> int:
    """The narrowest vmap width that runs ``n_members`` in as few groups as ``width`` does,
    all full but the last (at most one member short per group)."""
    return math.ceil(n_members / math.ceil(n_members / width))


def padded_statistics(key, L: int, V: int, P, P_max: int):
    """Statistics of the first P of P_max sampled sequences (P traced; fractional P weights
    the last sequence by its fraction, so the data term is continuous in P) and the data."""
    X, Y = ch.copy_task(key, P_max, L, V)
    w = jnp.clip(P - jnp.arange(P_max), 0.0, 1.0).astype(X.dtype)
    return ch.copy_statistics(X, Y, w), (X, Y, w)


def transition(model: ch.AbstractReducedModel, P_min: float, P_max: float, n_P: int = 60):
    """Landscape classification of a reduced model (:func:`jaxdyn.copyhead.locate_transition`)
    with the coexistence window and, for continuous onsets, the closed-form P_c."""
    diagram, fine, info = ch.locate_transition(model, P_min, P_max, n_P)
    if (
        isinstance(model, ch.LinearReduced)
        and info["transition_order"] is ch.TransitionOrder.second
    ):
        info = {**info, "P_star": _phase.linear_onset(model)}
    return diagram, fine, info


def branch_values(diagram, P, key: str):
    """Theory values of ``key`` on the uniform (up) and copy (down) branches at P."""
    lp = np.log(np.asarray(P, float))
    up = np.interp(lp, np.log(diagram.P), diagram.order_up[key])
    down = np.interp(lp, np.log(diagram.P), diagram.order_down[key])
    return up, down


def theory_at(diagram, P, key: str):
    """Global-minimum theory value of ``key`` at P (log-linear interpolation)."""
    return np.interp(np.log(np.asarray(P, float)), np.log(diagram.P), diagram.order_global[key])


def critical_value(n: int) -> float:
    """Two-sided 99% Student-t quantile for a mean over n independent datasets (n - 1 degrees
    of freedom): with 3 datasets a standard error is itself uncertain, and 9.9 standard
    errors, not 4, bound a 1% false alarm. NaN below two datasets."""
    from scipy.stats import t

    return float(t.ppf(0.995, n - 1)) if n >= 2 else float("nan")


def standard_error(values: np.ndarray) -> float:
    """Standard error of the mean of independent values (NaN with fewer than two)."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    return float(np.std(v, ddof=1) / np.sqrt(v.size)) if v.size >= 2 else float("nan")


def _over(reduce, values, mask) -> float:
    return float(reduce(values[mask])) if mask.any() else float("nan")


def check_hysteresis(run, prefix, result, values, order, info, diagram, margin):
    """Hysteresis between the uniform (``start = 0``) and the copying (``start = 1``)
    initialisation, per dataset and P, as evidence against the theory's order
    (:func:`jaxdyn.copyhead.hysteresis_evidence`).

    First order (with a coexistence window ``(lo, hi)``): runs are in different minima when
    they differ by more than half the jump; every dataset must disagree for P well inside the
    window (``lo m < P < hi / m``) and agree well outside it (``P < lo / m^2`` or
    ``P > hi m^2``). Otherwise one minimum at every P: the starts must agree within 0.1 x the
    largest order-parameter amplitude. An empty P range is inconclusive.
    Returns the :class:`jaxdyn.copyhead.PairDisagreement`.
    """
    P, seeds, start, ok = result.params["P"], result.seeds, result.params["start"], result.ok()
    if order is ch.TransitionOrder.first and info["coexistence"] is not None:
        hyst = _hysteresis.pair_disagreement(
            P, seeds, start, values, ok, tolerance=0.5 * info["jump"]
        )
        lo, hi = info["coexistence"]
        inside = (hyst.P > lo * margin) & (hyst.P < hi / margin)
        outside = (hyst.P < lo / margin**2) | (hyst.P > hi * margin**2)
        run.evidence(
            f"{prefix}_hysteresis_inside_window",
            ch.claims.hysteresis(
                "two coexisting minima: every dataset's two starts stay apart inside the "
                "theory's coexistence window",
                hyst.disagree_fraction[inside],
                expected=True,
            ),
            note=f"theory coexistence ({lo:.4g}, {hi:.4g}); P in ({lo * margin:.4g}, "
            f"{hi / margin:.4g}); per P {hyst.where(inside)}",
        )
        run.evidence(
            f"{prefix}_no_hysteresis_outside_window",
            ch.claims.hysteresis(
                "one minimum outside the coexistence window: both starts agree",
                hyst.disagree_fraction[outside],
                expected=False,
            ),
            note=f"P outside ({lo / margin**2:.4g}, {hi * margin**2:.4g}); per P "
            f"{hyst.where(outside)}",
        )
        return hyst
    scale = float(np.max(np.abs(diagram.order_global["amplitude"])))
    hyst = _hysteresis.pair_disagreement(P, seeds, start, values, ok, tolerance=0.1 * scale)
    run.evidence(
        f"{prefix}_no_hysteresis",
        ch.claims.hysteresis(
            f"theory {order.name}: one minimum at every P, both starts agree",
            hyst.disagree_fraction,
            expected=False,
        ),
        note=f"the starts agree within 0.1 x max amplitude ({0.1 * scale:.3g}); per P "
        f"{hyst.where(hyst.P > 0)}",
    )
    return hyst


def info_json(info: dict) -> dict:
    """A transition's ``info`` (:func:`jaxdyn.copyhead.classify_transition`) for summary.json:
    the order by name."""
    return {k: (v.name if isinstance(v, ch.TransitionOrder) else v) for k, v in info.items()}


POWER_FRACTION = 0.2  # a comparison must resolve a fifth of the effect it is to detect


def power_record(table, effect) -> dict:
    """The power of a comparison over datasets (rows of ``table``; columns: the P compared):
    per column the standard deviation over datasets and the standard error of the mean,
    against ``POWER_FRACTION`` x ``effect`` (the jump or drop the comparison must detect).
    ``sufficient``: every column's standard error is at most that. ``datasets_needed``: the
    fewest datasets (at least 3) whose standard error at the measured standard deviation
    would be, (sd / (effect / 5))^2 rounded up, the number a rerun should use."""
    x = np.atleast_2d(np.asarray(table, float))
    n = np.sum(np.isfinite(x), axis=0)
    cols = [c[np.isfinite(c)] for c in x.T]
    sd = np.array([np.std(c, ddof=1) if c.size >= 2 else np.nan for c in cols])
    se = sd / np.sqrt(np.maximum(n, 1))
    threshold = POWER_FRACTION * abs(float(effect))
    finite = bool(np.all(np.isfinite(se))) and threshold > 0
    needed = max(3, int(np.ceil(np.max((sd / threshold) ** 2) - 1e-12))) if finite else None
    return {
        "datasets": int(np.min(n)) if n.size else 0,
        "dof": int(max(np.min(n) - 1, 0)) if n.size else 0,
        "sd": sd.tolist(),
        "se": se.tolist(),
        "effect": abs(float(effect)),
        "threshold": threshold,
        "se_over_effect": (se / abs(float(effect))).tolist() if effect else None,
        "sufficient": finite and bool(np.all(se <= threshold)),
        "datasets_needed": needed,
    }


def powered(evidence: Evidence, record: dict) -> Evidence:
    """``evidence`` unless it holds on a comparison without power (:func:`power_record` not
    ``sufficient``): then ``inconclusive``, saying how many datasets would decide it. A
    refutation stands (its interval already excludes the prediction)."""
    if record["sufficient"] or evidence.verdict is not Verdict.holds:
        return evidence
    se = np.asarray(record["se"], float)
    worst = float(np.nanmax(se)) if np.isfinite(se).any() else float("nan")
    return dataclasses.replace(
        evidence,
        verdict=Verdict.inconclusive,
        reason=f"too little power: SE {worst:.3g} over {record['datasets']} datasets "
        f"(dof {record['dof']}) exceeds a fifth of the effect ({record['threshold']:.3g}); "
        f"{record['datasets_needed']} datasets at the measured SD would resolve it",
    )


def setting_tag(L: int, V: int) -> str:
    """The index an extra (L, V) setting's records carry: ``check[L=16,V=8]``."""
    return f"L={L},V={V}"


class SettingRun:
    """A :class:`jaxdyn.runs.Run` seen through one extra (L, V) setting of a config's
    ``settings``: every check, scalar, array, figure and sweep it records is named with the
    setting (checks as ``name[L=16,V=8]``, which share the negative control of ``name``);
    everything else is the run's."""

    def __init__(self, run, L: int, V: int):
        self._run, self.tag = run, setting_tag(L, V)
        self._file = f"L{L}_V{V}"

    def __getattr__(self, name):
        return getattr(self._run, name)

    def evidence(self, name, evidence, **kwargs):
        return self._run.evidence(f"{name}[{self.tag}]", evidence, **kwargs)

    def consistency(self, name, **kwargs):
        return self._run.consistency(f"{name}[{self.tag}]", **kwargs)

    def scalar(self, name, value):
        return self._run.scalar(f"{name}[{self.tag}]", value)

    def report(self, name, **kwargs):
        return self._run.report(f"{name}[{self.tag}]", **kwargs)

    def save_arrays(self, *, dims=None, coords=None, **arrays):
        """The arrays as ``<setting>.<name>``; a coordinate this call declares (and every
        dimension named after it) as ``<setting>_<coordinate>``, since its values are the
        setting's own (dimensions without values keep their names)."""
        rename = {name: f"{self._file}_{name}" for name in (coords or {})}

        def renamed(names):
            return tuple(rename.get(d, d) for d in names)

        coords = {
            rename[name]: (renamed(value[0]), value[1]) if isinstance(value, tuple) else value
            for name, value in (coords or {}).items()
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
    ``(L, V, datasets)`` of ``c.settings`` with a :class:`SettingRun` (the full size's power
    at several (L, V): copy_head.md, "Power")."""
    experiment(c, run)
    for L, V, seeds in c.settings:
        run.log(f"setting L = {L}, V = {V} with {seeds} datasets")
        setting = dataclasses.replace(c, L=L, V=V, seeds=seeds, settings=())
        experiment(setting, SettingRun(run, L, V))
