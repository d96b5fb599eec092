"""Gaussian experiments of the mean-field Transformer PDE (transformer_pde.md, "Closed forms"
and "The paper's numerical experiments"), one module each: ``pde-ranks`` (the paper's rank
histograms, certified), ``pde-blowup`` (blow-up times against the closed form, the general-V
regime criterion), ``pde-cone`` (the d = 2 cone pictures).

The paper's rank-histogram inputs, the published projected-Euler integrator, SciPy's third
method and the random problem families are science: they live in ``jaxdyn.meanfield``'s
private modules (``_paper_inputs``, ``_published_euler``, ``_third_method``, ``_problems``) and
are re-exported here for the experiments and the tests; ``_rank_member`` is the sweep member of
the rank runs.
"""

from jaxdyn.meanfield._paper_inputs import (
    PUBLISHED_DIMS as PUBLISHED_DIMS,
    RANK_ATTENTIONS as RANK_ATTENTIONS,
    RANK_CONSTRUCTIONS as RANK_CONSTRUCTIONS,
    RANK_SIGMA0_NORMS as RANK_SIGMA0_NORMS,
    RANK_VALUES as RANK_VALUES,
    PaperRankInputs as PaperRankInputs,
    RankPanelSettings as RankPanelSettings,
    paper_rank_inputs as paper_rank_inputs,
    published_rank_settings as published_rank_settings,
    rank_panels as rank_panels,
)
from jaxdyn.meanfield._published_euler import (
    EulerResult as EulerResult,
    RankAttempts as RankAttempts,
    projected_euler as projected_euler,
    published_rank_attempts as published_rank_attempts,
    rank_histogram as rank_histogram,
)

from . import blowup as blowup, cone as cone, ranks as ranks
from ._rank_member import (
    pad_rank_member as pad_rank_member,
    rank_member as rank_member,
    rank_ode as rank_ode,
    rank_outcome as rank_outcome,
)
