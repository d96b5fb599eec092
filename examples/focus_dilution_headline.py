"""Focus and dilution in one minute: the population gradient flow of a one-layer transformer
on the headline Markov chain, its four stages, and the linearisation rates
(focus_dilution.md). Run: python examples/focus_dilution_headline.py
"""

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn.gradflow as gf  # noqa: E402

pi = jnp.array([0.75, 0.19, 0.05, 0.01])
P = gf.paper_transition(pi, 0.5)  # P = lam I + (1 - lam) 1 pi^T
model0 = gf.init_transformer(jax.random.key(0), d=4, m=6, m_attn=6, eps=1e-3)
ts = gf.log_time_grid(800.0, 300)  # stages span decades of time


@jax.jit
def flow(model0):
    sol = gf.population_flow(model0, pi, P, ts, rtol=1e-7, atol=1e-10)
    return sol, gf.trajectory_metrics(sol.models, pi, P)


sol, met = flow(model0)
met = {k: np.asarray(v) for k, v in met.items()}
stages = gf.detect_stages(ts, met, np.asarray(pi))
print("solver steps:", int(sol.num_steps), " status:", int(sol.status))
print("stages:", {k: round(v, 1) for k, v in stages.items()})

mu1 = float(gf.condensation_rate(pi))
mu_fit, _ = gf.fitted_condensation_rate(ts, met)
print(f"condensation rate: theory {mu1:.4f}, fitted {mu_fit:.4f}")

saddle = gf.unigram_saddle(pi, 6, 6)
c = float(gf.focus_rate(pi, P, saddle.gamma, saddle.beta))
spec = gf.jacobian_spectrum(saddle.model, pi, P)
att = np.asarray(spec.attention_weight) > 0.5
c_jac = float(np.asarray(spec.eigenvalues)[att][0])
c_fit = gf.fitted_focus_rate(ts, met, np.asarray(pi))[0]
print(f"focus rate: theory {c:.4f}, Jacobian at the saddle {c_jac:.4f}, fitted {c_fit:.4f}")
plateau = met["loss"][np.searchsorted(ts, 40.0)]
print(f"plateau: H(pi) = {float(gf.entropy(pi)):.5f}, loss at t=40: {plateau:.5f}")
for t in (5, 40, 100, 140, 400, 800):
    i = min(int(np.searchsorted(ts, t)), len(ts) - 1)
    print(
        f"t={ts[i]:6.1f}  loss={met['loss'][i]:.4f}  ||Phi||={met['phi_norm'][i]:7.3f}  "
        f"H(top query)={met['entropy_top_query'][i]:.3f}  "
        f"sigma(W0)={np.round(met['sv_W0'][i][:2], 3)}"
    )
