"""Running one experiment into a run directory (what ``jaxdyn run`` does)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import shutil
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import distributed
from .._atomic import atomic_write_text
from .._json import jsonable
from ..sweep._options import SweepOptions
from ._config import (
    ConfigError,
    ExperimentConfig,
    config_to_dict,
    resolve_config,
    resolve_sweep_options,
)
from ._registry import Experiment, get_experiment


def default_run_dir(experiment: str, root: str | Path = "runs") -> Path:
    """``runs/<experiment>-<YYYYmmdd-HHMMSS>``: where a run goes without ``--out``."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{experiment}-{stamp}"


def read_summary(path: str | Path) -> dict[str, Any] | None:
    """The parsed ``summary.json`` of run directory ``path``, or ``None`` if it has none."""
    file = Path(path) / "summary.json"
    if not file.exists():
        return None
    return json.loads(file.read_text())


@dataclasses.dataclass(frozen=True)
class PreparedRun:
    """A resolved, validated run that has not started: what ``jaxdyn run`` is about to do.

    Attributes:
        experiment: the registered :class:`Experiment`.
        config: its validated science config.
        options: the :class:`jaxdyn.sweep.SweepOptions` its sweeps use.
        out: the run directory.
        quick: whether ``--quick`` was applied.
    """

    experiment: Experiment
    config: ExperimentConfig
    options: SweepOptions
    out: Path
    quick: bool = False


def _run_directory(name: str, out, resume: bool) -> Path:
    if out is not None:
        return Path(out)
    if not resume:
        return default_run_dir(name)
    candidates = sorted(Path("runs").glob(f"{name}-*"))
    candidates = [c for c in candidates if (c / "config.json").exists()]
    if not candidates:
        raise ConfigError(f"--resume: no earlier run of '{name}' under runs/; pass --out")
    return candidates[-1]


def _stored_run(name: str, out: Path, resume: bool, overwrite: bool) -> dict | None:
    if not (out / "config.json").exists():
        if out.exists() and any(out.iterdir()) and not overwrite:
            raise ConfigError(f"--out {out} exists and is not a jaxdyn run directory")
        return None
    stored = json.loads((out / "config.json").read_text())
    if stored.get("experiment") != name:
        raise ConfigError(f"{out} holds a run of '{stored.get('experiment')}', not '{name}'")
    if not resume and not overwrite:
        raise ConfigError(
            f"run directory {out} already exists; use --resume to continue it or "
            f"--overwrite to start again"
        )
    return stored


def prepare_run(
    name: str,
    *,
    out: str | Path | None = None,
    quick: bool = False,
    toml_path: str | Path | None = None,
    overrides: Sequence[str] | dict[str, Any] = (),
    sweep: Sequence[str] | dict[str, Any] = (),
    resume: bool = False,
    overwrite: bool = False,
    data_dir: str | Path | None = None,
    load: bool = True,
) -> PreparedRun:
    """Resolve the experiment, config, sweep options and run directory; create nothing.

    ``overrides`` are config fields (``--set``), ``sweep`` are sweep options (``--sweep``).
    ``data_dir`` (the command line's ``JAXDYN_DATA``) is given to a config with a
    ``data_dir`` field that the config leaves empty: the folder of full corpora, recorded in
    the run's ``config.json``. With ``resume`` the stored config is continued (changing it is
    refused); sweep options other than the stored vector width may change. ``load=False``
    leaves a run function registered by name unimported (:func:`get_experiment`). Raises
    :class:`ConfigError`.
    """
    experiment = get_experiment(name, load=load)
    out = _run_directory(name, out, resume)
    stored = _stored_run(name, out, resume, overwrite)
    if resume and stored is not None and not overwrite:
        config = resolve_config(experiment.config_cls, experiment=name, base=stored["config"])
        if overrides or toml_path:
            requested = resolve_config(
                experiment.config_cls,
                experiment=name,
                base=stored["config"],
                toml_path=toml_path,
                overrides=overrides,
            )
            if requested != config:
                raise ConfigError(
                    "--resume continues the stored config; --set/--config would change it"
                )
        quick = bool(stored.get("quick", quick))
        base_options = stored.get("sweep_options")
    else:
        config = resolve_config(
            experiment.config_cls,
            experiment=name,
            quick=quick,
            toml_path=toml_path,
            overrides=overrides,
        )
        config = _with_data_dir(config, data_dir)
        base_options = None
    options = resolve_sweep_options(
        _quick_sweep_defaults(experiment) if quick else experiment.sweep_defaults,
        toml_path=toml_path,
        overrides=sweep,
        base=base_options,
    )
    return PreparedRun(experiment, config, options, out, quick)


def _with_data_dir(config: ExperimentConfig, data_dir: str | Path | None) -> ExperimentConfig:
    names = {f.name for f in dataclasses.fields(config)}
    if not data_dir or "data_dir" not in names or config.data_dir:
        return config
    config = dataclasses.replace(config, data_dir=str(data_dir))
    config.validate()
    return config


# Sweep options of a quick run, where the experiment sets none of its own. Its sweeps are
# short and run once in a fresh process: a narrower group width's segment program (seconds of
# compilation) is not earned back by the lane-steps it saves, so narrow groups wait until the
# wide ones have lost about one compilation's worth (on ``jaxdyn reproduce --quick``'s five
# experiments with segmented sweeps, ``narrow_after`` 0 against 2^19 cost 18 s more
# single-core time cold and saved 7 s warm, docs/benchmarks.md).
QUICK_SWEEP_OPTIONS = {"narrow_after": 2**19}


def _quick_sweep_defaults(experiment: Experiment) -> SweepOptions:
    """``experiment``'s sweep defaults for a quick run: :data:`QUICK_SWEEP_OPTIONS` for the
    options the experiment did not set itself."""
    presets = {k: v for k, v in QUICK_SWEEP_OPTIONS.items() if k not in experiment.sweep_set}
    return experiment.sweep_defaults.updated(presets, source="--quick")


def _environment() -> dict[str, Any]:
    import jax
    import jaxlib

    import jaxdyn

    return {
        "jaxdyn_version": jaxdyn.__version__,
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "n_devices": jax.device_count(),
        "process_count": jax.process_count(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def execute_run(prepared: PreparedRun, *, overwrite: bool = False, echo: bool = True) -> Path:
    """Run a :class:`PreparedRun` into its directory; returns the run directory.

    Exceptions from the experiment propagate after ``summary.json`` records the failure.
    The run uses the config's precision (``x64``); JAX's ``jax_enable_x64`` is restored
    to what it was when the run returns or raises.
    """
    import jax

    x64 = bool(jax.config.read("jax_enable_x64"))
    jax.config.update("jax_enable_x64", bool(prepared.config.x64))
    try:
        return _execute(prepared, overwrite=overwrite, echo=echo)
    finally:  # the caller's JAX configuration, as it was
        jax.config.update("jax_enable_x64", x64)


def _execute(prepared: PreparedRun, *, overwrite: bool, echo: bool) -> Path:
    import jax

    from ._profile import profiled, profiling_enabled
    from ._run import Run  # JAX: imported here, so that preparing a run (--show-config) is fast

    barrier = distributed.barrier
    experiment, config, out = prepared.experiment, prepared.config, prepared.out
    # Several processes (jax.distributed): all run the experiment, process 0 writes the run
    # directory; barriers keep the others from touching it while it is being (re)created.
    barrier("jaxdyn-run-start")
    if overwrite and out.exists() and jax.process_index() == 0:
        shutil.rmtree(out)
    if jax.process_index() == 0:
        out.mkdir(parents=True, exist_ok=True)
    config_json = {
        "experiment": experiment.name,
        "module": experiment.module,
        "config": config_to_dict(config),
        "sweep_options": prepared.options.as_dict(),
        "quick": prepared.quick,
        "seed": config.seed,
        **_environment(),
    }
    config_path = out / "config.json"
    if config_path.exists():
        previous = json.loads(config_path.read_text())
        config_json["created"] = previous.get("created")
    else:
        config_json["created"] = datetime.datetime.now().isoformat(timespec="seconds")
    if jax.process_index() == 0:
        atomic_write_text(config_path, json.dumps(jsonable(config_json), indent=2))
    barrier("jaxdyn-run-created")

    run = Run(out, experiment=experiment.name, echo=echo, config=config, options=prepared.options)
    run.log(f"run {experiment.name} -> {out} (pid {os.getpid()})")
    try:
        with profiled(out, run.writer) if profiling_enabled() else contextlib.nullcontext():
            experiment.fn(config, run)
    except KeyboardInterrupt:
        run.interrupt()
        run.log(
            f"interrupted after {run.wall_time_s():.1f} s; finished sweep chunks are kept"
            " (continue with --resume)"
        )
        raise
    except BaseException as err:
        message = f"{type(err).__name__}: {err}"
        run.fail(message)
        run.log("failed: " + message)
        if run.writer:
            with open(out / "log.txt", "a", encoding="utf-8") as f:
                f.write(traceback.format_exc())
        raise
    barrier("jaxdyn-run-finish")  # every process is past its last checkpoint
    run.finish()
    broken = run.failed_consistency()
    run.log(
        "complete" if not broken else "failed: consistency check(s) failed: " + ", ".join(broken)
    )
    barrier("jaxdyn-run-finished")  # every process reads the final summary.json
    return out


def _assignments(values: dict[str, Any] | Sequence[str]) -> list[str]:
    """``--set``/``--sweep`` arguments of a mapping (values as Python literals) or a list."""
    if isinstance(values, dict):
        return [f"{key}={value!r}" for key, value in values.items()]
    return [str(v) for v in values]


def _importable_module(experiment) -> str | None:
    """What worker processes import to find ``experiment`` (their launch configuration's
    imports), ``""`` when
    they find it themselves (jaxdyn's own, entry points), ``None`` when they cannot (an
    experiment defined in ``__main__``: a notebook or the running script)."""
    module = sys.modules.get(experiment.module)
    if experiment.module == "__main__" or module is None:
        return None
    if experiment.module.startswith("_jaxdyn_import_"):  # imported from a file path
        return getattr(module, "__file__", None)
    return "" if experiment.module.startswith("jaxdyn.") else experiment.module


def _in_worker_processes(
    prepared: PreparedRun, processes, argv: list[str], echo: bool, quick: bool
) -> bool:
    """Run ``argv`` as local worker processes when ``processes`` asks for more than one and
    the workers can import the experiment; ``False`` to run in this process instead (also
    for a quick run that asks for no processes: ``distributed.resolve_processes``)."""
    try:
        n = distributed.resolve_processes(processes, quick=quick)
    except ValueError as err:
        raise ConfigError(f"processes: {err}") from None
    module = _importable_module(prepared.experiment)
    if n <= 1 or distributed.is_worker() or module is None:
        return False
    launch = distributed.LaunchConfig.from_environ()
    if module:
        launch = launch.replace(imports=[module])
    code = distributed.launch_local(argv, n, quiet=not echo, launch=launch)
    if code != 0:
        raise RuntimeError(
            f"jaxdyn run {prepared.experiment.name}: a worker process failed (exit code "
            f"{code}); finished chunks are kept in {prepared.out}, continue with resume=True"
        )
    return True


def run_experiment(
    name: str,
    *,
    out: str | Path | None = None,
    quick: bool = False,
    overrides: dict[str, Any] | Sequence[str] = (),
    sweep: dict[str, Any] | Sequence[str] = (),
    resume: bool = False,
    overwrite: bool = False,
    echo: bool = False,
    processes: int | str | None = None,
) -> Path:
    """``jaxdyn run`` from Python: prepare and execute experiment ``name``; returns its run
    directory (read it with :func:`read_summary` or ``numpy.load(out / "results.npz")``).

    Like the command line it uses every core by default: ``processes`` (``None``:
    the launch configuration's ``processes`` (``JAXDYN_LAUNCH``), else ``"auto"``, one process
    per core on a CPU-only install, and one process for a ``quick`` run)
    local worker processes on ``jax.distributed`` run the experiment, with results identical
    to one process (docs/scaling.md). It runs in this process instead when one process is
    asked for, when this process is already one of several, when ``XLA_FLAGS`` splits the CPU
    into devices (unless ``processes`` or the launch configuration says otherwise), or when
    the experiment was registered in ``__main__`` (a notebook or the running script), which
    worker processes cannot import; register it in a module to use every core. Bad
    arguments raise :class:`ConfigError` before any process starts; a failed worker raises
    ``RuntimeError`` (the finished chunks stay on disk for ``resume=True``). Worker processes
    use jaxdyn's XLA:CPU options like the command line. A run in this process gets the same
    options for the sweep engine's programs (it compiles each with them) and this process's
    ``XLA_FLAGS`` for the rest, where other settings can differ at round-off level
    (docs/scaling.md).
    """
    prepared = prepare_run(
        name,
        out=out,
        quick=quick,
        overrides=overrides,
        sweep=sweep,
        resume=resume,
        overwrite=overwrite,
    )
    argv = ["run", name, "--out", str(prepared.out)]
    argv += ["--quick"] * bool(quick) + ["--resume"] * resume + ["--overwrite"] * overwrite
    for flag, values in (("--set", overrides), ("--sweep", sweep)):
        for item in _assignments(values):
            argv += [flag, item]
    if _in_worker_processes(prepared, processes, argv, echo, quick):
        return prepared.out
    return execute_run(prepared, overwrite=overwrite, echo=echo)
