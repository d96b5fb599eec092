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
"""

from __future__ import annotations

import os

from .._compat import set_error_if_default

ENV_ERROR_MODE = "EQX_ON_ERROR"
DEFAULT_ERROR_MODE = "nan"


def error_mode() -> str:
    """The mode of the command's processes: ``EQX_ON_ERROR`` if set, else ``nan``."""
    return os.environ.get(ENV_ERROR_MODE, DEFAULT_ERROR_MODE)


def use_error_mode() -> str:
    """Apply :func:`error_mode` to this process (programs traced from now on) and to the
    processes it starts (the environment); returns the mode."""
    mode = error_mode()
    os.environ[ENV_ERROR_MODE] = mode
    set_error_if_default(mode)
    return mode
