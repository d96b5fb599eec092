"""Mean-field Transformer PDE (transformer_pde.md): particles, Gaussian ODEs, analysis."""

from ._closed_forms import (
    blowup_time as blowup_time,
    limiting_rank as limiting_rank,
    low_rank_limit as low_rank_limit,
    softmax_identity_covariance as softmax_identity_covariance,
)
from ._gaussian import gaussian_rhs as gaussian_rhs, velocity as velocity
from ._paper import (
    paper_limiting_ranks as paper_limiting_ranks,
    paper_rank_inputs as paper_rank_inputs,
    projected_euler as projected_euler,
)
from ._simulate import (
    GaussianEvent as GaussianEvent,
    GaussianSolution as GaussianSolution,
    ParticleSolution as ParticleSolution,
    simulate_gaussian as simulate_gaussian,
    simulate_particles as simulate_particles,
)

# --- analysis (engineer B) ---
# --- end analysis ---
