"""What a failed ``eqx.error_if`` check does in the processes of a ``jaxdyn`` command.

One decision for every command: ``EQX_ON_ERROR`` as the user set it, else ``nan``.

With ``raise`` (equinox's default) every ``eqx.error_if`` is a host callback in the compiled
program, and JAX never writes a program with a host callback to the persistent compilation
cache: diffrax's input checks (``dt0`` of a fixed-step solve, ``saveat.ts`` traced inside
``jit``) would make a repeated run compile the simulators again. With ``nan`` those programs
hold no callback and are cached. The cost: a traced value that fails a check (a non-positive
step, unsorted save times) makes the outputs that depend on it NaN, which a sweep reports as
the member's ``nonfinite`` status, instead of stopping the run with the check's message.
Concrete inputs (the experiment's config) are still validated with one-line errors before
anything compiles. ``EQX_ON_ERROR=raise jaxdyn ...`` restores the error.

The mode reaches equinox the public way, through the environment variable that equinox reads
when it is first imported: the command line sets it before it imports anything that imports
equinox (``import jaxdyn`` does not), and the processes it starts inherit it.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

ENV_ERROR_MODE = "EQX_ON_ERROR"
DEFAULT_ERROR_MODE = "nan"


def use_error_mode(environ: MutableMapping[str, str] = os.environ) -> str:
    """Set ``EQX_ON_ERROR`` in ``environ`` (the user's value, else ``nan``) and return it.

    Called by the command line before equinox is imported; a Python caller of
    :func:`jaxdyn.cli.main` that has imported equinox already keeps its own mode."""
    return environ.setdefault(ENV_ERROR_MODE, DEFAULT_ERROR_MODE)
