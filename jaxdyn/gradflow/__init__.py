"""Focus and dilution: gradient-flow dynamics of a one-layer transformer on Markov data and on
real text (focus_dilution.md; Chen, Lin, Xu, Luo, arXiv 2605.01199).

Start with :func:`analyse_flow`: any row-stochastic ``P`` in, its stages, rates, saddles and
spectra out, each with its evidence.
"""

from ._analysis import (
    FlowAnalysis as FlowAnalysis,
    Rates as Rates,
    analyse_flow as analyse_flow,
    analyse_flow_to_new_direction as analyse_flow_to_new_direction,
)
from ._end_time import default_end_time as default_end_time
from ._evidence import (
    LINEAR_WINDOW as LINEAR_WINDOW,
    alignment_evidence as alignment_evidence,
    below_plateau_evidence as below_plateau_evidence,
    condensation_fit as condensation_fit,
    dilution_rate as dilution_rate,
    dilution_rate_evidence as dilution_rate_evidence,
    entropy_course_evidence as entropy_course_evidence,
    equivalence_evidence as equivalence_evidence,
    escape_exponent_evidence as escape_exponent_evidence,
    escape_time_evidence as escape_time_evidence,
    finite_size_evidence as finite_size_evidence,
    first_phase_evidence as first_phase_evidence,
    frequent_first_evidence as frequent_first_evidence,
    linear_window as linear_window,
    local_order_evidence as local_order_evidence,
    order_bound_evidence as order_bound_evidence,
    pca_stage_changes as pca_stage_changes,
    plateau as plateau,
    plateau_evidence as plateau_evidence,
    pooled_slope as pooled_slope,
    query_drop_times as query_drop_times,
    score_direction as score_direction,
    score_direction_evidence as score_direction_evidence,
    stage_order_evidence as stage_order_evidence,
    stage_resolution as stage_resolution,
    stall_evidence as stall_evidence,
    unstable_mode_evidence as unstable_mode_evidence,
)
from ._flow import (
    SOLVERS as SOLVERS,
    FlowSolution as FlowSolution,
    gradient_field as gradient_field,
    log_time_grid as log_time_grid,
    make_solver as make_solver,
    population_flow as population_flow,
)
from ._linearise import (
    CriticalPoint as CriticalPoint,
    Spectrum as Spectrum,
    UnigramSaddle as UnigramSaddle,
    condensation_rate as condensation_rate,
    find_critical_point as find_critical_point,
    focus_rate as focus_rate,
    jacobian as jacobian,
    jacobian_spectrum as jacobian_spectrum,
    loss_gradient as loss_gradient,
    predicted_escape_time as predicted_escape_time,
    signed_focus_eigenvalue as signed_focus_eigenvalue,
    unigram_saddle as unigram_saddle,
)
from ._lyapunov import (
    RankOneCriticalPoint as RankOneCriticalPoint,
    balance_rank_one as balance_rank_one,
    embed_rank_one as embed_rank_one,
    rank_one_critical_point as rank_one_critical_point,
    rank_one_part as rank_one_part,
    track_rank_one_branch as track_rank_one_branch,
)
from ._markov import (
    MarkovChain as MarkovChain,
    default_direction as default_direction,
    paper_transition as paper_transition,
    resolve_chain as resolve_chain,
    reversible_transition as reversible_transition,
    sample_sequences as sample_sequences,
    stationary_distribution as stationary_distribution,
    symmetry_breaking_pi as symmetry_breaking_pi,
)
from ._metrics import (
    dilution_mode as dilution_mode,
    embedding_pca as embedding_pca,
    embedding_profile as embedding_profile,
    instantaneous_focus_rate as instantaneous_focus_rate,
    model_metrics as model_metrics,
    trajectory_metrics as trajectory_metrics,
)
from ._model import (
    AbstractAttentionModel as AbstractAttentionModel,
    Batch as Batch,
    OneLayerTransformer as OneLayerTransformer,
    batch_loss as batch_loss,
    init_transformer as init_transformer,
    population_attention as population_attention,
    population_loss as population_loss,
    population_loss_from_matrices as population_loss_from_matrices,
    prepare_batch as prepare_batch,
    sequence_loss as sequence_loss,
)
from ._origin import OriginScaling as OriginScaling, origin_scaling as origin_scaling
from ._outcomes import (
    crossing_time as crossing_time,
    escape_time as escape_time,
    loss_at_time as loss_at_time,
)
from ._stages import (
    STAGE_NAMES as STAGE_NAMES,
    StageEvidence as StageEvidence,
    Stages as Stages,
    detect_stages as detect_stages,
    first_crossing as first_crossing,
    stage_times as stage_times,
)
from ._text import (
    attention_by_token as attention_by_token,
    attention_story as attention_story,
)
from ._train import (
    TrainingRun as TrainingRun,
    TrainState as TrainState,
    descend as descend,
    make_optimizer as make_optimizer,
    position_entropy as position_entropy,
    train_finite as train_finite,
    train_init as train_init,
    train_step as train_step,
)
