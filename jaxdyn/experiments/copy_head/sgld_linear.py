"""copy-head-sgld-linear: the posterior of a linear-attention copy head, checked like softmax.

Same experiment as copy-head-sgld (:func:`sgld.run_sgld`) with A = G / L^alpha: the marginal
theory predicts a continuous pooling onset at P_c, so the checks assert precursors (the
posterior variance rising towards P_c, as the Laplace variance does), no hysteresis and no
bimodality.
"""

from __future__ import annotations

import dataclasses

from ...runs import Run, register_experiment
from .sgld import SGLDConfig, run_sgld


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearSGLDConfig(SGLDConfig):
    """:class:`SGLDConfig` with linear attention, L = 32, P around its onset, and G moving
    64 times faster than W (the trade between pooling and copying is a slow direction)."""

    attention: str = "linear"
    L: int = 32
    P_values: tuple[float, ...] = (8.0, 64.0, 128.0)
    g_preconditioner: float = 64.0

    @classmethod
    def quick(cls) -> dict:
        return {**SGLDConfig.quick(), "P_values": (6.0, 96.0)}


@register_experiment(
    "copy-head-sgld-linear",
    LinearSGLDConfig,
    "linear posterior by SGLD and MALA: precursors rise towards P_c, no hysteresis, unimodal",
    title="The linear posterior by SGLD and MALA",
    docs="copy_head.md#mean-versus-mode",
)
def run_sgld_linear(config: LinearSGLDConfig, run: Run) -> None:
    """copy-head-sgld-linear: SGLD and MALA on the posterior of a linear copy head."""
    run_sgld(config, run)
