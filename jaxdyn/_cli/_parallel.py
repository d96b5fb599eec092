"""How ``run``/``reproduce`` use the cores: in-process CPU devices or local worker processes."""

from __future__ import annotations


def _processes(args) -> int:
    """How many local worker processes ``run``/``reproduce`` should use."""
    from jaxdyn.distributed import resolve_processes
    from jaxdyn.runs import ConfigError

    try:
        return resolve_processes(
            getattr(args, "processes", None), cpu_devices=bool(getattr(args, "cpu_devices", None))
        )
    except ValueError as err:
        raise ConfigError(f"--processes: {err}") from None


def apply_cpu_devices(args) -> None:
    """Split the CPU into ``--cpu-devices`` XLA devices (before JAX starts), if asked."""
    from jaxdyn.runs import ConfigError
    from jaxdyn.sweep import use_cpu_devices
    from jaxdyn.sweep._devices import resolve_cpu_devices

    value = getattr(args, "cpu_devices", None)
    try:
        if resolve_cpu_devices(value) is not None:
            use_cpu_devices(value)
    except (ValueError, RuntimeError) as err:
        raise ConfigError(f"--cpu-devices: {err}") from None


def launch_workers(args, argv: list[str]) -> int | None:
    """Run this command as several local processes when it should; ``None`` to run here.

    Arguments are validated here first, so that bad input fails once, with one line.
    """
    from jaxdyn.distributed import is_worker, launch_local

    if args.command not in ("run", "reproduce") or is_worker():
        return None
    if getattr(args, "show_config", False):
        return None
    n = _processes(args)
    if n <= 1:
        return None
    if args.command == "run":
        from ._commands import prepare_from_args

        prepare_from_args(args)  # validate in the launcher: one-line errors before workers start
    else:
        from jaxdyn.runs import get_experiment

        for name in args.only:
            get_experiment(name)
    return launch_local(argv, n)
