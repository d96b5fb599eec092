"""Softmax attention on the unit sphere, evaluated with the known score bound (transformer_pde.md,
"Particle pictures"; the token-clustering model of Geshkovski, Letrouit, Polyanskiy, Rigollet,
"A mathematical perspective on Transformers").

Tokens normalised to the unit sphere (a layer norm) move by
``dx_i/dt = P_{x_i}^perp ( sum_j softmax_j(beta <x_i, x_j>) x_j )``, ``P_x^perp = I - x x^T``:
softmax attention with ``A = beta I``, ``V = I`` projected on the tangent space
(:class:`jaxdyn.meanfield.fields.SphereProjected` of a :class:`jaxdyn.meanfield.fields.Softmax`).
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxdyn.attention import online_softmax_average
from jaxdyn.attention._chunked import dense_softmax_average

from ._base import AbstractVelocityField
from ._heads import Softmax
from ._wrappers import SphereProjected, tangent_projection


class SphereSoftmax(AbstractVelocityField):
    """``Gamma(x) = P_x^perp sum_j softmax_j(beta <x, y_j>) y_j``, ``P_x^perp = I - x x^T / |x|^2``:
    the velocity of ``SphereProjected(Softmax(A = beta I, V = I))``, evaluated for tokens on (or
    near) the unit sphere.

    Numerical choice: a softmax is invariant under a shift of each row of scores, and on the
    unit sphere the scores ``beta <x, y>`` are bounded by ``beta``, so the shift is ``beta``
    instead of the row maximum: ``E = exp(beta (<x, y> - 1))`` lies in ``[e^{-2 beta}, 1]``
    and no max-reduction pass over the score matrix is needed. The normalisation is applied
    after the products (``jaxdyn.attention.bounded_softmax_average``; beyond 2^20 scores, on
    CPU, by blocks that stay in cache), then projected. The
    result is the same softmax average up to rounding for any tokens; the
    shift only matters for range. It is safe while ``beta (|x||y| - 1)`` stays well below the
    exponent range (RK4 stages leave the sphere by ``O(h^2)``, harmless) and no query row
    underflows entirely: queries that are tokens always see themselves with
    ``E_ii = exp(beta (|x_i|^2 - 1)) ~ 1``; for other queries keep ``2 beta`` below ~80
    (float32) or use ``bounded=False``. With ``chunk_size`` the
    general online log-sum-exp of ``jaxdyn.attention`` is used. ``bounded=False`` shifts by
    the row maximum instead (the velocity of ``SphereProjected(Softmax(Q = beta sqrt(d) I,
    K = I, V = I))``), valid for tokens anywhere.

    Attributes:
        beta: inverse temperature (a scalar; may be traced: one compilation for a beta sweep).
        d: token dimension.
        bounded: shift the scores by their bound ``beta`` (default) or by the row maximum.
        chunk_size: evaluate in chunks of this many queries and keys (``None``: dense).
    """

    beta: Float[Array, ""] = eqx.field(converter=jnp.asarray)
    d: int = eqx.field(static=True)
    bounded: bool = eqx.field(static=True, default=True)
    chunk_size: int | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        if self.beta.ndim != 0:
            raise ValueError(f"SphereSoftmax: beta must be a scalar, got shape {self.beta.shape}")
        if self.d < 1:
            raise ValueError(f"SphereSoftmax: d must be >= 1, got {self.d}")

    def A(self, t=0.0) -> Float[Array, "d d"]:
        """Interaction matrix ``A = beta I``."""
        return self.beta * jnp.eye(self.d)

    def velocity(self, x, tokens, *, t=0.0):
        if x.shape[-1] != self.d or tokens.shape[-1] != self.d:
            raise ValueError(
                f"SphereSoftmax: x and tokens must have d = {self.d} columns, got "
                f"{x.shape} and {tokens.shape}"
            )
        beta = self.beta.astype(jnp.result_type(x, tokens))
        if not self.bounded:
            eye = jnp.eye(self.d, dtype=beta.dtype)
            general = SphereProjected(base=Softmax(Q=beta * jnp.sqrt(self.d) * eye, K=eye, V=eye))
            return general.velocity(x, tokens, t=t)
        if self.chunk_size is not None:
            avg = online_softmax_average(
                lambda q, k: beta * (q @ k.T), x, tokens, tokens, chunk_size=self.chunk_size
            )
        else:
            avg = dense_softmax_average(
                lambda q, k: beta * (q @ k.T), x, tokens, tokens, bound=beta
            )
        return tangent_projection(avg, x)
