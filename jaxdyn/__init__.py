"""jaxdyn: simulate, sweep and differentiate through the dynamics of transformer attention.

Top-level names are the small shared vocabulary of every theory package:

- :class:`Status`, the outcome of a simulation (an equinox Enumeration extending
  ``diffrax.RESULTS``), with its host-side helpers as classmethods (``Status.code``,
  ``Status.name``, ``Status.message``, ``Status.count``, ``Status.mark_nonfinite``);
- :func:`entropy` and the straight-line fits :func:`fit_line`, :func:`fit_power_law`,
  :func:`fit_exponential`, each returning its slope and intercept with their standard
  errors and confidence interval;
- :class:`UnrolledERK`, a diffrax explicit Runge-Kutta solver with its stages unrolled (the
  default of ``jaxdyn.meanfield.simulate_gaussian``).

Subpackages: :mod:`jaxdyn.attention`, :mod:`jaxdyn.sweep`, :mod:`jaxdyn.runs`,
:mod:`jaxdyn.evidence` (the check contract), :mod:`jaxdyn.plotting`, :mod:`jaxdyn.data` and
the theories :mod:`jaxdyn.gradflow`,
:mod:`jaxdyn.copyhead`, :mod:`jaxdyn.meanfield`, with :mod:`jaxdyn.llc` and
:mod:`jaxdyn.induction` one step beyond them.
"""

__version__ = "0.2.0"

from typing import TYPE_CHECKING

from jaxdyn._lazy import lazy_attributes as _lazy_attributes

if TYPE_CHECKING:  # the names, for type checkers and readers; loaded on first use below
    from ._numerics import (
        entropy as entropy,
        fit_exponential as fit_exponential,
        fit_line as fit_line,
        fit_power_law as fit_power_law,
    )
    from ._solvers import UnrolledERK as UnrolledERK
    from ._status import Status as Status

__all__ = [
    "Status",
    "UnrolledERK",
    "entropy",
    "fit_exponential",
    "fit_line",
    "fit_power_law",
]

# ``import jaxdyn`` (and so ``python -m jaxdyn``) does not import JAX, equinox or diffrax: the
# command line sets what equinox reads from the environment at import (``EQX_ON_ERROR``)
# before anything imports it, and commands that need no JAX (``--help``, ``list``) start fast.
_HOMES = {
    "entropy": "._numerics",
    "fit_exponential": "._numerics",
    "fit_line": "._numerics",
    "fit_power_law": "._numerics",
    "UnrolledERK": "._solvers",
    "Status": "._status",
}


__getattr__, __dir__ = _lazy_attributes(globals(), _HOMES)
