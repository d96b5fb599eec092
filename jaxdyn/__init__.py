"""jaxdyn: simulate, sweep and differentiate through the dynamics of transformer attention."""

__version__ = "0.1.0"

from ._status import Status as Status
