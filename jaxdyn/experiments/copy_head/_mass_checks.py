"""Where the posterior's mass is, against SGLD: the Laplace (fluctuation) shift of the order
parameters' posterior means from the modes, and the phase boundary for the mode (equal
action) and for the mass (equal free energy F = S + 1/2 ln det H), on the population
posterior in all L^2 scores (:func:`jaxdyn.copyhead.population_phase`)."""

from __future__ import annotations

import math

import numpy as np

from ... import copyhead as ch
from ...copyhead import _heads, _mass
from ...evidence import ErrorModel, Evidence, Verdict
from ...runs import negative_control
from ._networks import order_keys
from ._posterior_checks import PosteriorAnalysis, chain_means

_INDEX = {"c_1": 0, "c_G": 1}
_CHECK = "posterior_mean_{}_matches_laplace"
_CLAIM = "SGLD's posterior mean of {} is the mode plus its Laplace shift"


def laplace_mean_evidence(
    claim: str, shifts, predicted, *, confidence: float = 0.99, basis: str = ""
) -> Evidence:
    """The posterior mean minus the mode, per dataset (rows) and P (columns), against the
    Laplace shift ``predicted`` at each P. The alternative is the saddle point alone (no
    shift: the mean at the mode), so ``holds`` needs the Laplace shift inside every
    Student-t interval and zero outside one at least; too few datasets for that is
    ``inconclusive``."""
    predicted = np.asarray(predicted, float)
    return ch.claims.matches_theory(
        claim,
        shifts,
        predicted,
        np.abs(predicted),
        confidence=confidence,
        basis=basis,
        alternative=np.zeros_like(predicted),
    )


def laplace_shifts(a: PosteriorAnalysis, posterior, Ps, log=None) -> dict[str, np.ndarray]:
    """The Laplace shift (mean minus mode) of each order parameter at the global minimum of
    the reduced theory at each P, on the population posterior. For an odd head the samples
    are sign-aligned (:func:`jaxdyn.copyhead.measure` flips a sample with c_1 + c_G < 0),
    so the prediction is the Gaussian phase's mean of the aligned order parameters
    (:func:`aligned_mean`; below a pooling onset, at the symmetric mode 0, it is
    sqrt(2 / pi) Cov(c, s) / sd(s), not 0). ``log(message)``: progress, one line per P
    (a Laplace phase takes about 40 CPU s at L = 64). ``twice_differentiable``: per P,
    whether the action is smooth at the mode (:func:`jaxdyn.copyhead.laplace_phase`); where
    it is not, the shift is not a prediction."""
    odd = isinstance(posterior.head, _heads.AbstractOddCopyHead)
    out = {key: [] for key in order_keys(a.config)}
    out["twice_differentiable"] = []
    for i, p in enumerate(Ps):
        if log is not None:
            log(f"Laplace phase at P = {float(p):g} ({i + 1} of {len(Ps)})")
        x = ch.global_minimum(a.model, p).x
        phase = _mass.population_phase(posterior, a.model, x, p)
        out["twice_differentiable"].append(bool(phase.twice_differentiable))
        mode, mean = np.asarray(phase.mode), np.asarray(phase.mean)
        if odd:
            sign = 1.0 if mode.sum() >= 0 else -1.0
            mode, mean = sign * mode, aligned_mean(mean, np.asarray(phase.covariance))
        for key in _INDEX:
            if key in out:
                out[key].append(float(mean[_INDEX[key]] - mode[_INDEX[key]]))
    return {k: np.array(v) for k, v in out.items()}


def aligned_mean(mean, covariance) -> np.ndarray:
    """E[sign(s) c] for Gaussian c = (c_1, c_G) with ``mean`` and ``covariance``, s = c_1 +
    c_G: m (1 - 2 Phi(-m_s / sd)) + 2 Cov(c, s) / sd phi(m_s / sd)."""
    mean, covariance = np.asarray(mean, float), np.asarray(covariance, float)
    m_s, cov_cs = mean.sum(), covariance.sum(axis=1)
    sd = float(np.sqrt(max(covariance.sum(), 0.0)))
    if sd == 0.0:
        return np.sign(m_s if m_s != 0 else 1.0) * mean
    z = m_s / sd
    Phi = 0.5 * math.erfc(z / math.sqrt(2.0))  # Phi(-z)
    phi = math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return mean * (1.0 - 2.0 * Phi) + 2.0 * cov_cs / sd * phi


def check_mass(run, a: PosteriorAnalysis, result, posterior) -> None:
    """SGLD's posterior means against the Laplace prediction, and the two phase boundaries.

    Per ladder P (away from the transition and the coexistence window) and dataset: the SGLD
    chain's mean minus the mode reached from its end, averaged over both starts, against the
    Laplace shift at the population mode (99% Student-t over datasets; alternative: the mode
    alone, zero shift). The shift is computed on the population statistics: its finite-P
    change (relative order 1 / P) is not in the bound. Costs L^2 Hessian-vector products
    and an L^2 x L^2 eigendecomposition per P (about 40 CPU s at L = 64): with
    ``mass_check=False`` (quick size) it is recorded inconclusive."""
    c = a.config
    if not c.mass_check:
        why = (
            f"the Laplace phase costs {c.L**2} Hessian-vector products and an "
            f"eigendecomposition of order {c.L**2} per P"
        )
        for key in order_keys(c):
            run.not_run(
                _CHECK.format(key),
                _CLAIM.format(key),
                needs={"mass_check": True},
                full_size=True,
                why=why,
            )
        return
    P, seeds = result.params["P"], result.seeds
    far = a.ladder_mask(P) & result.ok()
    Ps = np.unique(P[far])
    predicted = laplace_shifts(a, posterior, Ps, log=run.log)
    smooth = np.asarray(predicted["twice_differentiable"], bool)
    if not smooth.all():
        why = (
            f"the mode sits on a kink of the action at P = {Ps[~smooth].tolist()} (its "
            "gradient's defect does not fall as h^2 over the fluctuations): the Laplace "
            "expansion needs a twice-differentiable action there"
        )
        for key in order_keys(c):
            run.evidence(_CHECK.format(key), not_a_prediction(key, why))
        return
    for key in order_keys(c):
        gap = chain_means(result, key) - result.outputs[f"mode_{key}"]
        table = np.array(
            [[np.nanmean(gap[(P == p) & (seeds == s) & far]) for p in Ps] for s in np.unique(seeds)]
        )
        run.evidence(
            _CHECK.format(key),
            laplace_mean_evidence(
                _CLAIM.format(key),
                table,
                predicted[key],
                basis="SGLD chain mean minus the mode from its end, per dataset over both "
                "starts; prediction: Laplace shift on the population posterior; "
                "alternative: the mode (no shift)",
            ),
            note=f"P = {Ps.tolist()}; Laplace shift {np.round(predicted[key], 5).tolist()}",
        )
    if a.info["transition_order"] is ch.TransitionOrder.first:
        run.scalar("phase_boundaries", phase_boundaries(a, posterior, log=run.log))


def not_a_prediction(key: str, why: str) -> Evidence:
    """``posterior_mean_<key>_matches_laplace`` recorded ``inconclusive`` without a number:
    not run, or the expansion does not apply (a kink at the mode)."""
    return Evidence(
        _CLAIM.format(key),
        float("nan"),
        float("nan"),
        ErrorModel.standard_error(float("inf"), dof=None, basis="Student-t over datasets"),
        Verdict.inconclusive,
        0.0,
        why,
    )


def phase_boundaries(a: PosteriorAnalysis, posterior, points: int = 5, log=None) -> dict:
    """The mode's boundary (equal action: the saddle point's P*) and the mass's (equal free
    energy) between the uniform and copy branches, on ``points`` P across the coexistence
    window (2% in from each spinodal). ``mass`` is None when the free energies do not
    cross there: one phase carries more mass across the whole window (the sign of
    ``free_energy_copy_minus_uniform`` says which) and the mass's boundary is a spinodal.
    ``log(message)``: progress, one line per P."""
    lo, hi = a.info["coexistence"]
    Ps = np.geomspace(lo + 0.02 * (hi - lo), lo + 0.98 * (hi - lo), points)
    lP = np.log(a.diagram.P)
    S, F = [], []
    for i, p in enumerate(Ps):
        if log is not None:
            log(f"free energies of both branches at P = {float(p):g} ({i + 1} of {points})")
        found = []
        for branch in (a.diagram.x_up, a.diagram.x_down):  # uniform, copy
            x0 = np.array([np.interp(np.log(p), lP, branch[:, i]) for i in range(branch.shape[1])])
            found.append(ch.local_minimum(a.model, p, x0).x)
        phases = [_mass.population_phase(posterior, a.model, x, p, corrections=False) for x in found]
        # Both descents in one minimum (a branch's interpolation off its basin): no pair.
        same = np.allclose(np.asarray(found[0]), np.asarray(found[1]), rtol=1e-6, atol=1e-9)
        S.append([np.nan if same else float(ph.action) for ph in phases])
        F.append([np.nan if same else float(ph.free_energy) for ph in phases])
    S, F = np.array(S), np.array(F)
    mass = _mass.phase_boundary(Ps, F[:, 1], F[:, 0])
    return {
        "mode": float(a.P_t),
        "mode_on_scan": _mass.phase_boundary(Ps, S[:, 1], S[:, 0]),
        "mass": None if np.isnan(mass) else mass,
        "P": Ps.tolist(),
        "action_copy_minus_uniform": (S[:, 1] - S[:, 0]).tolist(),
        "free_energy_copy_minus_uniform": (F[:, 1] - F[:, 0]).tolist(),
    }


def _mean_at_the_mode(key: str) -> Evidence:
    """Counterfactual: a posterior whose mean is its mode (a Gaussian one), four datasets
    with spread 0.002 around zero shift, against a Laplace shift of 0.034 (softmax,
    L = 64, V = 8, P = 64)."""
    rng = np.random.default_rng(1)
    shifts = 0.002 * rng.standard_normal((4, 2))
    return laplace_mean_evidence(_CLAIM.format(key), shifts, np.array([0.034, 0.03]))


for _experiment in ("copy-head-sgld", "copy-head-sgld-linear"):
    for _key in _INDEX:
        negative_control(_experiment, _CHECK.format(_key))(lambda key=_key: _mean_at_the_mode(key))
