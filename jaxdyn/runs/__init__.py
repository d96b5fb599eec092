"""Run directories, experiment configs and registry, atomic writes, reports."""

from ._atomic import (
    atomic_savefig as atomic_savefig,
    atomic_savez as atomic_savez,
    atomic_write_text as atomic_write_text,
)
from ._config import (
    ConfigError as ConfigError,
    ExperimentConfig as ExperimentConfig,
    parse_cli_value as parse_cli_value,
    resolve_config as resolve_config,
)
from ._execute import (
    execute_run as execute_run,
    prepare_run as prepare_run,
    read_summary as read_summary,
)
from ._registry import (
    Experiment as Experiment,
    get_experiment as get_experiment,
    list_experiments as list_experiments,
    register_experiment as register_experiment,
)
from ._report import find_run_dirs as find_run_dirs, write_report as write_report
from ._run import Run as Run
