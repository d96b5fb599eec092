"""Registered experiments: one module per theory, each registering its experiments.

Modules here are imported by :func:`jaxdyn.runs.list_experiments` (the CLI's registry).
"""
