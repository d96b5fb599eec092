"""Run directories, experiment configs and registry, atomic writes, reports.

An experiment is a typed config plus a function ``fn(config, run)`` registered with
:func:`register_experiment`; the :class:`Run` it receives writes arrays, scalars, checks,
sweeps and figures into one run directory (``docs/run_directory.md``).
"""

from .._atomic import (
    atomic_savefig as atomic_savefig,
    atomic_savez as atomic_savez,
    atomic_write_text as atomic_write_text,
)
from ._config import (
    ConfigError as ConfigError,
    ExperimentConfig as ExperimentConfig,
    parse_cli_value as parse_cli_value,
    resolve_config as resolve_config,
    resolve_sweep_options as resolve_sweep_options,
)
from ._controls import (
    negative_control as negative_control,
    negative_controls as negative_controls,
)
from ._execute import (
    PreparedRun as PreparedRun,
    execute_run as execute_run,
    prepare_run as prepare_run,
    read_summary as read_summary,
    run_experiment as run_experiment,
)
from ._load import RunData as RunData, load as load
from ._registry import (
    ENTRY_POINT_GROUP as ENTRY_POINT_GROUP,
    Experiment as Experiment,
    get_experiment as get_experiment,
    import_experiments as import_experiments,
    list_experiments as list_experiments,
    register_experiment as register_experiment,
)
from ._report import find_run_dirs as find_run_dirs, write_report as write_report
from ._run import Run as Run
