"""copy-head-adam-linear: linear-attention networks trained by Adam, checked like softmax.

Same experiment as copy-head-adam (:func:`adam.run_adam`) with A = G / L^alpha: the MAP theory
predicts a continuous pooling onset at P_c, so the checks assert a square-root onset under
grid refinement, no test-loss jump and no hysteresis between the starts.
"""

from __future__ import annotations

import dataclasses

from ...runs import Run, register_experiment
from .adam import AdamConfig, run_adam


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearAdamConfig(AdamConfig):
    """:class:`AdamConfig` with linear attention and P around its onset."""

    attention: str = "linear"
    P_values: tuple[float, ...] = (4.0, 8.0, 64.0, 128.0, 256.0)

    @classmethod
    def quick(cls) -> dict:
        return {**AdamConfig.quick(), "P_values": (6.0, 96.0)}


@register_experiment(
    "copy-head-adam-linear",
    LinearAdamConfig,
    "linear networks by Adam to the MAP: square-root onset, no jump, no hysteresis, theory",
    title="Linear networks trained by Adam to the MAP",
    docs="copy_head.md#what-the-experiments-find",
)
def run_adam_linear(config: LinearAdamConfig, run: Run) -> None:
    """copy-head-adam-linear: Adam to the MAP of a linear copy head (A = G / L^alpha)."""
    run_adam(config, run)
