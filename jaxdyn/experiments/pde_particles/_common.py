"""Configuration glue shared by the particle experiments: variant names to fields, weights."""

from __future__ import annotations

import numpy as np

from jaxdyn.meanfield.fields import (
    L2,
    AbstractVelocityField,
    Linear,
    Masked,
    MultiHead,
    Sigmoid,
    Sinkhorn,
    Softmax,
)
from jaxdyn.runs import ConfigError

CLOSED_VARIANTS = ("softmax", "l2", "sinkhorn", "linear", "multihead")
ALL_VARIANTS = CLOSED_VARIANTS + ("sigmoid", "masked")


def make_field(
    variant: str, Q, K, V, *, sinkhorn_iterations: int = 50, positions=None
) -> AbstractVelocityField:
    """The field of the named variant from one ``(Q, K, V)`` (``multihead``: 2 heads;
    ``masked``: causal softmax over ``positions`` with an attention sink at position 0)."""
    if variant == "softmax":
        return Softmax(Q=Q, K=K, V=V)
    if variant == "l2":
        return L2(Q=Q, K=K, V=V)
    if variant == "sinkhorn":
        return Sinkhorn(Q=Q, K=K, V=V, iterations=sinkhorn_iterations)
    if variant == "linear":
        return Linear(Q=Q, K=K, V=V)
    if variant == "multihead":
        return MultiHead(Q=Q, K=K, V=V, heads=2)
    if variant == "sigmoid":
        return Sigmoid(Q=Q, K=K, V=V)
    if variant == "masked":
        return Masked(Softmax(Q=Q, K=K, V=V), positions=positions, sink=True)
    raise ValueError(f"unknown attention variant {variant!r}")


def check_variants(variants, allowed, d) -> None:
    """Non-empty, known variants; multi-head (2 heads) needs an even ``d``."""
    if not variants:
        raise ConfigError("variants must not be empty")
    bad = [v for v in variants if v not in allowed]
    if bad:
        raise ConfigError(f"unknown variants {bad}; choose from {list(allowed)}")
    if "multihead" in variants and d % 2:
        raise ConfigError(f"multihead uses 2 heads, so d must be even, got d={d}")


def random_weights(seed: int, d: int, scale: float):
    """``Q, K ~ scale N(0, 1)`` and ``V = I + scale/2 N(0, 1)``, all ``(d, d)``."""
    rng = np.random.default_rng(seed)
    Q = scale * rng.standard_normal((d, d))
    K = scale * rng.standard_normal((d, d))
    V = np.eye(d) + 0.5 * scale * rng.standard_normal((d, d))
    return Q, K, V


def initial_gaussian(d: int):
    """``(alpha_0, Sigma_0)`` of the mean-field experiments: an off-centre, correlated Gaussian."""
    alpha0 = 0.5 * np.cos(np.arange(d) + 1.0)
    G = np.eye(d) + 0.3 * np.ones((d, d)) / d
    return alpha0, 0.6 * G @ G.T
