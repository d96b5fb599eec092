"""copy-head-scaling: where softmax is first order in (L, V), and the three scaling laws
(copy_head.md, "The three scaling laws")."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ... import copyhead as ch, fit_power_law
from ...copyhead import _phase, _scaling
from ...evidence import local_exponents
from ...plotting import new_figure
from ...runs import Run, register_experiment
from ._common import CopyHeadConfig, require

AXES = ("L", "V")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScalingConfig(CopyHeadConfig):
    """P* of the reduced action across L and V (P in sequences), and the boundary V_c(L).

    Attributes:
        L_values, V_values: the (L, V) grid of the three classifications and the P* forms.
        boundary_L, boundary_iterations: L at which V_c(L) is bracketed; bisections in ln V.
        n_P: P grid of each phase diagram.
        law_L, law_V: softmax P* along L at each V (the L ln^2 L law).
        onset_L, onset_V: the linear onset along V at one L (the V^2 law).
        crossover_L, crossover_L_at_V, crossover_V, crossover_V_at_L: the linear crossover
            along L at one V and along V at one L (the L^{3/2} and V^{1/2} laws).
    """

    L_values: tuple[int, ...] = (16, 32, 64, 128)
    V_values: tuple[int, ...] = (4, 8, 16, 32)
    boundary_L: tuple[int, ...] = (16, 24, 32, 48)
    boundary_iterations: int = 8
    n_P: int = 50
    law_L: tuple[int, ...] = tuple(2**k for k in range(8, 41, 4))
    law_V: tuple[int, ...] = (4, 16)
    onset_L: int = 256
    onset_V: tuple[int, ...] = (4, 8, 16, 32, 64)
    crossover_L: tuple[int, ...] = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
    crossover_V: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128, 256)
    crossover_L_at_V: int = 4
    crossover_V_at_L: int = 512

    RANGES: ClassVar[str] = (
        "boundary_iterations >= 1; n_P >= 10; crossover_V_at_L >= 2; crossover_L_at_V >= 1"
    )

    def validate(self) -> None:
        super().validate()
        # L >= 2 and V >= 1; the (L, V) grids in any order, the laws' axes increasing
        grids = ("L_values", "V_values", "boundary_L")
        for name in (*grids, "law_L", "onset_V", "crossover_L", "crossover_V"):
            v, low, increasing = getattr(self, name), 1 if "V" in name else 2, name not in grids
            require(
                len(v) >= 3 and min(v) >= low and (not increasing or list(v) == sorted(set(v))),
                f"{name} needs >= 3 {'increasing ' * increasing}values >= {low}, got {v}",
            )

    @classmethod
    def quick(cls) -> dict:
        return dict(
            L_values=(16, 32, 64), V_values=(4, 8, 16), n_P=30, boundary_L=(16, 24, 32),
            boundary_iterations=4, law_L=tuple(2**k for k in range(8, 25, 4)), law_V=(16,),
            crossover_L=(256, 1024, 4096, 8192), crossover_V=(8, 32, 128, 256),
        )  # fmt: skip


BOUNDARY_CLAIM = "softmax is first order for L >= 16 when V is not much larger than L (V_c > L)"
CROSSOVER_L_CLAIM = "linear attention: crossover P ~ L^(3/2) (at fixed V)"
CROSSOVER_V_CLAIM = "linear attention: crossover P ~ V^(1/2) (at fixed L)"


@register_experiment(
    "copy-head-scaling",
    ScalingConfig,
    "softmax first-order boundary V_c(L); P* laws compared (AIC); linear onset/crossover fits",
    title="The three scaling laws",
    docs="copy_head.md#the-three-scaling-laws",
)
def run_scaling(c: ScalingConfig, run: Run) -> None:
    """copy-head-scaling: order, first-order boundary V_c(L) and P* laws over (L, V)."""
    grid = {"L": np.asarray(c.L_values), "V": np.asarray(c.V_values)}
    P_star = _softmax_grid(c, run, grid)
    _boundary(c, run)
    laws = {"softmax": _softmax_law(c, run), "onset": _onset_law(c, run)}
    lin = _linear_grid(c, run, grid)
    laws.update(_crossover_law(c, run))
    _figures(c, run, P_star, lin, laws)


def _softmax_grid(c: ScalingConfig, run: Run, grid: dict) -> np.ndarray:
    """Every (L, V): landscape, refinement and brute-force classifications and P*; the
    candidate forms of P*(L, V) ranked by AIC, and its exponent in L (tokens)."""
    P_star, orders, mismatches = _scaling.softmax_grid(
        c.L_values, c.V_values, 0.05 * c.temperature, 1e4 * c.temperature, c.n_P, run.log,
        **c.priors(),
    )  # fmt: skip
    run.scalar("softmax_classification", orders)
    run.save_arrays(softmax_P_star=P_star, dims={"softmax_P_star": AXES}, coords=grid)
    run.consistency(
        "softmax_three_classifications_agree",
        expected=0.0,
        measured=float(len(mismatches)),
        basis="one reduced model classified by grid refinement, landscape and brute force at "
        "every (L, V)",
        note="mismatches: " + (", ".join(mismatches) or "none"),
    )
    LL, VV = np.meshgrid(*(np.asarray(v, float) for v in grid.values()), indexing="ij")
    fits = _scaling.compare_scaling_forms(LL, VV, P_star / c.temperature)
    run.scalar("softmax_P_star_forms", [dataclasses.asdict(f) for f in fits])
    run.scalar("softmax_P_star_best_form", fits[0].name if fits else None)
    exponents = _scaling.tokens_exponents(c.L_values, c.V_values, P_star)
    run.scalar("softmax_tokens_exponent_in_L", exponents)
    return P_star


def _boundary(c: ScalingConfig, run: Run) -> None:
    """V_c(L) bracketed at each boundary L (:func:`jaxdyn.copyhead._scaling.boundary_bracket`)."""
    L = np.asarray(c.boundary_L)
    brackets = np.asarray(
        [_scaling.boundary_bracket(x, c.boundary_iterations, **c.priors()) for x in c.boundary_L]
    )
    run.save_arrays(
        boundary_V_bracket=brackets,
        dims={"boundary_V_bracket": ("boundary_L", "bracket_end")},
        coords={"boundary_L": L, "bracket_end": ["lower", "upper"]},
    )
    fit = fit_power_law(L.astype(float), np.sqrt(brackets[:, 0] * brackets[:, 1]))
    run.scalar("first_order_boundary", {f"L{x}": b for x, b in zip(L, brackets, strict=True)})
    exponent = {"V_c ~ L^x": fit.slope, "ci": [fit.ci_low, fit.ci_high]}
    run.scalar("first_order_boundary_exponent", exponent)
    run.evidence(
        "first_order_line_extends_beyond_V_equals_L",
        ch.claims.first_order_line_above_L(BOUNDARY_CLAIM, L[L >= 16], brackets[L >= 16]),
        note=f"V_c brackets {brackets.round(2).tolist()}",
    )


def _linear_grid(c: ScalingConfig, run: Run, grid: dict) -> dict:
    """Every (L, V): the closed-form onset against bisection, and the crossovers."""
    reduced = lambda L, V: dataclasses.replace(c, L=L, V=V).reduced("linear")
    table = _scaling.linear_table(reduced, c.L_values, c.V_values, c.n_P)
    run.consistency(
        "linear_onset_closed_form_matches_bisection",
        expected=0.0,
        measured=float(np.nanmax(np.append(table["bisection_error"], 0.0))),
        tolerance=1e-8,
        basis="one determinant root found twice: bisection (60 halvings) on the autodiff "
        "Hessian vs the quartic's roots; max relative difference over (L, V)",
    )
    arrays = {
        "linear_P_c": table["P_c"],
        "linear_crossover_raw": table["raw"],
        "linear_crossover_normalised": table["normalised"],
    }
    run.save_arrays(**arrays, dims={k: AXES for k in arrays}, coords=grid)
    for name, exponents in _scaling.linear_exponents(c.L_values, c.V_values, table).items():
        run.scalar(name, exponents)
    return table


def _softmax_law(c: ScalingConfig, run: Run) -> tuple:
    """P* (sequences) of the reduced softmax action at each V of law_V over law_L."""
    Ls = np.asarray(c.law_L, float)
    for V in c.law_V:
        reduced = lambda L, V=V: dataclasses.replace(c, L=L, V=V).reduced("softmax")
        P, law = _scaling.softmax_law(reduced, c.law_L, 0.05 * c.temperature, 1e6 * c.temperature)
        name = f"law_P_star_V{V}"
        run.save_arrays(**{name: P}, dims={name: ("law_L",)}, coords={"law_L": Ls})
        run.scalar(f"softmax_P_star_law_V{V}", law)
        run.evidence(f"softmax_P_star_L_ln2L_at_range[{V}]", ch.claims.softmax_P_star_law(Ls, P))
        run.evidence(
            f"softmax_P_star_L_ln2L_asymptotic[{V}]", ch.claims.softmax_P_star_asymptotic(Ls, P)
        )
    return Ls, P * Ls


def _onset_law(c: ScalingConfig, run: Run) -> tuple:
    """The closed-form linear onset P_c(V) at L = onset_L, for the configured alpha and for
    alpha = 0 (A = G), in sequences (the V exponent is the same in tokens)."""
    Vs = np.asarray(c.onset_V, float)
    out = {}
    for alpha in sorted({float(c.alpha), 0.0}, reverse=True):
        at = lambda V, alpha=alpha: dataclasses.replace(c, L=c.onset_L, V=V, alpha=alpha)
        P_c = out[alpha] = np.array([_phase.linear_onset(at(V).reduced("linear")) for V in Vs])
        tag = "" if alpha == c.alpha else "_alpha0"
        run.evidence(f"linear_onset_V2{tag}", ch.claims.onset_V2(Vs, P_c))
        exponents = local_exponents(Vs, P_c)[0].tolist()
        law = dict(alpha=alpha, L=c.onset_L, V=c.onset_V, P_c_sequences=P_c.tolist())
        run.scalar(f"linear_onset_law{tag}", {**law, "local_exponents": exponents})
    return Vs, out[float(c.alpha)]


def _crossover_law(c: ScalingConfig, run: Run) -> dict:
    """The linear crossover (c_G = c_1, and sqrt(L) c_G = c_1 of the global minimum; a root
    find per point) along crossover_L at crossover_L_at_V and along crossover_V at
    crossover_V_at_L; each law decided where its local exponent has settled."""
    V0, L1 = c.crossover_L_at_V, c.crossover_V_at_L
    reduced = lambda L, V: dataclasses.replace(c, L=L, V=V).reduced("linear")
    along_L, along_V, law = _scaling.crossovers(reduced, c.crossover_L, V0, L1, c.crossover_V)
    Ls, Vs = np.asarray(c.crossover_L, float), np.asarray(c.crossover_V, float)
    run.save_arrays(
        crossover_along_L=along_L,
        crossover_along_V=along_V,
        dims={
            "crossover_along_L": ("crossover", "crossover_L"),
            "crossover_along_V": ("crossover", "crossover_V"),
        },
        coords={"crossover_L": Ls, "crossover_V": Vs, "crossover": ["raw", "normalised"]},
    )
    run.scalar("linear_crossover_law", law)
    for check, claim, x, y, power, at in (
        ("linear_crossover_L_three_halves", CROSSOVER_L_CLAIM, Ls, along_L[0], 1.5, f"V = {V0}"),
        ("linear_crossover_V_half", CROSSOVER_V_CLAIM, Vs, along_V[0], 0.5, f"L = {L1}"),
    ):
        evidence = ch.claims.crossover_law(claim, x, y, power, 1.0)
        run.evidence(check, evidence, note=f"{at}; c_G = c_1 (raw convention)")
    return {"along_L": (Ls, along_L[0]), "along_V": (Vs, along_V[0])}


def _figures(c: ScalingConfig, run: Run, P_star, lin: dict, laws: dict) -> None:
    """The (L, V) grid (softmax P* in tokens, linear onset and crossover against L), and each
    law log-log with the paper's form and a power law through the top two points."""
    fig, ax = new_figure(1, 3)
    Ls = np.asarray(c.L_values)
    titles = ("softmax P* (tokens)", "linear onset P_c", "linear crossover c_G = c_1")
    grids = (P_star * Ls[:, None], lin["P_c"], lin["raw"])
    for a, y, title in zip(ax[0], grids, titles, strict=True):
        for j, V in enumerate(c.V_values):
            a.loglog(Ls, y[:, j], "o-", label=f"V={V}")
        a.set(title=title, xlabel="L")
        a.legend(fontsize=7)
    run.save_figure(fig, "scaling")
    panels = (
        ("softmax", 1.0, 2, f"softmax P* (tokens), V={c.law_V[-1]}", "L"),
        ("onset", 2.0, 0, f"linear onset P_c, L={c.onset_L}, alpha={c.alpha:g}", "V"),
        ("along_L", 1.5, 0, f"linear crossover, V={c.crossover_L_at_V}", "L"),
        ("along_V", 0.5, 0, f"linear crossover, L={c.crossover_V_at_L}", "V"),
    )
    fig, ax = new_figure(1, 4)
    for a, (name, power, logs, title, xlabel) in zip(ax[0], panels, strict=True):
        x, y = (np.asarray(v, float) for v in laws[name])
        x, y = x[np.isfinite(y) & (y > 0)], y[np.isfinite(y) & (y > 0)]
        a.set_title(title, fontsize=8)
        a.set_xlabel(xlabel)
        if x.size < 2:
            continue
        xs = np.geomspace(x.min(), x.max(), 100)
        paper = xs**power * np.log(xs) ** logs  # the paper's law through the top point
        k = np.log(y[-1] / y[-2]) / np.log(x[-1] / x[-2])
        a.loglog(x, y, "o", label="reduced theory")
        a.loglog(xs, paper * y[-1] / paper[-1], "--", label="paper's law")
        a.loglog(xs, y[-1] * (xs / x[-1]) ** k, ":", label=f"fitted x^{k:.2f}")
        a.legend(fontsize=6)
    run.save_figure(fig, "scaling_laws")
