"""Experiment configs: typed frozen dataclasses, resolved from defaults, --quick, TOML, --set.

Every value is checked against its field's type before anything is compiled or written;
a bad key or value raises :class:`ConfigError` with a one-line message naming it.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args, get_origin

from ..sweep._options import SweepOptions


class ConfigError(ValueError):
    """Bad user input: unknown experiment or key, wrong type or shape, invalid science input.

    The CLI prints its message on one line and exits with status 2.
    """


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """Fields every experiment has; an experiment's config subclasses this frozen dataclass.

    Science only: how a sweep is executed (vector width, chunk size, memory budget, devices,
    processes) is a :class:`jaxdyn.sweep.SweepOptions`, set separately.

    A config states the valid range of its numeric fields in ``RANGES`` (its own and its
    bases' are all checked before :meth:`validate`; a value must be finite): ``"field spec;
    ..."`` with ``spec`` an
    interval ``(lo, hi)``, ``[lo, hi)``, ``(lo, hi]``, ``[lo, hi]`` or a bound ``>= x``,
    ``> x``, applied to every entry of a tuple field, e.g. ``"eps (0, 0.1); steps >= 1"``.

    Attributes:
        seed: base seed; sweeps use ``seed, seed + 1, ...`` for their seed axis.
        x64: run in float64 (recommended on CPU; set false for speed on GPUs).
    """

    RANGES: ClassVar[str] = "seed >= 0"
    seed: int = 0
    x64: bool = True

    def validate(self) -> None:
        """Check science inputs; raise :class:`ConfigError` (or ``ValueError``) with a
        one-line reason. Called before anything is created or compiled. This default checks
        ``RANGES``; an override adds its own checks and calls ``super().validate()``."""
        self.validate_common()

    @classmethod
    def quick(cls) -> dict[str, Any]:
        """Overrides for ``--quick``: a CPU-sized run of about a minute."""
        return {}

    def validate_common(self) -> None:
        """Every ``RANGES`` entry of the config's classes, with a one-line error naming the
        field, its range and its value."""
        for cls in type(self).__mro__:
            for rule in filter(None, vars(cls).get("RANGES", "").split(";")):
                name, spec = rule.strip().split(" ", 1)
                value = getattr(self, name)
                if not all(_inside(v, spec) for v in _entries(value)):
                    where = "in " if spec[0] in "([" else ""
                    raise ConfigError(f"{name} must be {where}{spec}, got {value}")


def _entries(value) -> list:
    if isinstance(value, (tuple, list)):
        return [v for item in value for v in _entries(item)]
    return [value]


def _inside(v, spec: str) -> bool:
    """``v`` finite and within ``spec``: ``(lo, hi)``, ``[lo, hi]`` (either end open or
    closed), ``>= x`` or ``> x``."""
    if not math.isfinite(v):
        return False
    if spec[0] not in "([":
        op, bound = spec.split()
        return v >= float(bound) if op == ">=" else v > float(bound)
    lo, hi = (float(x) for x in spec[1:-1].split(","))
    return (lo <= v if spec[0] == "[" else lo < v) and (v <= hi if spec[-1] == "]" else v < hi)


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


def _parse_assignments(items: Sequence[str], flag: str) -> dict[str, Any]:
    """``["k=v", ...]`` from the command line -> ``{k: parsed v}``."""
    parsed = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"{flag} expects key=value, got '{item}'")
        key, _, text = item.partition("=")
        parsed[key.strip()] = parse_cli_value(text)
    return parsed


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

    The TOML file holds config keys at its top level (or in a ``[config]`` table); its
    ``[sweep]`` table is read by :func:`resolve_sweep_options`.

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
        table = _read_toml(path)
        table = dict(table.get("config", table))
        table.pop("sweep", None)  # execution options: see read_sweep_table
        apply(f"config file {path.name}", table)
    if isinstance(overrides, Mapping):
        apply("override", overrides)
    else:
        apply("--set", _parse_assignments(overrides, "--set"))

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


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {path} is not valid TOML: {err}") from None


def resolve_sweep_options(
    defaults: SweepOptions | None = None,
    *,
    toml_path: str | Path | None = None,
    overrides: Mapping[str, Any] | Sequence[str] = (),
    base: Mapping[str, Any] | None = None,
) -> SweepOptions:
    """Sweep options: ``defaults`` (the experiment's) < ``base`` (a stored run's) < the
    ``[sweep]`` table of the TOML file < ``overrides`` (``--sweep KEY=VALUE``).

    Raises :class:`ConfigError` with a one-line message for an unknown key or a bad value.
    """
    options = SweepOptions() if defaults is None else defaults
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if base:
        layers.append(("stored run", base))
    if toml_path is not None:
        table = _read_toml(Path(toml_path)).get("sweep", {})
        if not isinstance(table, Mapping):
            raise ConfigError(f"config file {Path(toml_path).name}: [sweep] must be a table")
        layers.append((f"[sweep] of {Path(toml_path).name}", table))
    if isinstance(overrides, Mapping):
        layers.append(("override", overrides))
    else:
        layers.append(("--sweep", _parse_assignments(overrides, "--sweep")))
    for source, values in layers:
        try:
            options = options.updated(values, source=source)
        except (TypeError, ValueError) as err:
            message = str(err) if source in str(err) else f"{err} ({source})"
            raise ConfigError(message) from None
    return options


def field_meanings(cls: type) -> dict[str, str]:
    """Each field's meaning, from the ``Attributes:`` sections of the docstrings of ``cls`` and
    its bases (a subclass's line overrides its base's), joined into one line."""
    import inspect
    import re

    meanings: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        lines = inspect.cleandoc(vars(klass).get("__doc__") or "").splitlines()
        starts = [i for i, line in enumerate(lines) if line.strip() == "Attributes:"]
        if not starts:
            continue
        entries = [line for line in lines[starts[0] + 1 :] if line.strip()]
        indent = len(entries[0]) - len(entries[0].lstrip()) if entries else 0
        name = None
        for line in entries:
            depth = len(line) - len(line.lstrip())
            match = re.match(r"(\w+): ?(.*)", line.strip())
            if depth < indent:
                break
            if depth == indent and match:
                name = match.group(1)
                meanings[name] = match.group(2).strip()
            elif name is not None:
                meanings[name] += " " + line.strip()
    return meanings


def describe_config(config: ExperimentConfig) -> str:
    """Every field of ``config``: its value (``*`` where it is not the default), its default and
    its meaning (:func:`field_meanings`), one field a line."""
    import json

    def text(value) -> str:
        return json.dumps(value) if isinstance(value, str | bool | int | float) else str(value)

    meanings = field_meanings(type(config))
    rows = []
    for f in dataclasses.fields(config):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        value = getattr(config, f.name)
        mark = " " if value == default else "*"
        rows.append((mark + f.name, text(value), text(default), meanings.get(f.name, "")))
    rows.insert(0, (" name", "value", "default", "meaning"))
    w = [min(max(len(r[i]) for r in rows), 28) for i in range(3)]
    return "\n".join(f" {a:<{w[0]}}  {b:<{w[1]}}  {c:<{w[2]}}  {d}".rstrip() for a, b, c, d in rows)
