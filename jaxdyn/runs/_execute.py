"""Running one experiment into a run directory (what ``jaxdyn run`` does)."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import traceback
from pathlib import Path
from typing import Any

from ._atomic import atomic_write_text
from ._config import ConfigError, ExperimentConfig, config_to_dict, resolve_config
from ._registry import Experiment, get_experiment
from ._run import Run, _jsonable


def default_run_dir(experiment: str, root: str | Path = "runs") -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{experiment}-{stamp}"


def read_summary(path: str | Path) -> dict[str, Any] | None:
    file = Path(path) / "summary.json"
    if not file.exists():
        return None
    return json.loads(file.read_text())


def prepare_run(
    name: str,
    *,
    out: str | Path | None = None,
    quick: bool = False,
    toml_path: str | Path | None = None,
    overrides: list[str] | dict[str, Any] = (),
    resume: bool = False,
    overwrite: bool = False,
) -> tuple[Experiment, ExperimentConfig, Path]:
    """Resolve the experiment, config and run directory; create nothing. Raises ConfigError."""
    experiment = get_experiment(name)
    if out is None:
        if resume:
            candidates = sorted(Path("runs").glob(f"{name}-*"))
            candidates = [c for c in candidates if (c / "config.json").exists()]
            if not candidates:
                raise ConfigError(f"--resume: no earlier run of '{name}' under runs/; pass --out")
            out = candidates[-1]
        else:
            out = default_run_dir(name)
    out = Path(out)
    stored = None
    if (out / "config.json").exists():
        stored = json.loads((out / "config.json").read_text())
        if stored.get("experiment") != name:
            raise ConfigError(
                f"{out} holds a run of '{stored.get('experiment')}', not '{name}'"
            )
        if not resume and not overwrite:
            raise ConfigError(
                f"run directory {out} already exists; use --resume to continue it or "
                f"--overwrite to start again"
            )
    elif out.exists() and any(out.iterdir()) and not overwrite:
        raise ConfigError(f"--out {out} exists and is not a jaxdyn run directory")

    if resume and stored is not None and not overwrite:
        config = resolve_config(
            experiment.config_cls, experiment=name, base=stored["config"]
        )
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
    else:
        config = resolve_config(
            experiment.config_cls,
            experiment=name,
            quick=quick,
            toml_path=toml_path,
            overrides=overrides,
        )
    return experiment, config, out


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
    }


def execute_run(
    experiment: Experiment,
    config: ExperimentConfig,
    out: Path,
    *,
    quick: bool = False,
    overwrite: bool = False,
    echo: bool = True,
) -> Path:
    """Run ``experiment`` with ``config`` into ``out``; returns the run directory.

    Exceptions from the experiment propagate after ``summary.json`` records the failure.
    """
    import jax

    jax.config.update("jax_enable_x64", bool(config.x64))
    if overwrite and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    config_json = {
        "experiment": experiment.name,
        "config": config_to_dict(config),
        "quick": quick,
        "seed": config.seed,
        **_environment(),
    }
    config_path = out / "config.json"
    if config_path.exists():
        previous = json.loads(config_path.read_text())
        config_json["created"] = previous.get("created")
        config_json["quick"] = previous.get("quick", quick)
    else:
        config_json["created"] = datetime.datetime.now().isoformat(timespec="seconds")
    if jax.process_index() == 0:
        atomic_write_text(config_path, json.dumps(_jsonable(config_json), indent=2))

    run = Run(out, experiment=experiment.name, echo=echo, config=config)
    run.log(f"run {experiment.name} -> {out} (pid {os.getpid()})")
    try:
        experiment.fn(config, run)
    except BaseException as err:
        message = f"{type(err).__name__}: {err}"
        run.fail("interrupted" if isinstance(err, KeyboardInterrupt) else message)
        if not isinstance(err, KeyboardInterrupt):
            run.log("failed: " + message)
            with open(out / "log.txt", "a", encoding="utf-8") as f:
                f.write(traceback.format_exc())
        raise
    run.finish()
    run.log("complete")
    return out
