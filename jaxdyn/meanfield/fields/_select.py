"""One of several Gaussian-closed fields, chosen by a traced index (transformer_pde.md, "The
model").

Members of a sweep that use different attention variants (softmax and L2 in the rank
histograms, four variants in the cone pictures) share one compiled program through
:class:`SelectField`. Under ``vmap`` with a batched index every candidate is evaluated and one
is kept; for the small Gaussian ODEs (``d <= 5``) that costs less than one compilation per
variant.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Int

from ._base import AbstractGaussianClosed, AbstractVelocityField


def _switched_velocity(fields, index, x, tokens, t):
    branches = [lambda x, y, t, f=f: f.velocity(x, y, t=t) for f in fields]
    return jax.lax.switch(index, branches, x, tokens, t)


class SelectField(AbstractVelocityField):
    """The field ``fields[index]``, with ``index`` an integer array (traced inside a sweep):
    runs of several attention variants share one compiled program.

    Outside ``vmap`` (a scalar index) only the selected candidate runs; under ``vmap`` with a
    batched index every candidate is evaluated and one is kept. An index outside
    ``0 .. len(fields) - 1`` is clamped. When every candidate is Gaussian-closed,
    ``SelectField(fields, index)`` returns a Gaussian-closed ``SelectField`` (its affine
    velocity, hence its Gaussian ODE, is the selected candidate's).

    Attributes:
        fields: the candidate velocity fields (same token dimension).
        index: which candidate is active.
    """

    fields: tuple[AbstractVelocityField, ...] = eqx.field(converter=tuple)
    index: Int[Array, ""] = eqx.field(converter=lambda i: jnp.asarray(i, jnp.int32))

    def __new__(cls, fields=(), *args, **kwargs):
        fields = kwargs.get("fields", fields)
        if (
            cls is SelectField
            and fields
            and all(isinstance(f, AbstractGaussianClosed) for f in fields)
        ):
            cls = _GaussianSelectField
        return super().__new__(cls)

    def __check_init__(self):
        if not self.fields:
            raise ValueError("SelectField needs at least one field")
        bad = [type(f).__name__ for f in self.fields if not isinstance(f, AbstractVelocityField)]
        if bad:
            raise TypeError(f"SelectField: fields must be velocity fields, got {bad}")
        if self.index.shape != ():
            raise ValueError(f"SelectField: index must be a scalar, got shape {self.index.shape}")
        dims = {f.dim for f in self.fields if hasattr(f, "dim")}
        if len(dims) > 1:
            raise ValueError(f"SelectField: the fields must share one dimension, got {dims}")

    def velocity(self, x, tokens, *, t=0.0):
        return _switched_velocity(self.fields, self.index, x, tokens, t)


class _GaussianSelectField(SelectField, AbstractGaussianClosed):
    """A :class:`SelectField` of Gaussian-closed candidates; Gaussian-closed itself."""

    def affine_velocity(self, mean, cov, *, t=0.0):
        branches = [lambda m, c, t, f=f: f.affine_velocity(m, c, t=t) for f in self.fields]
        return jax.lax.switch(self.index, branches, mean, cov, t)
