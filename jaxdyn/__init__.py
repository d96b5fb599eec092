"""jaxdyn: simulate, sweep and differentiate through the dynamics of transformer attention.

Top-level names are the small shared vocabulary of every theory package:

- :class:`Status`, the outcome of a simulation (an equinox Enumeration extending
  ``diffrax.RESULTS``), with :func:`mark_nonfinite` and the host-side helpers
  :func:`status_code`, :func:`status_name`, :func:`status_message`, :func:`count_outcomes`;
- :func:`entropy` and the straight-line fits :func:`fit_line`, :func:`fit_power_law`,
  :func:`fit_exponential` returning a :class:`LinearFit` with standard error and
  confidence interval;
- input validation (``require_*``) that raises one-line errors for concrete inputs and
  ``eqx.error_if`` for traced ones;
- :class:`UnrolledERK`, a diffrax explicit Runge-Kutta solver with its stages unrolled (the
  default of ``jaxdyn.meanfield.simulate_gaussian``).

Subpackages: :mod:`jaxdyn.attention`, :mod:`jaxdyn.sweep`, :mod:`jaxdyn.runs`,
:mod:`jaxdyn.evidence` (the check contract), :mod:`jaxdyn.plotting`, :mod:`jaxdyn.data` and
the theories :mod:`jaxdyn.gradflow`,
:mod:`jaxdyn.copyhead`, :mod:`jaxdyn.meanfield`.
"""

__version__ = "0.2.0"

from ._numerics import (
    LinearFit as LinearFit,
    entropy as entropy,
    fit_exponential as fit_exponential,
    fit_line as fit_line,
    fit_power_law as fit_power_law,
)
from ._solvers import UnrolledERK as UnrolledERK
from ._status import (
    Status as Status,
    count_outcomes as count_outcomes,
    mark_nonfinite as mark_nonfinite,
    status_code as status_code,
    status_message as status_message,
    status_name as status_name,
)
from ._validation import (
    is_traced as is_traced,
    require_in_interval as require_in_interval,
    require_positive as require_positive,
    require_probability_vector as require_probability_vector,
    require_psd as require_psd,
    require_stochastic as require_stochastic,
)
