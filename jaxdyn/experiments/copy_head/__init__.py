"""Copy-head emergence experiments (copy_head.md). P counts sequences throughout (supervised
tokens = P L); each experiment asserts what the theory predicts for its head, L and V, and
runs and reports configurations outside a claim's regime."""

# importing the modules registers the experiments and their negative controls
from . import _controls, adam as adam, scaling as scaling, sgld as sgld, theory as theory  # noqa: F401
