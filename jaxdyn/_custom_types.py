"""Shared jaxtyping aliases used across jaxdyn.

Annotations are documentation first: shapes are named after the science pages
(``n`` tokens, ``d`` dimensions, ``L`` positions, ``V`` vocabulary, ``M`` sweep members).
"""

from typing import Any, TypeAlias

import jax
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray, PyTree, Shaped

Scalar: TypeAlias = Float[Array, ""]
ScalarLike: TypeAlias = Float[ArrayLike, ""] | float
IntScalar: TypeAlias = Int[Array, ""]
BoolScalar: TypeAlias = Bool[Array, ""]
Key: TypeAlias = PRNGKeyArray | jax.Array
Params: TypeAlias = dict[str, Any]
"""Hyperparameters of one sweep member: a mapping of names to (traced) arrays."""

__all__ = [
    "Array",
    "ArrayLike",
    "Bool",
    "BoolScalar",
    "Float",
    "Int",
    "IntScalar",
    "Key",
    "Params",
    "PyTree",
    "Scalar",
    "ScalarLike",
    "Shaped",
]
