"""Local learning coefficients (singular learning theory) for any equinox model (docs/llc.md).

```python
import jax
from jaxdyn.llc import estimate_llc

est = estimate_llc(loss_fn, w_star, (x, y), key=jax.random.key(0))
est.llc, est.stderr, est.to_xarray()
```

:func:`estimate_llc` samples the localised tempered posterior at a minimum w* with BlackJAX's
SGLD (chains as one vmapped program) and returns :class:`LLCEstimate`: the estimate, its
standard error over chains, the labelled draws and diagnostics (stationarity between chain
halves, the localisation's pull). :func:`step_size_effect` measures the step size's bias and
extrapolates it away; :func:`quadratic_llc` and :func:`reduced_rank_rlct` are exact answers to
calibrate against; :mod:`jaxdyn.llc.claims` holds the verdicts.
"""

from . import claims as claims
from ._estimate import LLCEstimate as LLCEstimate, estimate_llc as estimate_llc
from ._exact import quadratic_llc as quadratic_llc, reduced_rank_rlct as reduced_rank_rlct
from ._steps import StepSizeEffect as StepSizeEffect, step_size_effect as step_size_effect

__all__ = [
    "LLCEstimate",
    "StepSizeEffect",
    "claims",
    "estimate_llc",
    "quadratic_llc",
    "reduced_rank_rlct",
    "step_size_effect",
]
