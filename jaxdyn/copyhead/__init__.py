"""Copy-head emergence as a phase transition (copy_head.md; Lavie et al., arXiv 2606.12058).

The task and its sufficient statistics; copy heads (any :class:`AbstractCopyHead`); the
Bayesian posterior :class:`CopyHeadPosterior` with its exact action (W integrated out), joint
energy and gradient; Adam to the MAP, SGLD and MALA; order parameters; the population-reduced
action, its phase diagram and the detectors that classify a transition; the Newton estimate of
an optimiser's remaining error; Gaussian fluctuations around posterior modes; where the
posterior's mass is (Laplace phases, free energies, mass-weighted means); the softmax
first-order boundary and scaling-law comparison.
"""

from ._bimodality import Bimodality as Bimodality, bimodality as bimodality
from ._claims import (
    bimodality_evidence as bimodality_evidence,
    boundary_evidence as boundary_evidence,
    count_at_most_evidence as count_at_most_evidence,
    coverage_evidence as coverage_evidence,
    extrapolated_exponent as extrapolated_exponent,
    extrapolated_exponent_evidence as extrapolated_exponent_evidence,
    hysteresis_evidence as hysteresis_evidence,
    hysteresis_window_evidence as hysteresis_window_evidence,
    jump_evidence as jump_evidence,
    local_exponent as local_exponent,
    local_form_evidence as local_form_evidence,
    onset_exponent_evidence as onset_exponent_evidence,
    order_evidence as order_evidence,
    pooling_first_evidence as pooling_first_evidence,
    pooling_share as pooling_share,
    scaling_form_evidence as scaling_form_evidence,
    theory_match_evidence as theory_match_evidence,
)
from ._convergence import NewtonEstimate as NewtonEstimate, newton_estimate as newton_estimate
from ._fluctuations import laplace_covariance as laplace_covariance
from ._heads import (
    AbstractCopyHead as AbstractCopyHead,
    AbstractOddCopyHead as AbstractOddCopyHead,
    LinearCopyHead as LinearCopyHead,
    SoftmaxCopyHead as SoftmaxCopyHead,
    copy_head as copy_head,
    factored_scores as factored_scores,
)
from ._hysteresis import (
    Hysteresis as Hysteresis,
    pair_disagreement as pair_disagreement,
    switch_bracket as switch_bracket,
)
from ._mass import (
    LaplacePhase as LaplacePhase,
    MassMixture as MassMixture,
    copy_head_phase as copy_head_phase,
    laplace_phase as laplace_phase,
    mass_mixture as mass_mixture,
    phase_boundary as phase_boundary,
    population_phase as population_phase,
)
from ._measure import (
    measure as measure,
    population_test_loss as population_test_loss,
)
from ._models import (
    AbstractReducedModel as AbstractReducedModel,
    HeadReduced as HeadReduced,
    LinearReduced as LinearReduced,
    MinimumStatus as MinimumStatus,
    ReducedMinimum as ReducedMinimum,
    SoftmaxReduced as SoftmaxReduced,
    continuation as continuation,
    global_minimum as global_minimum,
    local_minimum as local_minimum,
    minimum_error as minimum_error,
    minimum_status as minimum_status,
)
from ._order import (
    coverage as coverage,
    logit_gap as logit_gap,
    order_parameters as order_parameters,
    project_on_copy_span as project_on_copy_span,
)
from ._phase import (
    PhaseDiagram as PhaseDiagram,
    classify_transition as classify_transition,
    first_order_point as first_order_point,
    instability_point as instability_point,
    linear_onset as linear_onset,
    locate_transition as locate_transition,
    onset_amplitudes as onset_amplitudes,
    onset_exponent as onset_exponent,
    phase_diagram as phase_diagram,
)
from ._posterior import (
    CopyHeadPosterior as CopyHeadPosterior,
    action as action,
    batched_action as batched_action,
)
from ._reduced import (
    objective_weight as objective_weight,
    population_action as population_action,
    population_data_term as population_data_term,
    reduced_action_linear as reduced_action_linear,
    reduced_action_softmax as reduced_action_softmax,
    softmax_copy_probability as softmax_copy_probability,
    softmax_order_parameters as softmax_order_parameters,
)
from ._samplers import (
    Minibatch as Minibatch,
    draw_minibatch as draw_minibatch,
    minibatch_energy as minibatch_energy,
    sample_mala as sample_mala,
    sample_sgld as sample_sgld,
    sgld_kernel as sgld_kernel,
    sgld_minibatch_kernel as sgld_minibatch_kernel,
    sgld_step_size as sgld_step_size,
)
from ._scaling import (
    FormFit as FormFit,
    compare_scaling_forms as compare_scaling_forms,
    first_order_boundary as first_order_boundary,
    per_axis_exponents as per_axis_exponents,
    softmax_coexists as softmax_coexists,
)
from ._task import (
    CopyStatistics as CopyStatistics,
    bootstrap_weights as bootstrap_weights,
    cast_floating as cast_floating,
    copy_statistics as copy_statistics,
    copy_targets as copy_targets,
    copy_task as copy_task,
    population_statistics as population_statistics,
    shift_matrix as shift_matrix,
    supervised_positions as supervised_positions,
    uniform_matrix as uniform_matrix,
)
from ._train import (
    MAPState as MAPState,
    map_init as map_init,
    map_step as map_step,
    minimise_action as minimise_action,
    train_map as train_map,
)
from ._transition import (
    RefinementOrder as RefinementOrder,
    TransitionOrder as TransitionOrder,
    brute_force_coexistence as brute_force_coexistence,
    classify_refinement as classify_refinement,
    crossover_point as crossover_point,
    landscape_minima as landscape_minima,
    largest_step as largest_step,
    order_from_refinement as order_from_refinement,
    refinement_grids as refinement_grids,
)
