"""The ``jaxdyn`` command line: parse, look up the experiment, call it. Nothing else lives here.

Exit codes: 0 success, 1 an experiment failed at run time, 2 bad input (one-line message),
130 interrupted (finished sweep chunks are kept: rerun with ``--resume``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2
        self.exit(EXIT_BAD_INPUT, f"jaxdyn: error: {message}\n")


def _enable_compilation_cache() -> None:
    import jax

    cache = os.environ.get("JAXDYN_CACHE_DIR", str(Path.home() / ".cache" / "jaxdyn" / "xla"))
    if cache.lower() in ("", "0", "off", "none"):
        return
    try:
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    except Exception:  # a read-only home must not stop a run
        pass


def _add_cpu_devices_option(parser) -> None:
    parser.add_argument(
        "--cpu-devices",
        default=os.environ.get("JAXDYN_CPU_DEVICES"),
        metavar="N|auto",
        help="experimental: split the CPU into N XLA devices (auto: one per core) so sweeps "
        "use every core (a known XLA CPU deadlock with some members: docs/scaling.md); "
        "results are identical for any N (default: $JAXDYN_CPU_DEVICES, else JAX's default)",
    )


def _apply_cpu_devices(args) -> None:
    from jaxdyn.runs import ConfigError
    from jaxdyn.sweep import use_cpu_devices
    from jaxdyn.sweep._devices import resolve_cpu_devices

    value = getattr(args, "cpu_devices", None)
    try:
        if resolve_cpu_devices(value) is not None:
            use_cpu_devices(value)
    except (ValueError, RuntimeError) as err:
        raise ConfigError(f"--cpu-devices: {err}") from None


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a module (by name) or a .py file (by path) that registers experiments; "
        "repeatable (also $JAXDYN_IMPORT, comma-separated)",
    )
    return common


def _add_sweep_option(parser) -> None:
    parser.add_argument(
        "--sweep",
        dest="sweep_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a sweep option (vmap_width, chunk_size, memory_budget_gb, devices, progress), "
        "e.g. --sweep vmap_width=64; also the [sweep] table of --config",
    )


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="jaxdyn",
        description="Simulate, sweep and differentiate through the dynamics of attention.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    common = [_common_options()]

    listing = sub.add_parser("list", help="list the registered experiments", parents=common)
    listing.add_argument(
        "--verbose", action="store_true", help="also show where each experiment comes from"
    )

    run = sub.add_parser("run", help="run one experiment into a run directory", parents=common)
    run.add_argument("experiment", help="experiment name (see `jaxdyn list`)")
    run.add_argument("--quick", action="store_true", help="small CPU-sized configuration")
    run.add_argument("--out", type=Path, help="run directory (default runs/<experiment>-<time>)")
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set lam=0.3 --set pi=[0.6,0.3,0.1]",
    )
    run.add_argument(
        "--config", type=Path, help="TOML file of config fields (and a [sweep] table)"
    )
    _add_sweep_option(run)
    run.add_argument("--resume", action="store_true", help="continue a killed run in --out")
    _add_cpu_devices_option(run)
    run.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    run.add_argument(
        "--show-config", action="store_true", help="print the resolved config and exit"
    )

    report = sub.add_parser(
        "report", help="one Markdown + HTML report over run directories", parents=common
    )
    report.add_argument("dirs", nargs="+", type=Path, help="run directories or folders of runs")
    report.add_argument("--out", type=Path, default=Path("report"), help="report directory")

    reproduce = sub.add_parser(
        "reproduce", help="run every paper experiment and write a report", parents=common
    )
    reproduce.add_argument("--quick", action="store_true", help="small CPU-sized configurations")
    reproduce.add_argument("--out", type=Path, help="folder for the runs and the report")
    reproduce.add_argument(
        "--only", action="append", default=[], metavar="EXPERIMENT", help="restrict to these"
    )
    reproduce.add_argument("--resume", action="store_true", help="skip complete runs in --out")
    _add_sweep_option(reproduce)
    _add_cpu_devices_option(reproduce)

    data = sub.add_parser("data", help="text corpora: list them, fetch a full one", parents=common)
    data_sub = data.add_subparsers(dest="data_command", required=True, parser_class=_Parser)
    data_sub.add_parser("list", help="known corpora, where each is found, their licences")
    fetch = data_sub.add_parser("fetch", help="download a full corpus (checked) into the cache")
    fetch.add_argument("name", help="corpus name (see `jaxdyn data list`)")
    fetch.add_argument("--to", type=Path, help="folder to write to (default: the cache)")
    return parser


def _cmd_list(args) -> int:
    from jaxdyn.runs import list_experiments

    experiments = list_experiments()
    width = max((len(e.name) for e in experiments), default=10)
    for e in experiments:
        tag = "" if e.paper else " [extra]"
        origin = f"  ({e.module})" if args.verbose else ""
        print(f"{e.name:<{width}}  {e.description}{tag}{origin}")
    return EXIT_OK


def _cmd_run(args) -> int:
    import dataclasses
    import json

    from jaxdyn.runs import execute_run, prepare_run

    prepared = prepare_run(
        args.experiment,
        out=args.out,
        quick=args.quick,
        toml_path=args.config,
        overrides=args.overrides,
        sweep=args.sweep_options,
        resume=args.resume,
        overwrite=args.overwrite,
    )
    if args.show_config:
        shown = {"config": dataclasses.asdict(prepared.config),
                 "sweep": prepared.options.as_dict()}
        print(json.dumps(shown, indent=2))
        return EXIT_OK
    _enable_compilation_cache()
    execute_run(prepared, overwrite=args.overwrite)
    _print_run_result(prepared.out)
    return EXIT_OK


def _print_run_result(out: Path) -> None:
    from jaxdyn.runs import read_summary

    summary = read_summary(out) or {}
    print(
        f"{summary.get('experiment')}: {summary.get('status')}, checks "
        f"{summary.get('checks_passed', 0)}/{summary.get('checks_total', 0)} passed, "
        f"{summary.get('failed_members', 0)} failed member(s) -> {out}"
    )


def _cmd_report(args) -> int:
    from jaxdyn.runs import find_run_dirs, write_report

    dirs = find_run_dirs(args.dirs)
    out = write_report(dirs, args.out)
    print(f"report: {out / 'report.md'} and {out / 'report.html'} ({len(dirs)} run(s))")
    return EXIT_OK


def _cmd_reproduce(args) -> int:
    import datetime

    from jaxdyn.runs import (
        ConfigError,
        execute_run,
        get_experiment,
        list_experiments,
        prepare_run,
        read_summary,
        write_report,
    )

    names = args.only or [e.name for e in list_experiments() if e.paper]
    for name in names:
        get_experiment(name)  # unknown names fail before anything runs
    if args.out is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out_root = Path("runs") / f"reproduce-{stamp}{'-quick' if args.quick else ''}"
    else:
        out_root = args.out
    _enable_compilation_cache()
    failed = []
    run_dirs = []
    for i, name in enumerate(names, 1):
        out = out_root / name
        summary = read_summary(out)
        if args.resume and summary and summary.get("status") == "complete":
            print(f"[{i}/{len(names)}] {name}: complete, skipped", file=sys.stderr)
            run_dirs.append(out)
            continue
        print(f"[{i}/{len(names)}] {name}", file=sys.stderr, flush=True)
        try:
            prepared = prepare_run(
                name,
                out=out,
                quick=args.quick,
                sweep=args.sweep_options,
                resume=args.resume,
                overwrite=not args.resume,
            )
            execute_run(prepared)
            _print_run_result(out)
        except ConfigError as err:  # e.g. a data file missing on this machine: skip, report
            print(f"{name}: SKIPPED: {err}", file=sys.stderr)
            failed.append(name)
        except KeyboardInterrupt:
            raise
        except Exception as err:  # one failing experiment must not stop the others
            print(f"{name}: FAILED: {type(err).__name__}: {err}", file=sys.stderr)
            failed.append(name)
        if read_summary(out) is not None:
            run_dirs.append(out)
    report_dir = write_report(run_dirs, out_root / "report", title="jaxdyn reproduce")
    print(f"report: {report_dir / 'report.md'} and {report_dir / 'report.html'}")
    if failed:
        print(f"failed experiments: {', '.join(failed)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _cmd_data(args) -> int:
    from jaxdyn.data import CORPORA, FetchError, fetch_corpus, locate_corpus
    from jaxdyn.runs import ConfigError

    if args.data_command == "list":
        for name, spec in CORPORA.items():
            path, source = locate_corpus(name)
            print(f"{name:<12} {source:<12} {path}  ({spec.licence}; {spec.attribution})")
        return EXIT_OK
    if args.name not in CORPORA:
        raise ConfigError(f"unknown corpus '{args.name}'; known corpora: {', '.join(CORPORA)}")
    try:
        fetch_corpus(args.name, destination=args.to, log=lambda m: print(m, file=sys.stderr))
    except FetchError as err:
        print(f"jaxdyn: data fetch failed: {err}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("MPLBACKEND", "Agg")
    args = _build_parser().parse_args(argv)
    from jaxdyn.runs import ConfigError, import_experiments

    try:
        _apply_cpu_devices(args)
        import_experiments(args.imports)
        if args.imports:  # worker processes started by this one import the same modules
            inherited = os.environ.get("JAXDYN_IMPORT", "")
            os.environ["JAXDYN_IMPORT"] = ",".join(filter(None, [inherited, *args.imports]))
        if args.command == "list":
            return _cmd_list(args)
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "report":
            return _cmd_report(args)
        if args.command == "reproduce":
            return _cmd_reproduce(args)
        if args.command == "data":
            return _cmd_data(args)
    except ConfigError as err:
        print(f"jaxdyn: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(
            "jaxdyn: interrupted; finished chunks are kept, rerun with --resume to continue",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except Exception as err:
        print(f"jaxdyn: {args.command} failed: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
