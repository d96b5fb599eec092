"""jaxdyn's own experiments, one package per theory.

They join the registry through the ``jaxdyn.experiments`` entry-point group declared in
jaxdyn's ``pyproject.toml``, exactly as a user's package does (docs/extending.md); nothing in
the core imports them by name.
"""
