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
halves, the localisation's pull).
"""

from ._estimate import LLCEstimate as LLCEstimate, estimate_llc as estimate_llc

__all__ = ["LLCEstimate", "estimate_llc"]
