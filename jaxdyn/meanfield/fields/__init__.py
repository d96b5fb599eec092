"""The velocity fields of the mean-field Transformer PDE (transformer_pde.md, "The model"), in
one place: the abstract bases (what a field can do, as types), the attention heads, and the
wrappers that turn a field into another.

- bases: :class:`AbstractVelocityField` (all a user's field implements),
  :class:`AbstractGaussianClosed` (affine on Gaussians: the Gaussian ODE),
  :class:`AbstractCausalField` (direct masked evaluation), and the head bases
  :class:`AbstractBilinearHead`, :class:`AbstractScaledHead`, :class:`AbstractDotProductHead`,
  :class:`AbstractSoftmaxHead`, :class:`AbstractKernelHead` to build a head from its scores;
- heads: :class:`Softmax`, :class:`L2`, :class:`Sinkhorn`, :class:`Linear`,
  :class:`MultiHead` (Gaussian-closed); :class:`Sigmoid`, :class:`Exponential` (particles
  only); :class:`QuadraticKeySoftmax`, softmax and L2 as one field whose choice can be traced;
  :class:`SphereSoftmax` and :func:`sphere_softmax`, softmax on the unit sphere;
- wrappers: :class:`Masked` (causal, with an attention sink), :class:`TimeSwitch` and
  :class:`GaussianTimeSwitch` (layers over depth), :class:`SphereProjected`,
  :class:`SelectVelocity` and :class:`SelectField` (a traced choice among any fields),
  :class:`DriftedClosure` (a deliberately wrong closure, for the power of checks).

``jaxdyn.meanfield`` re-exports the fields and the three main bases; the head bases and
:class:`AbstractTimeSwitch` are here only, for users who write their own heads.
"""

from ._base import (
    AbstractBilinearHead as AbstractBilinearHead,
    AbstractCausalField as AbstractCausalField,
    AbstractDotProductHead as AbstractDotProductHead,
    AbstractGaussianClosed as AbstractGaussianClosed,
    AbstractKernelHead as AbstractKernelHead,
    AbstractScaledHead as AbstractScaledHead,
    AbstractSoftmaxHead as AbstractSoftmaxHead,
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
from ._select import SelectField as SelectField, SelectVelocity as SelectVelocity
from ._sinkhorn import Sinkhorn as Sinkhorn
from ._sphere import SphereSoftmax as SphereSoftmax, sphere_softmax as sphere_softmax
from ._wrappers import (
    AbstractTimeSwitch as AbstractTimeSwitch,
    DriftedClosure as DriftedClosure,
    GaussianTimeSwitch as GaussianTimeSwitch,
    Masked as Masked,
    SphereProjected as SphereProjected,
    TimeSwitch as TimeSwitch,
    prefix_causal_velocity as prefix_causal_velocity,
)
