"""The one adapter module: every use of another library's internals, organised by library.

Each entry says what it relies on and which public API would replace it; ``pyproject.toml``
bounds each library to the minor versions tested. Nothing else in jaxdyn imports a private
name of equinox, diffrax or jax (``tests/test_public_api.py`` greps for them).

equinox
  - :func:`enumeration_items`: an Enumeration's items by name (``Enumeration._name_to_item``).
  - :func:`patch_equinox_closure_convert`: equinox <= 0.13.8's ``filter_closure_convert``
    compares the *sharding* of example and actual arguments. Inside ``jax.shard_map`` a
    scalar's sharding metadata can change (adding zero attaches the manual mesh) without any
    change of value, shape or dtype, so diffrax event root finding (optimistix) fails with
    "Closure-converted function called with different dynamic arguments" (diffrax issue
    #765; fix proposed in equinox PR #1261). The shim compares shapes and dtypes only, which
    is what the check is for. It is applied once, by the sweep engine, and only to the
    affected equinox versions.
"""

from __future__ import annotations

import jax
import jax.tree_util as jtu


# -- equinox ---------------------------------------------------------------------------------
def enumeration_items(enumeration: type) -> dict:
    """``{name: item}`` of an equinox ``Enumeration`` (inherited items included), in code order.

    Relies on ``Enumeration._name_to_item`` (equinox 0.13). equinox has no public way to list
    an Enumeration's items; iteration over the class (``for item in Status``) or a public
    ``names()`` would replace it. Everything else jaxdyn does with items is public: the code is
    the item's one PyTree leaf, the message is ``enumeration[item]``.
    """
    return dict(enumeration._name_to_item)


_APPLIED = False


def patch_equinox_closure_convert() -> None:
    global _APPLIED
    if _APPLIED:
        return
    _APPLIED = True
    try:
        import equinox
        from equinox import _ad
    except ImportError:
        return
    version = tuple(int(p) for p in equinox.__version__.split(".")[:3] if p.isdigit())
    if version > (0, 13, 8) or not hasattr(_ad, "_strip_weak_dtype"):
        return

    def _strip_weak_dtype_and_sharding(tree):
        return jtu.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)

    _ad._strip_weak_dtype = _strip_weak_dtype_and_sharding
