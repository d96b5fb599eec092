"""Experiment configs: typed frozen dataclasses, resolved from defaults, --quick, TOML, --set.

Every value is checked against its field's type before anything is compiled or written;
a bad key or value raises :class:`ConfigError` with a one-line message naming it.
"""

from __future__ import annotations

import ast
import dataclasses
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_origin


class ConfigError(ValueError):
    """Bad user input: unknown experiment or key, wrong type or shape, invalid science input.

    The CLI prints its message on one line and exits with status 2.
    """


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """Fields every experiment has.

    Attributes:
        seed: base seed; sweeps use ``seed, seed + 1, ...`` for their seed axis.
        chunk_size: sweep members per compiled call; 0 chooses it from the memory budget.
        memory_budget_gb: memory one sweep chunk may use per device.
        vmap_width: sweep members vectorised together per device; results are bitwise
            reproducible across chunk sizes and device counts at a fixed width.
        x64: run in float64 (recommended on CPU; set false for speed on GPUs).
    """

    seed: int = 0
    chunk_size: int = 0
    memory_budget_gb: float = 2.0
    vmap_width: int = 32
    x64: bool = True

    def validate(self) -> None:
        """Check science inputs; raise :class:`ConfigError` with a one-line reason."""

    @classmethod
    def quick(cls) -> dict[str, Any]:
        """Overrides for ``--quick``: a CPU-sized run of about a minute."""
        return {}

    @property
    def sweep_options(self) -> dict[str, Any]:
        return {
            "chunk_size": self.chunk_size,
            "memory_budget_gb": self.memory_budget_gb,
            "vmap_width": self.vmap_width,
        }

    def validate_common(self) -> None:
        if self.chunk_size < 0:
            raise ConfigError(f"chunk_size must be >= 0 (0 = automatic), got {self.chunk_size}")
        if not self.memory_budget_gb > 0:
            raise ConfigError(f"memory_budget_gb must be positive, got {self.memory_budget_gb}")
        if self.vmap_width < 1:
            raise ConfigError(f"vmap_width must be >= 1, got {self.vmap_width}")
        if self.seed < 0:
            raise ConfigError(f"seed must be >= 0, got {self.seed}")


def _type_name(tp) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin in (tuple, list):
        args = get_args(tp)
        inner = _type_name(args[0]) if args else "value"
        return f"list of {inner}"
    return getattr(tp, "__name__", str(tp))


class _CoerceError(Exception):
    pass


def _coerce(value: Any, tp) -> Any:
    """Convert ``value`` to the annotated type ``tp`` or raise ``_CoerceError``."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        if value in get_args(tp):
            return value
        raise _CoerceError
    if origin in (typing.Union, types.UnionType):
        for arg in get_args(tp):
            if arg is type(None) and value is None:
                return None
        for arg in get_args(tp):
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg)
            except _CoerceError:
                continue
        raise _CoerceError
    if origin in (tuple, list):
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise _CoerceError
        args = get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise _CoerceError
            return tuple(_coerce(v, a) for v, a in zip(value, args, strict=True))
        inner = args[0] if args else Any
        items = [_coerce(v, inner) for v in value]
        return tuple(items) if origin is tuple else items
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise _CoerceError
    if tp is int:
        if isinstance(value, bool):
            raise _CoerceError
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise _CoerceError
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _CoerceError
        return float(value)
    if tp is str:
        if isinstance(value, str):
            return value
        raise _CoerceError
    raise _CoerceError


def parse_cli_value(text: str) -> Any:
    """Parse a ``--set`` value: numbers, lists, booleans, strings (quotes optional)."""
    stripped = text.strip()
    lowered = stripped.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return ast.literal_eval(stripped)
    except (ValueError, SyntaxError):
        return stripped


def config_fields(config_cls) -> dict[str, Any]:
    hints = typing.get_type_hints(config_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_cls)}


def resolve_config(
    config_cls: type[ExperimentConfig],
    *,
    experiment: str,
    quick: bool = False,
    toml_path: str | Path | None = None,
    overrides: Mapping[str, Any] | Sequence[str] = (),
    base: Mapping[str, Any] | None = None,
) -> ExperimentConfig:
    """Build and validate a config: defaults < ``base`` < --quick < TOML file < --set.

    ``overrides`` is either a mapping or a list of ``"key=value"`` strings (as on the
    command line); string values are parsed with :func:`parse_cli_value`.
    """
    fields = config_fields(config_cls)
    values: dict[str, Any] = {}

    def apply(source: str, items: Mapping[str, Any]) -> None:
        for key, value in items.items():
            if key not in fields:
                valid = ", ".join(sorted(fields))
                raise ConfigError(
                    f"unknown key '{key}' for experiment '{experiment}' ({source}); "
                    f"valid keys: {valid}"
                )
            try:
                values[key] = _coerce(value, fields[key])
            except _CoerceError:
                raise ConfigError(
                    f"bad value for '{key}' ({source}): expected {_type_name(fields[key])}, "
                    f"got {value!r}"
                ) from None

    if base:
        apply("stored config", base)
    if quick:
        apply("--quick", config_cls.quick())
    if toml_path is not None:
        path = Path(toml_path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            table = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"config file {path} is not valid TOML: {err}") from None
        table = table.get("config", table)
        apply(f"config file {path.name}", table)
    if isinstance(overrides, Mapping):
        apply("override", overrides)
    else:
        parsed = {}
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"--set expects key=value, got '{item}'")
            key, _, text = item.partition("=")
            parsed[key.strip()] = parse_cli_value(text)
        apply("--set", parsed)

    try:
        config = config_cls(**values)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"invalid config for '{experiment}': {err}") from None
    config.validate_common()
    try:
        config.validate()
    except ConfigError:
        raise
    except ValueError as err:  # science validators raise ValueError; present them the same way
        raise ConfigError(str(err)) from None
    return config


def config_to_dict(config: ExperimentConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)
