"""Copy-head emergence as a phase transition (copy_head.md; Lavie et al., arXiv 2606.12058).

The task and its sufficient statistics; copy heads (any :class:`AbstractCopyHead`); the
Bayesian posterior :class:`CopyHeadPosterior` with its exact action (W integrated out), joint
energy and gradient; Adam to the MAP, SGLD and MALA; order parameters; reduced actions of a
head (closed form for softmax and linear attention, :class:`HeadReduced` for any head), their
minima, phase diagram, transition and its order; where the posterior's mass is (Laplace
phases); the paper's claims as evidence (:mod:`jaxdyn.copyhead.claims`).

P counts training sequences of L tokens everywhere in this package (each sequence supervises
L positions: L P supervised tokens); the docs page states each law in both units.
"""

from . import claims as claims
from ._convergence import newton_estimate as newton_estimate
from ._heads import (
    AbstractCopyHead as AbstractCopyHead,
    AbstractRowHead as AbstractRowHead,
    LinearCopyHead as LinearCopyHead,
    SoftmaxCopyHead as SoftmaxCopyHead,
)
from ._mass import laplace_phase as laplace_phase
from ._models import (
    AbstractReducedModel as AbstractReducedModel,
    HeadReduced as HeadReduced,
    LinearReduced as LinearReduced,
    MinimumStatus as MinimumStatus,
    RowHeadReduced as RowHeadReduced,
    SoftmaxReduced as SoftmaxReduced,
    global_minimum as global_minimum,
    local_minimum as local_minimum,
)
from ._order import coverage as coverage, order_parameters as order_parameters
from ._phase import locate_transition as locate_transition, phase_diagram as phase_diagram
from ._posterior import CopyHeadPosterior as CopyHeadPosterior
from ._reduced import Objective as Objective
from ._samplers import (
    sample_mala as sample_mala,
    sample_sgld as sample_sgld,
    sgld_step_size as sgld_step_size,
)
from ._task import (
    CopyStatistics as CopyStatistics,
    copy_statistics as copy_statistics,
    copy_task as copy_task,
)
from ._train import train_map as train_map
from ._transition import TransitionOrder as TransitionOrder, transition_order as transition_order

__all__ = [
    "AbstractCopyHead",
    "AbstractReducedModel",
    "AbstractRowHead",
    "CopyHeadPosterior",
    "CopyStatistics",
    "HeadReduced",
    "LinearCopyHead",
    "LinearReduced",
    "MinimumStatus",
    "Objective",
    "RowHeadReduced",
    "SoftmaxCopyHead",
    "SoftmaxReduced",
    "TransitionOrder",
    "claims",
    "copy_statistics",
    "copy_task",
    "coverage",
    "global_minimum",
    "laplace_phase",
    "local_minimum",
    "locate_transition",
    "newton_estimate",
    "order_parameters",
    "phase_diagram",
    "sample_mala",
    "sample_sgld",
    "sgld_step_size",
    "train_map",
    "transition_order",
]
