"""Mean-field Transformer PDE (transformer_pde.md): particles, Gaussian ODEs, analysis."""

from ._analysis import (
    bures_wasserstein as bures_wasserstein,
    bures_wasserstein_map as bures_wasserstein_map,
    detect_clusters as detect_clusters,
    empirical_mean_cov as empirical_mean_cov,
    optimal_assignment as optimal_assignment,
    single_cluster_condition as single_cluster_condition,
    sliced_wasserstein as sliced_wasserstein,
    sqrtm_psd as sqrtm_psd,
    stability_ratio as stability_ratio,
    wasserstein2_exact as wasserstein2_exact,
)
from ._closed_forms import (
    blowup_time as blowup_time,
    limiting_rank as limiting_rank,
    low_rank_limit as low_rank_limit,
    softmax_identity_covariance as softmax_identity_covariance,
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
    AbstractGaussianClosed as AbstractGaussianClosed,
    AbstractKernelHead as AbstractKernelHead,
    AbstractSoftmaxHead as AbstractSoftmaxHead,
    AbstractVelocityField as AbstractVelocityField,
)
from ._heads import (
    L2 as L2,
    Linear as Linear,
    MultiHead as MultiHead,
    Sigmoid as Sigmoid,
    Sinkhorn as Sinkhorn,
    Softmax as Softmax,
)
from ._paper import (
    paper_limiting_ranks as paper_limiting_ranks,
    paper_rank_inputs as paper_rank_inputs,
    projected_euler as projected_euler,
)
from ._particles import (
    RK4 as RK4,
    FixedStepSolution as FixedStepSolution,
    SphereSoftmax as SphereSoftmax,
    fixed_step_particles as fixed_step_particles,
    sphere_softmax as sphere_softmax,
    uniform_on_sphere as uniform_on_sphere,
)
from ._simulate_gaussian import (
    GaussianEvent as GaussianEvent,
    GaussianSolution as GaussianSolution,
    simulate_gaussian as simulate_gaussian,
)
from ._simulate_particles import (
    ParticleSolution as ParticleSolution,
    simulate_particles as simulate_particles,
)
from ._wrappers import (
    AbstractTimeSwitch as AbstractTimeSwitch,
    GaussianTimeSwitch as GaussianTimeSwitch,
    Masked as Masked,
    SphereProjected as SphereProjected,
    TimeSwitch as TimeSwitch,
    prefix_causal_velocity as prefix_causal_velocity,
)
