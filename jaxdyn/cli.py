"""The ``jaxdyn`` command line: parse, look up the experiment, call it. Nothing else lives here.

Exit codes: 0 success, 1 an experiment failed at run time, 2 bad input (one-line message),
130 interrupted (finished sweep chunks are kept: rerun with ``--resume``).

The parser is in ``jaxdyn/_cli/_parser.py``, the commands in ``jaxdyn/_cli/_commands.py``,
the use of several cores (``--processes``, ``--cpu-devices``) in ``jaxdyn/_cli/_parallel.py``.
"""

from __future__ import annotations

import gc
import os
import sys

from ._cli._error_mode import use_error_mode
from ._cli._exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "main"]


def _speaks_for_the_run(launch) -> bool:
    """Whether this process reports an interruption: the launcher of local workers (not its
    workers), or process 0 of a cluster run; one message per interruption."""
    if launch.launcher_pid is not None:
        return False
    return (launch.process_id or 0) == 0


def _collect_garbage_less_often() -> None:
    """CPython's cyclic collector for a process that traces JAX programs: a collection every
    50,000 net allocations (not 700), a full one after 400 of them (not 100).

    Tracing and lowering allocate millions of short-lived objects while jax's caches keep a
    large heap alive: at the default thresholds a quick experiment runs the collector over a
    thousand times, and its older generations rescan that heap. Young cycles still die in the
    first generation, so peak memory stays the same. Set only for the ``jaxdyn`` command's
    own process, never by the library."""
    gc.set_threshold(50_000, 20, 20)


def main(argv: list[str] | None = None) -> int:
    """Run ``jaxdyn ARGS`` (``argv``; default ``sys.argv[1:]``) and return its exit code."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    if argv is None:  # the process's own command line (a call from Python keeps its mode)
        # before anything imports equinox: eqx.error_if as EQX_ON_ERROR, else nan
        use_error_mode()
        _collect_garbage_less_often()
    from ._cli._commands import COMMANDS
    from ._cli._parallel import apply_cpu_devices, early_reproduce_pool, launch_workers
    from ._cli._parser import build_parser
    from .distributed._launch import LaunchConfig

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:  # the one reading of the environment (jaxdyn/distributed/_launch.py)
        launch = LaunchConfig.from_environ()
    except ValueError as err:
        print(f"jaxdyn: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for option in ("processes", "cpu_devices"):
        if getattr(args, option, "absent") is None:
            setattr(args, option, getattr(launch, option))
    # --profile and (once they import) --import hold for this process's runs and for the
    # processes it starts: they join the launch configuration in the environment
    launch = launch.replace(profile=launch.profile or bool(getattr(args, "profile", False)))
    launch.to_environ(os.environ)
    # reproduce of every paper experiment: its workers start now, before this process imports
    # JAX and the experiments
    pool = early_reproduce_pool(args, argv, launch)
    # Before JAX starts; in every worker too (same entry point and arguments). Quick runs are
    # mostly compilation: XLA's elemental emitters compile faster and run slower.
    if not getattr(args, "show_config", False):  # --show-config runs nothing: no JAX import
        from jaxdyn.distributed._devices import xla_cpu_setup

        xla_cpu_setup(elemental_emitters=bool(getattr(args, "quick", False)))
    from jaxdyn.runs import ConfigError
    from jaxdyn.runs._registry import import_experiments

    try:
        apply_cpu_devices(args)
        import_experiments([*launch.imports, *args.imports])
        launch.replace(imports=args.imports).to_environ(os.environ)
        if pool is not None:
            from ._cli._commands import reproduce_plan

            launched = pool.finish(reproduce_plan(args)[0], args.quick)
        else:
            launched = launch_workers(args, argv)
        if launched == EXIT_INTERRUPTED:
            raise KeyboardInterrupt
        if launched is not None:
            return launched
        return COMMANDS[args.command](args)
    except ConfigError as err:
        print(f"jaxdyn: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        if _speaks_for_the_run(launch):
            print(
                "jaxdyn: interrupted; finished chunks are kept, rerun with --resume to continue",
                file=sys.stderr,
            )
        return EXIT_INTERRUPTED
    except Exception as err:
        print(f"jaxdyn: {args.command} failed: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if pool is not None:  # workers still running (this process failed): stop them
            pool.stop()


if __name__ == "__main__":
    sys.exit(main())
