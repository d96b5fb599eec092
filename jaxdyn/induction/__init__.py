"""Induction heads on in-context Markov chains: the copy head as the first layer of a
two-layer circuit (induction.md).

The task :class:`InContextMarkov` (a new Dirichlet transition matrix per sequence) with its
Bayes in-context predictors (``task.unigram``, ``task.bigram``, their expected loss);
the :class:`AttentionOnlyTransformer`; :func:`train` (any optax optimiser) with its
:class:`Trajectory` of held-out loss and attention order parameters
(:func:`previous_token_score`, :func:`induction_score`) at checkpoints; :func:`next_token_loss`
(the loss a learning-coefficient estimate localises); :func:`stage_boundaries` of a
loss curve; and :mod:`~jaxdyn.induction.claims`.
"""

from . import claims as claims
from ._model import AttentionOnlyTransformer as AttentionOnlyTransformer
from ._scores import (
    induction_score as induction_score,
    previous_token_score as previous_token_score,
)
from ._stages import stage_boundaries as stage_boundaries
from ._task import InContextMarkov as InContextMarkov
from ._train import (
    Trajectory as Trajectory,
    checkpoint_steps as checkpoint_steps,
    next_token_loss as next_token_loss,
    train as train,
)

__all__ = [
    "AttentionOnlyTransformer",
    "InContextMarkov",
    "Trajectory",
    "checkpoint_steps",
    "claims",
    "induction_score",
    "next_token_loss",
    "previous_token_score",
    "stage_boundaries",
    "train",
]
