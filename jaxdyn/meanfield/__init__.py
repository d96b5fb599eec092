"""Mean-field Transformer PDE (transformer_pde.md): velocity fields (``jaxdyn.meanfield.fields``),
particle and Gaussian simulators, closed forms, regimes, analysis, steering."""

from . import fields as fields
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
    l2_growth_rate as l2_growth_rate,
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
    ConeOutcome as ConeOutcome,
    blowup_directions as blowup_directions,
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
from ._gradient_flow import (
    sigmoid_energy as sigmoid_energy,
    softmax_normaliser as softmax_normaliser,
    twisted_force_jacobian as twisted_force_jacobian,
    twisted_metric as twisted_metric,
    twisted_speed_squared as twisted_speed_squared,
    twisted_wasserstein as twisted_wasserstein,
    weighted_twisted_speed_squared as weighted_twisted_speed_squared,
)
from ._meanfield_limit import (
    MeanFieldError as MeanFieldError,
    antithetic_gaussian_sample as antithetic_gaussian_sample,
    meanfield_error as meanfield_error,
)
from ._particles import (
    RK4 as RK4,
    FixedStepSolution as FixedStepSolution,
    fixed_step_particles as fixed_step_particles,
    uniform_on_sphere as uniform_on_sphere,
)
from ._regime import (
    GaussianRegime as GaussianRegime,
    Regime as Regime,
    RegimeCondition as RegimeCondition,
    gaussian_regime as gaussian_regime,
    observed_regime as observed_regime,
    seed_criterion as seed_criterion,
)
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
from .fields import (
    L2 as L2,
    AbstractCausalField as AbstractCausalField,
    AbstractGaussianClosed as AbstractGaussianClosed,
    AbstractVelocityField as AbstractVelocityField,
    DriftedClosure as DriftedClosure,
    Exponential as Exponential,
    GaussianTimeSwitch as GaussianTimeSwitch,
    Linear as Linear,
    Masked as Masked,
    MultiHead as MultiHead,
    QuadraticKeySoftmax as QuadraticKeySoftmax,
    SelectField as SelectField,
    SelectVelocity as SelectVelocity,
    Sigmoid as Sigmoid,
    Sinkhorn as Sinkhorn,
    Softmax as Softmax,
    SphereProjected as SphereProjected,
    SphereSoftmax as SphereSoftmax,
    TimeSwitch as TimeSwitch,
    sphere_softmax as sphere_softmax,
)
