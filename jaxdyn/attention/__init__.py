"""The one implementation of attention in jaxdyn.

Functional kernels (scores -> weights) live in ``_weights``; the equinox Modules of the
mean-field variants (Softmax, L2, Sinkhorn, Sigmoid, Linear, MultiHead, Masked) and the
memory-linear chunked evaluation build on them. Other packages import from here only.
"""

from ._chunked import (
    chunked_sinkhorn_potential as chunked_sinkhorn_potential,
    online_logsumexp as online_logsumexp,
    online_softmax_average as online_softmax_average,
    online_weighted_sum as online_weighted_sum,
)
from ._kernels import (
    L2 as L2,
    AbstractAttention as AbstractAttention,
    Linear as Linear,
    Masked as Masked,
    MultiHead as MultiHead,
    PiecewiseConstant as PiecewiseConstant,
    Sigmoid as Sigmoid,
    Sinkhorn as Sinkhorn,
    Softmax as Softmax,
)
from ._weights import (
    attention_entropy as attention_entropy,
    bilinear_scores as bilinear_scores,
    bounded_softmax_average as bounded_softmax_average,
    causal_mask as causal_mask,
    l2_scores as l2_scores,
    linear_weights as linear_weights,
    log_softmax_weights as log_softmax_weights,
    sigmoid_weights as sigmoid_weights,
    sinkhorn_log_coupling as sinkhorn_log_coupling,
    sinkhorn_weights as sinkhorn_weights,
    softmax_weights as softmax_weights,
)
