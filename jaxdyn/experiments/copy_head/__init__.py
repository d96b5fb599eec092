"""Copy-head emergence experiments (copy_head.md), one module per experiment.

P counts sequences throughout (supervised tokens = P L with the cyclic convention); T = 1 by
default, and the reduced action depends on the data only through P / T. Every experiment
asserts what the theory predicts for its configuration (the head, L, V): a first-order jump,
hysteresis and bimodality where the theory has coexisting minima, their absence where it
does not; configurations outside the regime of a claim are run and reported.
"""

from . import (
    _controls as _controls,
    adam as adam,
    adam_linear as adam_linear,
    scaling as scaling,
    sgld as sgld,
    sgld_linear as sgld_linear,
    theory as theory,
)
