"""The pieces of the ``jaxdyn`` command line (:mod:`jaxdyn.cli` is its entry point)."""
