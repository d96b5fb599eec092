"""Focus and dilution: gradient-flow dynamics of a one-layer transformer on Markov data and on
real text (focus_dilution.md; Chen, Lin, Xu, Luo, arXiv 2605.01199)."""

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
    unigram_saddle as unigram_saddle,
)
from ._markov import (
    default_direction as default_direction,
    paper_transition as paper_transition,
    reversible_transition as reversible_transition,
    sample_sequences as sample_sequences,
    stationary_distribution as stationary_distribution,
    symmetry_breaking_pi as symmetry_breaking_pi,
    validate_distribution as validate_distribution,
    validate_transition as validate_transition,
)
from ._metrics import (
    dilution_mode as dilution_mode,
    embedding_pca as embedding_pca,
    fit_growth_rate as fit_growth_rate,
    fit_rate_between as fit_rate_between,
    fitted_condensation_rate as fitted_condensation_rate,
    fitted_focus_rate as fitted_focus_rate,
    model_metrics as model_metrics,
    trajectory_metrics as trajectory_metrics,
)
from ._model import (
    AbstractAttentionModel as AbstractAttentionModel,
    Batch as Batch,
    OneLayerTransformer as OneLayerTransformer,
    batch_loss as batch_loss,
    entropy as entropy,
    init_transformer as init_transformer,
    population_attention as population_attention,
    population_loss as population_loss,
    population_loss_from_matrices as population_loss_from_matrices,
    prepare_batch as prepare_batch,
    sequence_loss as sequence_loss,
)
from ._outcomes import (
    crossing_time as crossing_time,
    escape_time as escape_time,
    loss_at_time as loss_at_time,
)
from ._stages import (
    STAGE_NAMES as STAGE_NAMES,
    detect_stages as detect_stages,
    first_crossing as first_crossing,
    stages_in_order as stages_in_order,
)
from ._text import (
    Corpus as Corpus,
    attention_by_token as attention_by_token,
    attention_story as attention_story,
    bigram_chain as bigram_chain,
    detect_format as detect_format,
    load_corpus as load_corpus,
    stream_windows as stream_windows,
    tokenize as tokenize,
    unigram_frequencies as unigram_frequencies,
)
from ._train import (
    TrainingRun as TrainingRun,
    TrainState as TrainState,
    make_optimizer as make_optimizer,
    position_entropy as position_entropy,
    train_finite as train_finite,
    train_init as train_init,
    train_step as train_step,
)
