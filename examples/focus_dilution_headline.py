"""Focus and dilution in one call: analyse the population gradient flow of a one-layer
transformer on the paper's headline chain and on a chain of your own (focus_dilution.md).
Run: python examples/focus_dilution_headline.py
"""

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn.gradflow as gf  # noqa: E402


def report(name, P):
    a = gf.analyse_flow(gf.MarkovChain(P))  # pi: the stationary law of P; t1 from the rates
    r, st = a.rates, a.stages
    print(f"--- {name}: pi = {np.round(np.asarray(a.chain.pi), 3)}")
    print(f"flow to t1 = {float(a.end_time):.0f}: {int(a.num_steps)} solver steps")
    print(
        f"condensation rate mu1 = {float(r.condensation):.4f} "
        f"(top eigenvalue of J at 0: {float(r.condensation_jacobian):.4f})"
    )
    print(
        f"signed focus rate c = {float(r.focus):+.4f} "
        f"(Jacobian at the saddle: {float(r.focus_jacobian):+.4f}; "
        f"at the saddle the flow visits: {float(r.focus_visited):+.4f})"
    )
    print(f"transverse rate at the rank-one stall: {float(r.transverse):.4g}")
    where = "onto" if int(st.departure_sign) > 0 else "off"
    print(f"attention first moves {where} the most frequent token")
    print(
        "stages:", {k: round(v, 1) for k, v in st.times().items()}, "in order:", bool(st.in_order())
    )
    print(
        f"low-query attention entropy: H(pi) = {float(st.uniform_entropy):.3f}, "
        f"dip {float(st.entropy_dip):.3f}, peak {float(st.entropy_peak):.3f}, "
        f"then {float(st.entropy_after_peak):.3f}"
    )


pi = jnp.array([0.75, 0.19, 0.05, 0.01])
report("headline: P = 0.5 I + 0.5 1 pi^T", gf.MarkovChain.paper(pi, 0.5).P)
# frequent token followed by rare ones: c < 0, attention first moves off it
report(
    "a chain with c < 0",
    np.array([[0.4, 0.3, 0.2, 0.1], [0.9, 0.1, 0, 0], [0.9, 0, 0.1, 0], [0.9, 0, 0, 0.1]]),
)
