"""Mean-field Transformer PDE (transformer_pde.md): velocity fields
(:mod:`jaxdyn.meanfield.fields`), the particle and Gaussian simulators, closed forms, the regime
of a Gaussian, the two geometries, the mean-field error, steering, and the paper's claims
(:mod:`jaxdyn.meanfield.claims`)."""

from . import claims as claims, fields as fields
from ._analysis import empirical_mean_cov as empirical_mean_cov
from ._closed_forms import (
    blowup_time as blowup_time,
    softmax_identity_covariance as softmax_identity_covariance,
)
from ._clusters import detect_clusters as detect_clusters
from ._energy import interaction_energy as interaction_energy
from ._geometry import (
    BuresWasserstein as BuresWasserstein,
    TwistedWasserstein as TwistedWasserstein,
)
from ._meanfield_limit import meanfield_error as meanfield_error
from ._particles import RK4 as RK4, uniform_on_sphere as uniform_on_sphere
from ._ranks import rank_ode as rank_ode, rank_outcome as rank_outcome
from ._regime import Regime as Regime, gaussian_regime as gaussian_regime
from ._simulate_gaussian import simulate_gaussian as simulate_gaussian
from ._simulate_particles import simulate_particles as simulate_particles
from ._steering import SteerOutcome as SteerOutcome, steer_gaussian as steer_gaussian

__all__ = [
    "RK4",
    "BuresWasserstein",
    "Regime",
    "SteerOutcome",
    "TwistedWasserstein",
    "blowup_time",
    "claims",
    "detect_clusters",
    "empirical_mean_cov",
    "fields",
    "gaussian_regime",
    "interaction_energy",
    "meanfield_error",
    "rank_ode",
    "rank_outcome",
    "simulate_gaussian",
    "simulate_particles",
    "softmax_identity_covariance",
    "steer_gaussian",
    "uniform_on_sphere",
]
