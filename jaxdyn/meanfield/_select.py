"""One of several velocity fields, chosen by a traced index (transformer_pde.md, "The model").

Members of a sweep that use different attention variants (softmax and L2 in the rank
histograms, four variants in the cone pictures) share one compiled program through
:class:`SelectField`: it evaluates every candidate and keeps the one at ``index``. For the small
Gaussian ODEs (``d <= 5``) computing a few right-hand sides per step costs less than one
compilation per variant.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from jaxdyn.attention import AbstractAttention as AbstractGaussianClosed  # until _fields lands


class SelectField(AbstractGaussianClosed):
    """The field ``fields[index]``, with ``index`` an integer array (traced inside a sweep).

    Gaussian-closed when every candidate is; its affine velocity (hence its Gaussian ODE) is the
    selected candidate's.

    Attributes:
        fields: the candidate fields (same token dimension).
        index: which candidate is active (clipped to ``0 .. len(fields) - 1``).
    """

    fields: tuple[AbstractGaussianClosed, ...]
    index: Int[Array, ""]
    gaussian_closed = True

    def __init__(self, fields, index: Int[ArrayLike, ""]):
        self.fields = tuple(fields)
        self.index = jnp.asarray(index, jnp.int32)

    def __check_init__(self):
        if not self.fields:
            raise ValueError("SelectField needs at least one field")
        if self.index.shape != ():
            raise ValueError(f"SelectField: index must be a scalar, got shape {self.index.shape}")
        dims = {f.dim for f in self.fields}
        if len(dims) != 1:
            raise ValueError(f"SelectField: the fields must share one dimension, got {dims}")

    @property
    def dim(self) -> int:
        """Token dimension ``d``."""
        return self.fields[0].dim

    def _select(self, values):
        return jnp.stack(values)[jnp.clip(self.index, 0, len(self.fields) - 1)]

    def velocity(self, x, tokens, *, t=0.0, chunk_size=None):
        """The selected field's velocity (every candidate is evaluated)."""
        return self._select(
            [f.velocity(x, tokens, t=t, chunk_size=chunk_size) for f in self.fields]
        )

    def affine_velocity(
        self, mean: Float[Array, " d"], cov: Float[Array, "d d"], *, t: Float[ArrayLike, ""] = 0.0
    ) -> tuple[Float[Array, "d d"], Float[Array, " d"]]:
        """``(B, c)`` of the selected field."""
        affine = [f.affine_velocity(mean, cov, t=t) for f in self.fields]
        return self._select([a[0] for a in affine]), self._select([a[1] for a in affine])

    def gaussian_rhs(self, mean, cov, *, t=0.0):
        """The Gaussian ODE ``(B alpha + c, B Sigma + Sigma B^T)`` of the selected field."""
        B, c = self.affine_velocity(mean, cov, t=t)
        B_cov = B @ cov
        return B @ mean + c, B_cov + B_cov.T
