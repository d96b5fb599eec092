"""The velocity fields of the mean-field Transformer PDE (transformer_pde.md, "The model"), in
one place: the abstract bases (what a field can do, as types), the attention heads, and the
wrappers that turn a field into another.

- bases: :class:`AbstractVelocityField` (all a user's field implements),
  :class:`AbstractGaussianClosed` (affine on Gaussians: the Gaussian ODE);
- heads: :class:`Softmax`, :class:`L2`, :class:`Sinkhorn`, :class:`Linear`,
  :class:`MultiHead` (Gaussian-closed); :class:`Sigmoid`, :class:`Exponential` (particles
  only); :class:`QuadraticKeySoftmax`, softmax and L2 as one field whose choice can be traced;
  :class:`SphereSoftmax`, softmax on the unit sphere;
- wrappers: :class:`Masked` (causal, with an attention sink), :class:`TimeSwitch` (layers over
  depth), :class:`SphereProjected`, :class:`SelectField` (a traced choice among fields). A
  switch or selection of Gaussian-closed fields is Gaussian-closed.
"""

from ._base import (
    AbstractGaussianClosed as AbstractGaussianClosed,
    AbstractVelocityField as AbstractVelocityField,
)
from ._heads import (
    L2 as L2,
    Exponential as Exponential,
    Linear as Linear,
    MultiHead as MultiHead,
    Sigmoid as Sigmoid,
    Softmax as Softmax,
)
from ._quadratic import QuadraticKeySoftmax as QuadraticKeySoftmax
from ._select import SelectField as SelectField
from ._sinkhorn import Sinkhorn as Sinkhorn
from ._sphere import SphereSoftmax as SphereSoftmax
from ._wrappers import (
    Masked as Masked,
    SphereProjected as SphereProjected,
    TimeSwitch as TimeSwitch,
)

__all__ = [
    "AbstractGaussianClosed",
    "AbstractVelocityField",
    "Exponential",
    "L2",
    "Linear",
    "Masked",
    "MultiHead",
    "QuadraticKeySoftmax",
    "SelectField",
    "Sigmoid",
    "Sinkhorn",
    "Softmax",
    "SphereProjected",
    "SphereSoftmax",
    "TimeSwitch",
]
