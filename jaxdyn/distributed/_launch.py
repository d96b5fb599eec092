"""The launch configuration: everything a ``jaxdyn`` process learns from its environment.

One typed, frozen record, read once by the command line and by the launcher
(:meth:`LaunchConfig.from_environ`) and handed to the processes they start
(:meth:`LaunchConfig.to_environ`). The library reads no environment variable: what it needs
(the data folder, the number of processes) reaches it as arguments. Four variables:

- ``JAXDYN_IMPORT``: modules (or ``.py`` files) that register experiments, comma-separated
  (``--import`` on the command line adds to it);
- ``JAXDYN_DATA``: a folder of full corpora, ``<folder>/<name>/<file>``, where
  ``jaxdyn data fetch`` also stores them (default: ``~/.cache/jaxdyn/data``);
- ``JAXDYN_CACHE_DIR``: JAX's persistent compilation cache (default ``~/.cache/jaxdyn/xla``;
  ``off`` disables it);
- ``JAXDYN_LAUNCH``: the rest, as JSON (``{"processes": 1}``, ``{"profile": true}``), which is
  also how a launcher tells a worker its place in a multi-process run (coordinator, process
  id, number of processes, the launcher's pid, a reproduce pool's claim folder). On a
  cluster, ``JAXDYN_LAUNCH='{"coordinator": "host:port", "num_processes": 4,
  "process_id": 0}'`` sets what ``jax.distributed.initialize()`` cannot detect itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

ENV_IMPORT = "JAXDYN_IMPORT"
ENV_DATA = "JAXDYN_DATA"
ENV_CACHE_DIR = "JAXDYN_CACHE_DIR"
ENV_LAUNCH = "JAXDYN_LAUNCH"

_OFF = ("", "0", "off", "none")
_JSON_TYPES = {
    "cache_min_compile_secs": (int, float),
    "processes": (int, str),
    "cpu_devices": (int, str),
    "profile": (bool,),
    "coordinator": (str,),
    "num_processes": (int,),
    "process_id": (int,),
    "launcher_pid": (int,),
    "reproduce_claims": (str,),
}


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """How this process was launched (see the module docstring for the environment).

    Attributes:
        imports: modules or ``.py`` files that register experiments.
        data_dir: a folder of full corpora (``None``: the default cache only).
        cache_dir: the persistent compilation cache's folder (``None``: off).
        cache_min_compile_secs: programs that took longer to compile are cached (0: all).
        processes: local worker processes (an int or ``"auto"``; ``None``: the default).
        cpu_devices: in-process CPU devices (an int or ``"auto"``; ``None``: one).
        profile: write ``profile.json`` into each run directory.
        coordinator: ``host:port`` of a multi-process run's coordinator.
        num_processes: processes of a multi-process run.
        process_id: this process's index in a multi-process run.
        launcher_pid: the local launcher that started this worker (it exits with it).
        reproduce_claims: a reproduce pool's claim folder (this process is one of its workers).
    """

    imports: tuple[str, ...] = ()
    data_dir: str | None = None
    cache_dir: str | None = str(Path.home() / ".cache" / "jaxdyn" / "xla")
    cache_min_compile_secs: float | int = 0.0
    processes: int | str | None = None
    cpu_devices: int | str | None = None
    profile: bool = False
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    launcher_pid: int | None = None
    reproduce_claims: str | None = None

    def __post_init__(self):
        for name in ("processes", "cpu_devices"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                object.__setattr__(self, name, str(value))
        secs = self.cache_min_compile_secs
        if isinstance(secs, bool) or not isinstance(secs, int | float) or not secs >= 0:
            raise ValueError(
                f"{ENV_LAUNCH}: cache_min_compile_secs must be a number >= 0, got "
                f"{self.cache_min_compile_secs!r}"
            )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> LaunchConfig:
        """The launch configuration in ``environ`` (default: this process's environment).

        Raises ``ValueError`` (one line) when ``JAXDYN_LAUNCH`` is not a JSON object of this
        class's fields."""
        environ = os.environ if environ is None else environ
        fields = {f.name for f in dataclasses.fields(cls)} - {"imports", "data_dir", "cache_dir"}
        raw = environ.get(ENV_LAUNCH, "").strip()
        try:
            launch = json.loads(raw) if raw else {}
        except json.JSONDecodeError as err:
            raise ValueError(f"{ENV_LAUNCH} is not JSON ({err.msg}): {raw!r}") from None
        if not isinstance(launch, dict) or set(launch) - fields:
            unknown = sorted(set(launch) - fields) if isinstance(launch, dict) else launch
            raise ValueError(
                f"{ENV_LAUNCH} must be a JSON object of {sorted(fields)}; unknown: {unknown}"
            )
        for name, value in launch.items():
            if value is None:
                continue
            if not isinstance(value, _JSON_TYPES[name]) or (
                isinstance(value, bool) and bool not in _JSON_TYPES[name]
            ):
                raise ValueError(f"{ENV_LAUNCH}: {name} cannot be {value!r}")
        cache = environ.get(ENV_CACHE_DIR)
        if cache is not None:
            launch["cache_dir"] = None if cache.strip().lower() in _OFF else cache
        imports = [m.strip() for m in environ.get(ENV_IMPORT, "").split(",") if m.strip()]
        return cls(
            imports=tuple(dict.fromkeys(imports)),
            data_dir=environ.get(ENV_DATA) or None,
            **launch,
        )

    def replace(self, **changes: Any) -> LaunchConfig:
        """A copy with ``changes`` (``imports`` are added to, not replaced)."""
        if "imports" in changes:
            changes["imports"] = tuple(dict.fromkeys([*self.imports, *changes["imports"]]))
        return dataclasses.replace(self, **changes)

    def to_environ(self, environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
        """The environment variables that carry this configuration to a process started with
        them (written into ``environ`` too when given); fields at their defaults are left
        out."""
        default = LaunchConfig()
        out: dict[str, str] = {}
        if self.imports:
            out[ENV_IMPORT] = ",".join(self.imports)
        if self.data_dir:
            out[ENV_DATA] = str(self.data_dir)
        if self.cache_dir != default.cache_dir:
            out[ENV_CACHE_DIR] = "off" if self.cache_dir is None else str(self.cache_dir)
        launch = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("imports", "data_dir", "cache_dir")
            and getattr(self, f.name) != getattr(default, f.name)
        }
        if launch:
            out[ENV_LAUNCH] = json.dumps(launch, sort_keys=True)
        if environ is not None:
            for name in (ENV_IMPORT, ENV_DATA, ENV_CACHE_DIR, ENV_LAUNCH):
                environ.pop(name, None)
            environ.update(out)
        return out

    @property
    def is_worker(self) -> bool:
        """Whether this process was started as one of a multi-process run's workers."""
        return self.process_id is not None
