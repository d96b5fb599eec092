"""Experiments of the focus-and-dilution theory (focus_dilution.md; arXiv 2605.01199), one module
per experiment; each is config -> :func:`jaxdyn.gradflow.analyse_flow` (or the theory's other
public functions) -> checks -> figures.

- ``focus-dilution`` (:mod:`.headline`): one chain, given as a matrix or the paper's family;
- ``focus-dilution-ablation`` (:mod:`.ablation`): other transition matrices with the same pi;
- ``focus-dilution-delta`` (:mod:`.delta`): escape from the rank-one stall vs delta and eps;
- ``focus-dilution-lyapunov`` (:mod:`.lyapunov`): the rank-one critical points vs delta and
  their transverse and tangential eigenvalues;
- ``focus-dilution-finite`` (:mod:`.finite`): finite-(N, s) training vs the population flow;
- ``focus-dilution-text`` (:mod:`.text`): real text, word or character level.
"""

from . import (
    ablation as ablation,
    delta as delta,
    finite as finite,
    headline as headline,
    lyapunov as lyapunov,
    text as text,
)
