"""copy-head-scaling: where softmax is first order in (L, V), and which laws P* follows.

copy_head.md, "What the reconstruction gives": the first-order line ends at V_c(L) [open];
softmax P* ~ L ln^2 L (paper) or a ln^2 L + b V^2 ln L / L + c (reconstruction); linear onset
P_c ~ V^2 (paper) or V^{3/2} (alpha = 1); linear crossover ~ L^{3/2} V^{1/2} (paper).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ... import copyhead as ch, fit_power_law
from ...copyhead import _phase, _scaling, _transition
from ...evidence import local_exponents
from ...evidence._decisions import _extrapolate  # the value and error behind extrapolated_exponent
from ...plotting import new_figure
from ...runs import Run, register_experiment
from ._common import CopyHeadConfig, require, transition


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScalingConfig(CopyHeadConfig):
    """P* of the reduced action across L and V (P in sequences), and the boundary V_c(L).

    Attributes:
        L_values, V_values: the (L, V) grid.
        boundary_L: L values at which V_c(L) is bracketed.
        boundary_iterations: bisections in ln V per boundary point.
        n_P: P grid of each phase diagram.
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

    def validate(self) -> None:
        super().validate()
        require(
            len(self.L_values) >= 3 and min(self.L_values) >= 2,
            f"L_values needs >= 3 values, each >= 2, got {self.L_values}",
        )
        require(
            len(self.V_values) >= 3 and min(self.V_values) >= 1,
            f"V_values needs >= 3 values, each >= 1, got {self.V_values}",
        )
        require(
            len(self.boundary_L) >= 3 and min(self.boundary_L) >= 2,
            f"boundary_L needs >= 3 values, each >= 2, got {self.boundary_L}",
        )
        require(self.boundary_iterations >= 1, "boundary_iterations must be >= 1")
        require(self.n_P >= 10, f"n_P must be >= 10, got {self.n_P}")
        for name in ("law_L", "onset_V", "crossover_L", "crossover_V"):
            values = getattr(self, name)
            require(
                len(values) >= 3 and min(values) >= 1 and list(values) == sorted(set(values)),
                f"{name} needs >= 3 increasing values >= 1, got {values}",
            )
        require(
            min(self.law_L) >= 2 and min(self.crossover_L) >= 2 and self.crossover_V_at_L >= 2,
            "L values must be >= 2",
        )
        require(self.crossover_L_at_V >= 1, "crossover_L_at_V must be >= 1")

    @classmethod
    def quick(cls) -> dict:
        return {
            "L_values": (16, 32, 64),
            "V_values": (4, 8, 16),
            "n_P": 30,
            "boundary_L": (16, 24, 32),
            "boundary_iterations": 4,
            "law_L": tuple(2**k for k in range(8, 25, 4)),
            "law_V": (16,),
            "crossover_L": (256, 1024, 4096, 8192),
            "crossover_V": (8, 32, 128, 256),
        }


@register_experiment(
    "copy-head-scaling",
    ScalingConfig,
    "softmax first-order boundary V_c(L); P* laws compared (AIC); linear onset/crossover fits",
    title="The three scaling laws",
    docs="copy_head.md#the-three-scaling-laws",
)
def run_scaling(c: ScalingConfig, run: Run) -> None:
    """copy-head-scaling: order, first-order boundary V_c(L) and P* laws over (L, V)."""
    sm = _softmax_grid(c, run)
    _boundary(c, run)
    _softmax_laws(c, run, sm)
    law = _softmax_law(c, run)
    lin = _linear_grid(c, run)
    onset = _onset_law(c, run)
    cross = _crossover_law(c, run)
    _figure(c, run, sm, lin)
    _law_figures(c, run, law, onset, cross)


def _softmax_grid(c: ScalingConfig, run: Run) -> dict:
    """Every (L, V): landscape, refinement and brute-force classifications, P*, barrier."""
    Ls, Vs = c.L_values, c.V_values
    P_star = np.full((len(Ls), len(Vs)), np.nan)
    orders, mismatches = {}, []
    for i, L in enumerate(Ls):
        for j, V in enumerate(Vs):
            cfg = dataclasses.replace(c, L=L, V=V)
            model = cfg.reduced("softmax")
            lo, hi = 0.05 * c.temperature, 1e4 * c.temperature
            _, _, info = transition(model, lo, hi, c.n_P)
            refined = ch.transition_order(
                model, lo, hi, levels=(16, 32, 64, 128), offsets=4, fit_levels=3
            )
            coexist, window, barrier = _scaling.softmax_coexists(
                L, V, temperature=c.temperature, sigma_w2=c.sigma_w2, sigma_g2=c.sigma_g2
            )
            first = ch.TransitionOrder.first
            found = {
                "landscape": info["transition_order"].name,
                "refinement": refined.order.name,
                "brute_force_two_minima": bool(coexist),
                "P_star": info["P_star"],
                "barrier": barrier,
                "refinement_exponent": refined.fit.slope,
            }
            orders[f"L{L}_V{V}"] = found
            if (refined.order is first) != coexist or (
                info["transition_order"] is first
            ) != coexist:
                mismatches.append(f"L={L},V={V}")
            if info["transition_order"] is first:
                P_star[i, j] = info["P_star"]
            run.log(f"softmax L={L} V={V}: {found}, coexistence window {window}")
    run.scalar("softmax_classification", orders)
    run.save_arrays(
        softmax_P_star=P_star,
        dims={"softmax_P_star": ("L", "V")},
        coords={"L": np.asarray(Ls), "V": np.asarray(Vs)},
    )
    run.consistency(
        "softmax_three_classifications_agree",
        expected=0.0,
        measured=float(len(mismatches)),
        basis="one reduced model classified by grid refinement, landscape and brute force at "
        "every (L, V)",
        note="mismatches: " + (", ".join(mismatches) or "none"),
    )
    return {"P_star": P_star}


def _boundary(c: ScalingConfig, run: Run) -> None:
    """V_c(L): double V from L until the first-order line has ended, then bisect in ln V."""
    kw = dict(temperature=c.temperature, sigma_w2=c.sigma_w2, sigma_g2=c.sigma_g2)
    brackets = []
    for L in c.boundary_L:
        V_lo, V_hi = 2.0, float(L)
        while _scaling.softmax_coexists(L, V_hi, **kw)[0] and V_hi < 1e4:
            V_lo, V_hi = V_hi, 2.0 * V_hi
        if not _scaling.softmax_coexists(L, V_lo, **kw)[0]:
            brackets.append((float("nan"), V_lo))
            continue
        brackets.append(
            _scaling.first_order_boundary(L, V_lo, V_hi, iterations=c.boundary_iterations, **kw)
        )
    brackets = np.asarray(brackets)
    V_c = np.sqrt(brackets[:, 0] * brackets[:, 1])
    run.save_arrays(
        boundary_V_bracket=brackets,
        dims={"boundary_V_bracket": ("boundary_L", "bracket_end")},
        coords={"boundary_L": np.asarray(c.boundary_L), "bracket_end": ["lower", "upper"]},
    )
    fit = fit_power_law(np.asarray(c.boundary_L, float), V_c)
    run.scalar(
        "first_order_boundary",
        {f"L{L}": b.tolist() for L, b in zip(c.boundary_L, brackets, strict=True)},
    )
    run.scalar(
        "first_order_boundary_exponent", {"V_c ~ L^x": fit.slope, "ci": [fit.ci_low, fit.ci_high]}
    )
    L16 = np.asarray(c.boundary_L) >= 16
    run.evidence(
        "first_order_line_extends_beyond_V_equals_L",
        ch.claims.first_order_line_above_L(
            BOUNDARY_CLAIM, np.asarray(c.boundary_L)[L16], brackets[L16]
        ),
        note=f"V_c brackets {brackets.round(2).tolist()}",
    )


def _softmax_laws(c: ScalingConfig, run: Run, sm: dict) -> None:
    LL, VV = np.meshgrid(
        np.asarray(c.L_values, float), np.asarray(c.V_values, float), indexing="ij"
    )
    fits = _scaling.compare_scaling_forms(LL, VV, sm["P_star"] / c.temperature)
    run.scalar("softmax_P_star_forms", [dataclasses.asdict(f) for f in fits])
    run.scalar("softmax_P_star_best_form", fits[0].name if fits else None)
    tokens = sm["P_star"] * np.asarray(c.L_values, float)[:, None]
    exps = _scaling.per_axis_exponents(c.L_values, tokens, axis=0)
    paper = {
        f"V{V}": None
        if f is None
        else {
            "exponent": f.slope,
            "ci": [f.ci_low, f.ci_high],
            "paper_L_ln2L_local_exponent": 1
            + 2 / np.log(np.sqrt(np.prod([min(c.L_values), max(c.L_values)]))),
        }
        for V, f in zip(c.V_values, exps, strict=True)
    }
    run.scalar("softmax_tokens_exponent_in_L", paper)


def _linear_grid(c: ScalingConfig, run: Run) -> dict:
    Ls, Vs = c.L_values, c.V_values
    P_c, cross, cross_n = (np.full((len(Ls), len(Vs)), np.nan) for _ in range(3))
    worst = 0.0
    for i, L in enumerate(Ls):
        for j, V in enumerate(Vs):
            model = dataclasses.replace(c, L=L, V=V).reduced("linear")
            P_c[i, j] = _phase.linear_onset(model)
            bis = _phase.instability_point(model, 1e-3 * P_c[i, j], 1e3 * P_c[i, j])
            worst = max(worst, abs((bis or np.nan) / P_c[i, j] - 1))
            d = ch.phase_diagram(model, np.geomspace(0.5 * P_c[i, j], 1e3 * P_c[i, j], c.n_P))
            o = d.order_global
            cross[i, j] = _transition.crossover_point(d.P, o["c_1"], o["c_G"], 1.0, P_c[i, j])
            cross_n[i, j] = _transition.crossover_point(
                d.P, o["c_1"], o["c_G"], np.sqrt(L), P_c[i, j]
            )
    run.consistency(
        "linear_onset_closed_form_matches_bisection",
        expected=0.0,
        measured=worst,
        tolerance=1e-8,
        basis="one determinant root found twice: bisection (60 halvings) on the autodiff "
        "Hessian vs the quartic's roots; max relative difference over (L, V)",
    )
    run.save_arrays(
        linear_P_c=P_c,
        linear_crossover_raw=cross,
        linear_crossover_normalised=cross_n,
        dims={
            k: ("L", "V")
            for k in ("linear_P_c", "linear_crossover_raw", "linear_crossover_normalised")
        },
        coords={"L": np.asarray(Ls), "V": np.asarray(Vs)},
    )
    fits = {
        "onset_in_V": (c.L_values, P_c, 1, "L", (1.5, 2.0)),
        "crossover_raw_in_L": (c.V_values, cross, 0, "V", (1.5,)),
        "crossover_normalised_in_L": (c.V_values, cross_n, 0, "V", (1.5,)),
        "crossover_raw_in_V": (c.L_values, cross, 1, "L", (0.5,)),
        "crossover_normalised_in_V": (c.L_values, cross_n, 1, "L", (0.5,)),
    }
    for name, (labels, table, axis, tag, candidates) in fits.items():
        axis_values = c.V_values if axis == 1 else c.L_values
        out = {}
        for lab, f in zip(
            labels, _scaling.per_axis_exponents(axis_values, table, axis=axis), strict=True
        ):
            out[f"{tag}{lab}"] = (
                None
                if f is None
                else {
                    "exponent": f.slope,
                    "ci": [f.ci_low, f.ci_high],
                    "contains": [x for x in candidates if f.contains(x)],
                }
            )
        run.scalar(f"linear_{name}_exponent", out)
    return {"P_c": P_c, "crossover": cross}


def _figure(c: ScalingConfig, run: Run, sm: dict, lin: dict) -> None:
    fig, ax = new_figure(1, 3)
    Ls = np.asarray(c.L_values)
    for j, V in enumerate(c.V_values):
        ax[0, 0].loglog(Ls, sm["P_star"][:, j] * Ls, "o-", label=f"V={V}")
        ax[0, 1].loglog(Ls, lin["P_c"][:, j], "o-", label=f"V={V}")
        ax[0, 2].loglog(Ls, lin["crossover"][:, j], "o-", label=f"V={V}")
    for a, title in zip(
        ax[0],
        ("softmax P* (supervised tokens)", "linear onset P_c", "linear crossover c_G = c_1"),
        strict=True,
    ):
        a.set_title(title, fontsize=9)
        a.set_xlabel("L")
        a.legend(fontsize=7)
    run.save_figure(fig, "scaling")


BOUNDARY_CLAIM = "softmax is first order for L >= 16 when V is not much larger than L (V_c > L)"
SOFTMAX_LAW_CLAIM = "softmax P* ~ L ln^2 L (P* in supervised tokens)"
ONSET_LAW_CLAIM = "linear attention: onset P_c ~ V^2"
CROSSOVER_L_CLAIM = "linear attention: crossover P ~ L^(3/2) (at fixed V)"
CROSSOVER_V_CLAIM = "linear attention: crossover P ~ V^(1/2) (at fixed L)"
P_STAR_ERROR = 1e-6
"""Relative error bound of a reduced P*: 40 bisections in ln P of a grid cell (2^-40) between
minima converged to ~1e-10 in action, whose difference has an O(1) slope in ln P."""
ONSET_ERROR = 1e-9
"""Relative error of the closed-form onset (roots of a quartic; tests compare it with
bisection on the autodiff Hessian to 1e-8)."""


def softmax_P_star_evidence(L, P_star_seq, relative_error=P_STAR_ERROR):
    """P* (sequences) against L ln^2 L in supervised tokens (P* L), at the top of the L range
    reached; the alternative is L ln L (one power of the logarithm less). In ln ln L the
    local exponent of P*_seq is 2 for the law and 1 for the alternative."""
    L = np.asarray(L, float)
    return ch.claims.scaling_law(
        SOFTMAX_LAW_CLAIM,
        L,
        np.asarray(P_star_seq, float) * L,
        lambda x: x * np.log(x) ** 2,
        lambda x: x * np.log(x),
        relative_error=relative_error,
        basis="P* at equal action of the two reduced minima",
    )


def softmax_P_star_asymptotic_evidence(L, P_star_seq):
    """The local exponent of P*_seq in ln ln L (2 for L ln^2 L tokens, 1 for L ln L),
    extrapolated to L -> infinity linearly in 1 / ln L."""
    L = np.asarray(L, float)
    m, mid = _lnln_exponents(L, np.asarray(P_star_seq, float))
    return ch.claims.asymptotic_law(
        "softmax P* ~ L ln^2 L asymptotically (L -> infinity)", mid, m, 2.0, 1.0
    )


def _lnln_exponents(L, P):
    keep = np.isfinite(P) & (P > 0)
    L, P = L[keep], P[keep]
    m = np.diff(np.log(P)) / np.diff(np.log(np.log(L)))
    return m, np.sqrt(L[1:] * L[:-1])


def onset_law_evidence(V, P_c, relative_error=ONSET_ERROR):
    """The linear onset P_c against V^2 at the top of the V range; alternative V^(3/2)."""
    return ch.claims.scaling_law(
        ONSET_LAW_CLAIM,
        V,
        P_c,
        lambda v: v**2,
        lambda v: v**1.5,
        relative_error=relative_error,
        basis="closed-form onset (quartic roots)",
    )


def crossover_evidence(claim, x, P, law: float, alternative: float, relative_error):
    """A crossover P against x^law at the top of the x range; alternative x^alternative."""
    return ch.claims.scaling_law(
        claim,
        x,
        P,
        lambda v: v**law,
        lambda v: v**alternative,
        relative_error=relative_error,
        basis="crossover c_G = c_1 of the global minimum; error: change between two P grids",
    )


def _softmax_law(c: ScalingConfig, run: Run) -> dict:
    """P* (sequences) of the reduced softmax action at each V of law_V over law_L: the point
    of equal action of the uniform and the copy minimum wherever two minima coexist. (At
    large L the jump of a_G at P* shrinks, a_copy ~ L^(-0.3): the logit gap still jumps by
    ~ ln L, so P* is taken from the coexistence, not from the a_G jump.)"""
    Ls = np.asarray(c.law_L, float)
    out = {}
    for V in c.law_V:
        P, jump = np.full(Ls.shape, np.nan), np.full(Ls.shape, np.nan)
        for i, L in enumerate(c.law_L):
            model = dataclasses.replace(c, L=L, V=V).reduced("softmax")
            _, _, info = ch.locate_transition(model, 0.05 * c.temperature, 1e6 * c.temperature, 30)
            if info["coexistence"] is not None and info["P_star"] is not None:
                P[i], jump[i] = info["P_star"], info["jump"]
        run.save_arrays(
            **{f"law_P_star_V{V}": P},
            dims={f"law_P_star_V{V}": ("law_L",)},
            coords={"law_L": Ls},
        )
        m, mid = _lnln_exponents(Ls, P)
        value, error = _extrapolate(mid, m)
        run.scalar(
            f"softmax_P_star_law_V{V}",
            {
                "L": c.law_L,
                "P_star_sequences": P.tolist(),
                "a_G_jump": jump.tolist(),
                "lnlnL_local_exponent": m.tolist(),
                "at_L": mid.tolist(),
                "tokens_local_exponent": local_exponents(Ls, P * Ls)[0].tolist(),
                "paper_tokens_local_exponent": local_exponents(Ls, Ls * np.log(Ls) ** 2)[
                    0
                ].tolist(),
                "extrapolated_lnlnL_exponent": [value, error],
            },
        )
        run.evidence(f"softmax_P_star_L_ln2L_at_range[{V}]", softmax_P_star_evidence(Ls, P))
        run.evidence(
            f"softmax_P_star_L_ln2L_asymptotic[{V}]", softmax_P_star_asymptotic_evidence(Ls, P)
        )
        out[V] = P
    return {"L": Ls, "P": out}


def _onset_law(c: ScalingConfig, run: Run) -> dict:
    """The closed-form linear onset P_c(V) at L = onset_L, for the configured alpha and for
    alpha = 0 (A = G), in sequences and supervised tokens (the V exponent is the same)."""
    Vs = np.asarray(c.onset_V, float)
    out = {}
    for alpha in sorted({float(c.alpha), 0.0}, reverse=True):
        P_c = np.array(
            [
                _phase.linear_onset(
                    dataclasses.replace(c, L=c.onset_L, V=V, alpha=alpha).reduced("linear")
                )
                for V in c.onset_V
            ]
        )
        out[alpha] = P_c
        tag = "" if alpha == c.alpha else "_alpha0"
        run.evidence(f"linear_onset_V2{tag}", onset_law_evidence(Vs, P_c))
        run.scalar(
            f"linear_onset_law{tag}",
            {
                "alpha": alpha,
                "L": c.onset_L,
                "V": c.onset_V,
                "P_c_sequences": P_c.tolist(),
                "local_exponents": local_exponents(Vs, P_c)[0].tolist(),
            },
        )
    return {"V": Vs, "P_c": out}


CROSSOVER_ERROR = 1e-9
"""Relative error bound of a crossover P: 40 bisections in ln P (2^-40 of a bracket of width
< 0.4 in ln P) of c_G - c_1 between global minima converged to ~1e-10."""


def _crossovers(c: ScalingConfig) -> tuple[np.ndarray, np.ndarray]:
    """The crossover P (sequences; root find, :func:`jaxdyn.copyhead._transition.crossover`)
    along L at the smallest V and along V at the largest L, raw (c_G = c_1) and normalised
    (sqrt(L) c_G = c_1)."""

    def at(L, V, weight):
        model = dataclasses.replace(c, L=L, V=V).reduced("linear")
        return _transition.crossover(
            model, _phase.linear_onset(model), weight=weight, iterations=40
        )

    V0, L1 = c.crossover_L_at_V, c.crossover_V_at_L
    raw_L = np.array([at(L, V0, 1.0) for L in c.crossover_L])
    norm_L = np.array([at(L, V0, np.sqrt(L)) for L in c.crossover_L])
    raw_V = np.array([at(L1, V, 1.0) for V in c.crossover_V])
    norm_V = np.array([at(L1, V, np.sqrt(L1)) for V in c.crossover_V])
    return np.stack([raw_L, norm_L]), np.stack([raw_V, norm_V])


def _crossover_law(c: ScalingConfig, run: Run) -> dict:
    """The linear crossover (c_G = c_1 of the global minimum, and sqrt(L) c_G = c_1), a root
    find per point, along crossover_L at the smallest V and along crossover_V at the largest
    L; each law decided where its local exponent has settled (:func:`claims.scaling_law`)."""
    along_L, along_V = _crossovers(c)
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
    run.scalar(
        "linear_crossover_law",
        {
            "L": c.crossover_L,
            "at_V": c.crossover_L_at_V,
            "V": c.crossover_V,
            "at_L": c.crossover_V_at_L,
            "P_sequences_along_L": along_L[0].tolist(),
            "P_sequences_along_V": along_V[0].tolist(),
            "L_local_exponents": local_exponents(Ls, along_L[0])[0].tolist(),
            "V_local_exponents": local_exponents(Vs, along_V[0])[0].tolist(),
            "normalised_L_local_exponents": local_exponents(Ls, along_L[1])[0].tolist(),
            "normalised_V_local_exponents": local_exponents(Vs, along_V[1])[0].tolist(),
        },
    )
    run.evidence(
        "linear_crossover_L_three_halves",
        crossover_evidence(CROSSOVER_L_CLAIM, Ls, along_L[0], 1.5, 1.0, CROSSOVER_ERROR),
        note=f"V = {c.crossover_L_at_V}; c_G = c_1 (raw convention)",
    )
    run.evidence(
        "linear_crossover_V_half",
        crossover_evidence(CROSSOVER_V_CLAIM, Vs, along_V[0], 0.5, 1.0, CROSSOVER_ERROR),
        note=f"L = {c.crossover_V_at_L}; c_G = c_1 (raw convention)",
    )
    return {"L": Ls, "V": Vs, "along_L": along_L[0], "along_V": along_V[0]}


def _law_figures(c: ScalingConfig, run: Run, law: dict, onset: dict, cross: dict) -> None:
    """P* vs L (softmax, tokens), P_c vs V (linear onset) and the crossover vs L and V,
    log-log, each with the paper's form and a power law fitted to the top two points."""
    fig, ax = new_figure(1, 4)
    V0 = c.law_V[-1]
    L, P = law["L"], law["P"][V0] * law["L"]
    ok = np.isfinite(P)

    def with_forms(a, x, y, paper, label):
        ok = np.isfinite(y) & (y > 0)
        x, y = x[ok], y[ok]
        if x.size < 2:
            return
        a.loglog(x, y, "o", label="reduced theory")
        xs = np.geomspace(x.min(), x.max(), 100)
        a.loglog(xs, paper(xs) * y[-1] / paper(x[-1:])[0], "--", label=f"paper {label}")
        k = np.log(y[-1] / y[-2]) / np.log(x[-1] / x[-2])
        a.loglog(xs, y[-1] * (xs / x[-1]) ** k, ":", label=f"fitted x^{k:.2f}")
        a.legend(fontsize=6)

    with_forms(ax[0, 0], L[ok], P[ok], lambda x: x * np.log(x) ** 2, "L ln^2 L")
    ax[0, 0].set_title(f"softmax P* (tokens), V={V0}", fontsize=8)
    ax[0, 0].set_xlabel("L")
    P_c = onset["P_c"][float(c.alpha)]
    with_forms(ax[0, 1], onset["V"], P_c, lambda v: v**2, "V^2")
    ax[0, 1].set_title(f"linear onset P_c, L={c.onset_L}, alpha={c.alpha:g}", fontsize=8)
    ax[0, 1].set_xlabel("V")
    with_forms(ax[0, 2], cross["L"], cross["along_L"], lambda x: x**1.5, "L^3/2")
    ax[0, 2].set_title(f"linear crossover, V={c.crossover_L_at_V}", fontsize=8)
    ax[0, 2].set_xlabel("L")
    with_forms(ax[0, 3], cross["V"], cross["along_V"], lambda v: v**0.5, "V^1/2")
    ax[0, 3].set_title(f"linear crossover, L={c.crossover_V_at_L}", fontsize=8)
    ax[0, 3].set_xlabel("V")
    run.save_figure(fig, "scaling_laws")
