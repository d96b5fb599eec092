"""Experiments and run directories: configs, the registry, :class:`Run`, reading runs back.

An experiment is a typed config plus a function ``fn(config, run)`` registered with
:func:`register_experiment`; the :class:`Run` it receives records arrays, sweeps, figures and
checks (evidence, consistency, report: :mod:`jaxdyn.evidence`) into one run directory
(``docs/run_directory.md``). :func:`run_experiment` runs one from Python, :func:`load` reads
a run directory back (its sweeps as xarray Datasets), :func:`write_report` reports over runs.
"""

from typing import TYPE_CHECKING

from jaxdyn._lazy import lazy_attributes as _lazy_attributes

if TYPE_CHECKING:  # the names, for type checkers and readers; loaded on first use below
    from ._config import (
        ConfigError as ConfigError,
        ExperimentConfig as ExperimentConfig,
        resolve_config as resolve_config,
    )
    from ._controls import (
        negative_control as negative_control,
        negative_controls as negative_controls,
    )
    from ._execute import read_summary as read_summary, run_experiment as run_experiment
    from ._load import RunData as RunData, load as load
    from ._registry import (
        Experiment as Experiment,
        get_experiment as get_experiment,
        list_experiments as list_experiments,
        register_experiment as register_experiment,
    )
    from ._report import write_report as write_report
    from ._run import Run as Run

# What a user calls; the registry's look-ups (get_experiment, list_experiments, Experiment),
# read_summary, resolve_config and negative_controls stay importable for the command line,
# the report and the tests.

__all__ = [
    "ConfigError",
    "ExperimentConfig",
    "Run",
    "RunData",
    "load",
    "negative_control",
    "register_experiment",
    "run_experiment",
    "write_report",
]

# Loaded on first use (as ``jaxdyn``'s own names): importing this package imports no JAX, so
# that the command line reads configs (``--show-config``) fast.
_HOMES = {
    "ConfigError": "._config",
    "ExperimentConfig": "._config",
    "resolve_config": "._config",
    "negative_control": "._controls",
    "negative_controls": "._controls",
    "read_summary": "._execute",
    "run_experiment": "._execute",
    "RunData": "._load",
    "load": "._load",
    "Experiment": "._registry",
    "get_experiment": "._registry",
    "list_experiments": "._registry",
    "register_experiment": "._registry",
    "write_report": "._report",
    "Run": "._run",
}


__getattr__, __dir__ = _lazy_attributes(globals(), _HOMES)
