"""The experiment registry: names -> (config class, run function, description, sweep defaults).

Experiments join the registry in one of two ways, and jaxdyn's own experiments use the first:

- **entry points**: a package declares modules in the ``jaxdyn.experiments`` entry-point group
  of its ``pyproject.toml``; loading the entry point imports the module, whose
  :func:`register_experiment` decorators register its experiments::

      [project.entry-points."jaxdyn.experiments"]
      my-experiments = "my_package.experiments"

- **imports**: ``--import MODULE`` on any ``jaxdyn`` command (or ``JAXDYN_IMPORT``, a
  comma-separated list, read into the launch configuration) imports a module by name or a
  plain ``.py`` file by path.

The registry never imports experiment modules by name itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..sweep._options import SweepOptions
from ._config import ConfigError, ExperimentConfig

ENTRY_POINT_GROUP = "jaxdyn.experiments"


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A registered experiment.

    Attributes:
        name: the CLI name, e.g. ``"focus-dilution"``.
        config_cls: its typed config (a subclass of :class:`ExperimentConfig`).
        fn: ``fn(config, run) -> None``; writes arrays, scalars, checks and figures to ``run``.
        description: one line for ``jaxdyn list``.
        paper: part of ``jaxdyn reproduce``.
        sweep_defaults: the experiment's default :class:`jaxdyn.sweep.SweepOptions` (the
            ``[sweep]`` table and ``--sweep`` override them).
        module: where it was registered from (shown by ``jaxdyn list --verbose``).
        sweep_set: the sweep options the experiment set itself (every field when it gave a
            :class:`~jaxdyn.sweep.SweepOptions`); ``--quick``'s sweep presets leave them alone.
        title: the title of the experiment's section in the report (default: the
            description's first sentence).
        docs: the docs page (and anchor) that explains the experiment, relative to ``docs/``,
            e.g. ``"focus_dilution.md#ablation"`` (``""``: none).
    """

    name: str
    config_cls: type[ExperimentConfig]
    fn: Callable
    description: str
    paper: bool = True
    sweep_defaults: SweepOptions = dataclasses.field(default_factory=SweepOptions)
    module: str = ""
    sweep_set: frozenset[str] = frozenset()
    title: str = ""
    docs: str = ""

    def __post_init__(self):
        if not self.title:
            object.__setattr__(self, "title", default_title(self.description))


def default_title(description: str) -> str:
    """A report section's title from a one-line description: its first sentence, without the
    closing full stop."""
    text = " ".join(description.split())
    for stop in (". ", "; "):
        text = text.split(stop, 1)[0]
    return text.rstrip(".").strip()


def _check_docs_link(name: str, docs: str) -> None:
    page, _, anchor = docs.partition("#")
    if not page.endswith(".md") or page.startswith("/") or " " in docs or (_ and not anchor):
        raise ValueError(
            f"experiment '{name}': docs must be a docs page relative to docs/ with an optional "
            f"anchor, e.g. 'focus_dilution.md#ablation', got {docs!r}"
        )


class _Body:
    """An experiment's run function named ``"module:function"`` and imported at its first use,
    so that registering it (and reading its config) imports neither the module nor JAX."""

    def __init__(self, target: str):
        module, _, name = target.partition(":")
        if not module or not name:
            raise ValueError(f"a run function by name must read 'module:function', got {target!r}")
        self.target, self.__module__, self.__qualname__ = target, module, name
        self._fn: Callable | None = None

    def load(self) -> Callable:
        if self._fn is None:
            module, _, name = self.target.partition(":")
            self._fn = getattr(importlib.import_module(module), name)
        return self._fn

    def __call__(self, *args, **kwargs):
        return self.load()(*args, **kwargs)


_REGISTRY: dict[str, Experiment] = {}
_LOADED_ENTRY_POINTS = False
_IMPORTED: set[str] = set()


def register_experiment(
    name: str,
    config_cls: type[ExperimentConfig],
    description: str,
    *,
    title: str = "",
    docs: str = "",
    paper: bool = True,
    sweep: SweepOptions | Mapping[str, Any] | None = None,
):
    """Decorator registering ``fn(config, run)`` as experiment ``name``.

    ``title`` is the title of its section in the report (default: the description's first
    sentence); ``docs`` the docs page and anchor that explain it, relative to ``docs/``
    (e.g. ``"focus_dilution.md#ablation"``); ``paper`` puts it in ``jaxdyn reproduce``;
    ``sweep`` gives its default sweep options (a :class:`SweepOptions` or a mapping of its
    fields), e.g. ``{"vmap_width": 8}`` for members that run best in narrow groups.

    The decorated function may also be given by name, ``register_experiment(...)("pkg.mod:fn")``:
    it is imported when the experiment is first run or listed, so a module that only registers
    (and whose configs import no JAX) keeps ``--show-config`` fast.
    """
    if not isinstance(title, str) or not isinstance(docs, str):
        raise TypeError(f"experiment '{name}': title and docs must be strings")
    if docs:
        _check_docs_link(name, docs)
    if not (isinstance(config_cls, type) and issubclass(config_cls, ExperimentConfig)):
        raise TypeError(f"experiment '{name}': config must subclass ExperimentConfig")
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"experiment '{name}': config must be a dataclass")
    if sweep is None:
        defaults, explicit = SweepOptions(), frozenset()
    elif isinstance(sweep, SweepOptions):
        defaults, explicit = sweep, frozenset(SweepOptions.field_names())
    else:
        defaults = SweepOptions().updated(sweep, source=f"experiment '{name}'")
        explicit = frozenset(sweep)

    def decorator(fn: Callable | str) -> Callable:
        if isinstance(fn, str):
            fn = _Body(fn)
        existing = _REGISTRY.get(name)
        module = getattr(fn, "__module__", "")
        if existing is not None and (existing.module, existing.fn.__qualname__) != (
            module,
            fn.__qualname__,
        ):
            raise ValueError(
                f"experiment '{name}' is registered twice ({existing.module} and {module})"
            )
        _REGISTRY[name] = Experiment(
            name,
            config_cls,
            fn,
            description,
            paper,
            defaults,
            module,
            explicit,
            title=title.strip(),
            docs=docs,
        )
        return fn

    return decorator


def _import_path(path: Path) -> None:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    module_name = f"_jaxdyn_import_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"--import: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)


def _import_module(name: str) -> None:
    """Import ``name``; a module not found on the path is looked for in the working directory
    too, as ``python -m``, pytest and uvicorn do."""
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        cwd = os.getcwd()
        if err.name != name.split(".")[0] or cwd in sys.path:
            raise
        sys.path.insert(0, cwd)
        importlib.import_module(name)


def import_experiments(targets: Iterable[str]) -> None:
    """Import modules (by name) or ``.py`` files (by path) that register experiments.

    A module name is looked up on ``sys.path`` and then in the working directory. Raises
    :class:`ConfigError` with a one-line message when a target cannot be imported.
    """
    for target in targets:
        target = target.strip()
        if not target or target in _IMPORTED:
            continue
        path = Path(target)
        try:
            if target.endswith(".py") or os.sep in target:
                if not path.is_file():
                    raise ConfigError(f"--import: no such file: {target}")
                _import_path(path.resolve())
            else:
                _import_module(target)
        except ConfigError:
            raise
        except ImportError as err:
            raise ConfigError(f"--import {target}: {err}") from None
        _IMPORTED.add(target)


def _load_entry_points(until: str | None = None) -> None:
    """Load the entry points (each once), all of them, or only until ``until`` is registered."""
    global _LOADED_ENTRY_POINTS
    if _LOADED_ENTRY_POINTS:
        return
    entries = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    if until is not None:  # an entry point named after the experiment's prefix first
        entries.sort(key=lambda e: -len(e.name) if until.startswith(e.name) else 0)
    for entry in entries:
        if until is not None and until in _REGISTRY:
            return
        if entry.value in _IMPORTED:
            continue
        _IMPORTED.add(entry.value)
        try:
            entry.load()
        except Exception as err:  # one broken plugin must not hide the others
            print(
                f"jaxdyn: warning: could not load experiments '{entry.name}' "
                f"({entry.value}): {type(err).__name__}: {err}",
                file=sys.stderr,
            )
    _LOADED_ENTRY_POINTS = until is None or until not in _REGISTRY


def load_experiments() -> None:
    """Load every experiment: entry points, then the launch configuration's imports
    (``--import``, ``JAXDYN_IMPORT``)."""
    from ..distributed._launch import LaunchConfig

    _load_entry_points()
    import_experiments(LaunchConfig.from_environ().imports)


def list_experiments() -> list[Experiment]:
    """Every registered experiment, in registration order (run functions given by name are
    imported, with what their modules register)."""
    load_experiments()
    for experiment in _REGISTRY.values():
        if isinstance(experiment.fn, _Body):
            experiment.fn.load()
    return list(_REGISTRY.values())


def get_experiment(name: str, *, load: bool = True) -> Experiment:
    """The experiment called ``name``; :class:`ConfigError` (with a suggestion) if unknown.
    ``load=False`` leaves a run function given by name unimported (its config is enough).
    Entry points are loaded until ``name`` is registered (an experiments package that imports
    no JAX keeps ``--show-config`` free of it)."""
    from ..distributed._launch import LaunchConfig

    import_experiments(LaunchConfig.from_environ().imports)
    _load_entry_points(until=name)
    if name not in _REGISTRY:
        load_experiments()
    if name not in _REGISTRY:
        import difflib

        close = difflib.get_close_matches(name, _REGISTRY, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else "; see `jaxdyn list`"
        raise ConfigError(f"unknown experiment '{name}'{hint}")
    experiment = _REGISTRY[name]
    if load and isinstance(experiment.fn, _Body):
        experiment.fn.load()
    return experiment
