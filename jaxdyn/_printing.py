"""Results that print their numbers.

An :class:`equinox.Module` prints an array field by dtype and shape only (``f64[]``), which
hides exactly what a result is for: a distance, a rate, a time. Result types of jaxdyn derive
from :class:`AbstractResult`, whose ``repr`` shows every small array's values (a scalar as a
number, an array of at most :data:`SHOWN_ELEMENTS` elements in full) and every larger one as
its dtype, shape and range, e.g. ``f64[64,3] in [-2.1, 3.4]``; an Enumeration item by its
public name (``Regime.low_rank``), a batch of items by the count of each name. Traced values
(inside ``jit``) print as equinox prints them.
"""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np

from ._compat import enumeration_of
from ._status import _ITEM, item_code, outcome_names

__all__ = ["AbstractResult", "SHOWN_ELEMENTS"]

SHOWN_ELEMENTS = 12
"""Arrays with at most this many elements print in full."""


class _Text:
    """A leaf that prints as the given text (a stand-in for an array in a result's repr)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _short_dtype(a: np.ndarray) -> str:
    kind = {"f": "f", "i": "i", "u": "u", "b": "bool", "c": "c"}.get(a.dtype.kind, str(a.dtype))
    return kind if kind == "bool" else f"{kind}{a.dtype.itemsize * 8}"


def _is_item(x) -> bool:
    return isinstance(x, _ITEM)


def _item_text(item) -> object:
    code = item_code(item)
    if isinstance(code, jax.core.Tracer):
        return item
    enumeration = enumeration_of(item)
    names = outcome_names(enumeration, np.asarray(code))
    if names.ndim == 0:
        return _Text(f"{enumeration.__qualname__}.{names}")
    kinds, counts = np.unique(names.astype(str), return_counts=True)
    tally = ", ".join(f"{k} {c}" for k, c in zip(kinds, counts, strict=True))
    return _Text(f"{enumeration.__qualname__}[{','.join(map(str, names.shape))}]: {tally}")


def _shown(leaf):
    if _is_item(leaf):
        return _item_text(leaf)
    if isinstance(leaf, jax.core.Tracer) or not isinstance(leaf, (jax.Array, np.ndarray)):
        return leaf
    a = np.asarray(leaf)
    with np.printoptions(precision=6, suppress=False, floatmode="maxprec"):
        if a.ndim == 0:
            return _Text(repr(a.item()))
        if a.size <= SHOWN_ELEMENTS:
            return _Text(np.array2string(a, separator=", "))
    shape = ",".join(map(str, a.shape))
    text = f"{_short_dtype(a)}[{shape}]"
    if a.dtype.kind in "fiu" and a.size:
        finite = a[np.isfinite(a)] if a.dtype.kind == "f" else a
        if finite.size:
            text += f" in [{finite.min():.4g}, {finite.max():.4g}]"
        if finite.size < a.size:
            text += f" ({a.size - finite.size} non-finite)"
    return _Text(text)


class AbstractResult(eqx.Module):
    """Base of jaxdyn's result types: an equinox Module whose ``repr`` shows its numbers."""

    def __repr__(self) -> str:
        return eqx.tree_pformat(jax.tree.map(_shown, self, is_leaf=_is_item))
