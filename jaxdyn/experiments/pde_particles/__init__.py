"""The particle-side experiments of the Transformer PDE (docs/transformer_pde.md), one module
each; their claims' counterfactuals (meanfield._counterfactuals) become negative controls."""

from jaxdyn.meanfield._counterfactuals import COUNTERFACTUALS
from jaxdyn.runs import negative_control

from . import (  # noqa: F401  (imported to register the experiments)
    causal,
    energy,
    meanfield,
    particles,
    sigmoid,
    stability,
    twisted,
)

for _experiment, _checks in COUNTERFACTUALS.items():
    for _check, _control in _checks.items():
        negative_control(_experiment, _check)(_control)
