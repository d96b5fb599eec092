"""Mean-field Transformer PDE (transformer_pde.md): particles, Gaussian ODEs, analysis."""

from ._analysis import (
    bures_wasserstein as bures_wasserstein,
    bures_wasserstein_map as bures_wasserstein_map,
    empirical_mean_cov as empirical_mean_cov,
    optimal_assignment as optimal_assignment,
    sliced_wasserstein as sliced_wasserstein,
    stability_ratio as stability_ratio,
    wasserstein2_exact as wasserstein2_exact,
)
from ._blowup import (
    REGIME_FAMILIES as REGIME_FAMILIES,
    l2_growth_rate as l2_growth_rate,
    random_blowup_problems as random_blowup_problems,
    random_regime_problems as random_regime_problems,
)
from ._causal import (
    causal_influence as causal_influence,
    sink_positions as sink_positions,
)
from ._closed_forms import (
    blowup_time as blowup_time,
    limiting_rank as limiting_rank,
    low_rank_limit as low_rank_limit,
    softmax_identity_covariance as softmax_identity_covariance,
)
from ._clusters import (
    detect_clusters as detect_clusters,
    single_cluster_condition as single_cluster_condition,
)
from ._cone import (
    CONE_CASES as CONE_CASES,
    ConeOutcome as ConeOutcome,
    blowup_directions as blowup_directions,
    cone_cases as cone_cases,
    cone_outcome as cone_outcome,
    disk_coordinates as disk_coordinates,
    isotropic_line_stability as isotropic_line_stability,
    trace_one_covariances as trace_one_covariances,
    two_lines_covariance as two_lines_covariance,
)
from ._cone_limits import (
    line_transverse_growth as line_transverse_growth,
    rank_one_angle_flow as rank_one_angle_flow,
    rank_one_angle_rate as rank_one_angle_rate,
)
from ._decisions import (
    bounded_growth_evidence as bounded_growth_evidence,
    dissipation_evidence as dissipation_evidence,
    ensemble_mean_evidence as ensemble_mean_evidence,
    gradient_structure_evidence as gradient_structure_evidence,
    monotone_evidence as monotone_evidence,
    rate_evidence as rate_evidence,
    single_cluster_evidence as single_cluster_evidence,
    stability_bound_evidence as stability_bound_evidence,
    trend_evidence as trend_evidence,
)
from ._design import (
    BlowupDesign as BlowupDesign,
    delay_blowup as delay_blowup,
    solver_blowup_time as solver_blowup_time,
    solver_final_covariance as solver_final_covariance,
    weight_gradients as weight_gradients,
)
from ._energy import (
    bures_wasserstein_geodesic as bures_wasserstein_geodesic,
    bures_wasserstein_gradient as bures_wasserstein_gradient,
    bures_wasserstein_step as bures_wasserstein_step,
    energy_rate as energy_rate,
    gaussian_interaction_energy as gaussian_interaction_energy,
    gaussian_sinkhorn_energy as gaussian_sinkhorn_energy,
    geodesic_second_variation as geodesic_second_variation,
    interaction_energy as interaction_energy,
)
from ._fields import (
    AbstractBilinearHead as AbstractBilinearHead,
    AbstractCausalField as AbstractCausalField,
    AbstractDotProductHead as AbstractDotProductHead,
    AbstractGaussianClosed as AbstractGaussianClosed,
    AbstractKernelHead as AbstractKernelHead,
    AbstractScaledHead as AbstractScaledHead,
    AbstractSoftmaxHead as AbstractSoftmaxHead,
    AbstractVelocityField as AbstractVelocityField,
)
from ._gaussian_evidence import (
    blowup_time_evidence as blowup_time_evidence,
    covariance_evidence as covariance_evidence,
    error_bound_evidence as error_bound_evidence,
    l2_growth_excess as l2_growth_excess,
    outcome_evidence as outcome_evidence,
    rank_one_blowup_bound as rank_one_blowup_bound,
)
from ._gradient_flow import (
    Exponential as Exponential,
    sigmoid_energy as sigmoid_energy,
    softmax_normaliser as softmax_normaliser,
    twisted_force_jacobian as twisted_force_jacobian,
    twisted_metric as twisted_metric,
    twisted_speed_squared as twisted_speed_squared,
    twisted_wasserstein as twisted_wasserstein,
    weighted_twisted_speed_squared as weighted_twisted_speed_squared,
)
from ._heads import (
    L2 as L2,
    Linear as Linear,
    MultiHead as MultiHead,
    Sigmoid as Sigmoid,
    Softmax as Softmax,
)
from ._meanfield_limit import (
    DriftedClosure as DriftedClosure,
    MeanFieldError as MeanFieldError,
    antithetic_gaussian_sample as antithetic_gaussian_sample,
    meanfield_error as meanfield_error,
)
from ._particles import (
    RK4 as RK4,
    FixedStepSolution as FixedStepSolution,
    SphereSoftmax as SphereSoftmax,
    fixed_step_particles as fixed_step_particles,
    sphere_softmax as sphere_softmax,
    uniform_on_sphere as uniform_on_sphere,
)
from ._quadratic import QuadraticKeySoftmax as QuadraticKeySoftmax
from ._ranks import (
    pad_rank_member as pad_rank_member,
    rank_field as rank_field,
    rank_member as rank_member,
    rank_ode as rank_ode,
    rank_outcome as rank_outcome,
)
from ._regime import (
    GaussianRegime as GaussianRegime,
    Regime as Regime,
    RegimeCondition as RegimeCondition,
    gaussian_regime as gaussian_regime,
    observed_regime as observed_regime,
    seed_criterion as seed_criterion,
)
from ._select import SelectField as SelectField, SelectVelocity as SelectVelocity
from ._simulate_gaussian import (
    GaussianODE as GaussianODE,
    GaussianSolution as GaussianSolution,
    gaussian_ode as gaussian_ode,
    simulate_gaussian as simulate_gaussian,
)
from ._simulate_particles import (
    ParticleSolution as ParticleSolution,
    simulate_particles as simulate_particles,
)
from ._sinkhorn import Sinkhorn as Sinkhorn
from ._stability import (
    field_lipschitz_constants as field_lipschitz_constants,
    flow_jacobian_norms as flow_jacobian_norms,
    softmax_lipschitz_bounds as softmax_lipschitz_bounds,
    softmax_stability_constant as softmax_stability_constant,
)
from ._steering import (
    LayerWeights as LayerWeights,
    SteeringResult as SteeringResult,
    SteerOutcome as SteerOutcome,
    flow_layers as flow_layers,
    steer_gaussian as steer_gaussian,
)
from ._wrappers import (
    AbstractTimeSwitch as AbstractTimeSwitch,
    GaussianTimeSwitch as GaussianTimeSwitch,
    Masked as Masked,
    SphereProjected as SphereProjected,
    TimeSwitch as TimeSwitch,
    prefix_causal_velocity as prefix_causal_velocity,
)
