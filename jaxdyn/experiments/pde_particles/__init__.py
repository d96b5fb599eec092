"""Experiments of the mean-field Transformer PDE on the particle side (docs/transformer_pde.md):
one module per experiment, each registering itself on import."""

from . import (  # noqa: F401  (imported to register the experiments)
    causal,
    energy,
    meanfield,
    particles,
    sigmoid,
    stability,
    twisted,
)
