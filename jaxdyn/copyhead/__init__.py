"""Copy-head emergence as a phase transition (copy_head.md; Lavie et al., arXiv 2606.12058).

Task and networks, the exact Bayesian action with W integrated out, order parameters, the
population-reduced action and its phase diagram, and Adam / SGLD / MALA on real networks.
"""

from ._action import (
    action as action,
    action_from_moments as action_from_moments,
    action_from_statistics as action_from_statistics,
    attention_matrix as attention_matrix,
    joint_energy as joint_energy,
    joint_energy_gradient as joint_energy_gradient,
    sequence_loss as sequence_loss,
    validate_hyperparameters as validate_hyperparameters,
)
from ._network import (
    AbstractCopyHead as AbstractCopyHead,
    LinearCopyHead as LinearCopyHead,
    SoftmaxCopyHead as SoftmaxCopyHead,
    copy_head as copy_head,
    factored_scores as factored_scores,
)
from ._order import (
    coverage as coverage,
    logit_gap as logit_gap,
    order_parameters as order_parameters,
    project_on_copy_span as project_on_copy_span,
)
from ._phase import (
    AbstractReducedModel as AbstractReducedModel,
    LinearReduced as LinearReduced,
    PhaseDiagram as PhaseDiagram,
    SoftmaxReduced as SoftmaxReduced,
    classify_transition as classify_transition,
    descend as descend,
    first_order_point as first_order_point,
    global_minimum as global_minimum,
    instability_point as instability_point,
    local_minimum as local_minimum,
    locate_transition as locate_transition,
    phase_diagram as phase_diagram,
)
from ._reduced import (
    population_action as population_action,
    population_data_term as population_data_term,
    reduced_action_linear as reduced_action_linear,
    reduced_action_softmax as reduced_action_softmax,
    softmax_copy_probability as softmax_copy_probability,
    softmax_order_parameters as softmax_order_parameters,
)
from ._task import (
    CopyStatistics as CopyStatistics,
    copy_statistics as copy_statistics,
    copy_targets as copy_targets,
    copy_task as copy_task,
    shift_matrix as shift_matrix,
    supervised_positions as supervised_positions,
    uniform_matrix as uniform_matrix,
)
from ._train import (
    HeadSettings as HeadSettings,
    MAPState as MAPState,
    Minibatch as Minibatch,
    draw_minibatch as draw_minibatch,
    map_init as map_init,
    map_step as map_step,
    measure as measure,
    minibatch_energy as minibatch_energy,
    minimise_action as minimise_action,
    sample_mala as sample_mala,
    sample_sgld as sample_sgld,
    sgld_kernel as sgld_kernel,
    sgld_minibatch_kernel as sgld_minibatch_kernel,
    train_map as train_map,
)
