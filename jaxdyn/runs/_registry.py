"""The experiment registry: names -> (config class, run function, description)."""

from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
from collections.abc import Callable

from ._config import ConfigError, ExperimentConfig


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A registered experiment.

    Attributes:
        name: the CLI name, e.g. ``"focus-dilution"``.
        config_cls: its typed config (a subclass of :class:`ExperimentConfig`).
        fn: ``fn(config, run) -> None``; writes arrays, scalars, checks and figures to ``run``.
        description: one line for ``jaxdyn list``.
        paper: part of ``jaxdyn reproduce``.
    """

    name: str
    config_cls: type[ExperimentConfig]
    fn: Callable
    description: str
    paper: bool = True


_REGISTRY: dict[str, Experiment] = {}
_LOADED = False


def register_experiment(
    name: str, config_cls: type[ExperimentConfig], description: str, *, paper: bool = True
):
    """Decorator registering ``fn(config, run)`` as experiment ``name``."""
    if not (isinstance(config_cls, type) and issubclass(config_cls, ExperimentConfig)):
        raise TypeError(f"experiment '{name}': config must subclass ExperimentConfig")
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"experiment '{name}': config must be a dataclass")

    def decorator(fn: Callable) -> Callable:
        existing = _REGISTRY.get(name)
        if existing is not None and existing.fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"experiment '{name}' is registered twice")
        _REGISTRY[name] = Experiment(name, config_cls, fn, description, paper)
        return fn

    return decorator


def load_experiments() -> None:
    """Import every module of ``jaxdyn.experiments`` and any in ``JAXDYN_EXPERIMENT_MODULES``.

    ``JAXDYN_EXPERIMENT_MODULES`` is a comma-separated list of importable modules that
    register their own experiments (plugins; the test suite uses it).
    """
    global _LOADED
    if _LOADED:
        return
    import jaxdyn.experiments as package

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{info.name}")
    for module in filter(None, os.environ.get("JAXDYN_EXPERIMENT_MODULES", "").split(",")):
        importlib.import_module(module.strip())
    _LOADED = True


def list_experiments() -> list[Experiment]:
    load_experiments()
    return list(_REGISTRY.values())


def get_experiment(name: str) -> Experiment:
    load_experiments()
    if name not in _REGISTRY:
        import difflib

        close = difflib.get_close_matches(name, _REGISTRY, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else "; see `jaxdyn list`"
        raise ConfigError(f"unknown experiment '{name}'{hint}")
    return _REGISTRY[name]
