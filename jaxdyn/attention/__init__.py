"""Attention kernels shared by every theory: scores, weights, masks, entropy of attention rows.

Functional kernels (scores -> weights, key axis last, optional key measure ``log_weights`` and
boolean ``mask``) live in ``_weights``; the evaluation over key chunks (online log-sum-exp:
memory-linear, or in cache-sized blocks for dense evaluation, which the mean-field fields use
from ``_chunked`` without a public name) in ``_chunked``. The mean-field velocity fields built
on them are in :mod:`jaxdyn.meanfield`.
"""

from ._chunked import (
    chunked_sinkhorn_potential as chunked_sinkhorn_potential,
    online_logsumexp as online_logsumexp,
    online_softmax_average as online_softmax_average,
    online_weighted_sum as online_weighted_sum,
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

# The kernels a user composes; the variants the theory packages build their fields from
# (bilinear scores, log-domain and bounded softmax, Sinkhorn's coupling and potential, the
# online log-sum-exp and weighted sum, the attention entropy) stay importable for them.
__all__ = [
    "causal_mask",
    "l2_scores",
    "linear_weights",
    "online_softmax_average",
    "sigmoid_weights",
    "sinkhorn_weights",
    "softmax_weights",
]
