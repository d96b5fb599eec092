"""Focus and dilution: gradient-flow dynamics of a one-layer transformer on Markov data and on
real text (focus_dilution.md; Chen, Lin, Xu, Luo, arXiv 2605.01199).

Start with :func:`analyse_flow`: a :class:`MarkovChain` (any row-stochastic ``P``) in, its
stages, rates, saddles and spectra out. The paper's claims, decided by evidence on those
measurements, are in :mod:`jaxdyn.gradflow.claims`.
"""

from . import claims as claims
from ._analysis import (
    FlowAnalysis as FlowAnalysis,
    Rates as Rates,
    analyse_flow as analyse_flow,
    analyse_flow_until as analyse_flow_until,
)
from ._flow import (
    FlowSolution as FlowSolution,
    population_flow as population_flow,
    stiff_solver as stiff_solver,
)
from ._linearise import (
    CriticalPoint as CriticalPoint,
    Spectrum as Spectrum,
    UnigramSaddle as UnigramSaddle,
    condensation_rate as condensation_rate,
    find_critical_point as find_critical_point,
    focus_rate as focus_rate,
    jacobian_spectrum as jacobian_spectrum,
    unigram_saddle as unigram_saddle,
)
from ._lyapunov import (
    RankOneCriticalPoint as RankOneCriticalPoint,
    rank_one_critical_point as rank_one_critical_point,
    track_rank_one_branch as track_rank_one_branch,
)
from ._markov import (
    MarkovChain as MarkovChain,
    sample_sequences as sample_sequences,
    symmetry_breaking_pi as symmetry_breaking_pi,
)
from ._metrics import trajectory_metrics as trajectory_metrics
from ._model import (
    Batch as Batch,
    OneLayerTransformer as OneLayerTransformer,
    init_transformer as init_transformer,
    population_loss as population_loss,
)
from ._origin import OriginScaling as OriginScaling, origin_scaling as origin_scaling
from ._outcomes import escape_time as escape_time
from ._stages import Stages as Stages, detect_stages as detect_stages
from ._text import attention_story as attention_story
from ._train import (
    TrainingRun as TrainingRun,
    descend as descend,
    train_finite as train_finite,
)

__all__ = [
    "Batch",
    "CriticalPoint",
    "FlowAnalysis",
    "FlowSolution",
    "MarkovChain",
    "OneLayerTransformer",
    "OriginScaling",
    "RankOneCriticalPoint",
    "Rates",
    "Spectrum",
    "Stages",
    "TrainingRun",
    "UnigramSaddle",
    "analyse_flow",
    "analyse_flow_until",
    "attention_story",
    "claims",
    "condensation_rate",
    "descend",
    "detect_stages",
    "escape_time",
    "find_critical_point",
    "focus_rate",
    "init_transformer",
    "jacobian_spectrum",
    "origin_scaling",
    "population_flow",
    "population_loss",
    "rank_one_critical_point",
    "sample_sequences",
    "stiff_solver",
    "symmetry_breaking_pi",
    "track_rank_one_branch",
    "train_finite",
    "trajectory_metrics",
    "unigram_saddle",
]
