"""The ``jaxdyn`` commands: each takes the parsed arguments and returns an exit code."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ._exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK


def launch_config():
    """This process's launch configuration (the command line wrote its options into it)."""
    from jaxdyn.distributed._launch import LaunchConfig

    return LaunchConfig.from_environ()


def compilation_cache_dir() -> Path | None:
    """The persistent compilation cache's folder (``JAXDYN_CACHE_DIR``, default
    ``~/.cache/jaxdyn/xla``), or ``None`` when it is off."""
    cache = launch_config().cache_dir
    return None if cache is None else Path(cache)


def enable_compilation_cache() -> None:
    """Turn on JAX's persistent compilation cache (``JAXDYN_CACHE_DIR``; ``off`` disables).

    The default folder is ``~/.cache/jaxdyn/xla``; programs that took over the launch
    configuration's ``cache_min_compile_secs`` (default 0: every program, since experiments
    compile many small ones) to compile are stored, so a rerun, a resumed run or another
    worker process loads them instead.
    """
    import jax

    launch = launch_config()
    if launch.cache_dir is None:
        return
    try:
        jax.config.update("jax_compilation_cache_dir", str(launch.cache_dir))
        jax.config.update(
            "jax_persistent_cache_min_compile_time_secs", float(launch.cache_min_compile_secs)
        )
    except Exception:  # a read-only home must not stop a run
        pass


def _is_first_process() -> bool:
    import jax

    return jax.process_index() == 0


def _print_run_result(out: Path) -> None:
    from jaxdyn.runs import read_summary

    if not _is_first_process():
        return
    summary = read_summary(out) or {}
    print(
        f"{summary.get('experiment')}: {summary.get('status')}, {describe_counts(summary)}, "
        f"{summary.get('failed_members', 0)} failed member(s) -> {out}"
    )


def describe_counts(summary: dict) -> str:
    """One line of a summary's check counts, e.g. "evidence 5 (4 holds, 1 refuted, ...)"."""
    c = summary.get("counts", {})
    parts = [
        f"evidence {c.get('evidence', 0)} ({c.get('holds', 0)} holds, {c.get('refuted', 0)} "
        f"refuted, {c.get('inconclusive', 0)} inconclusive, {c.get('not_run', 0)} not run)",
        f"consistency {c.get('consistency', 0) - c.get('consistency_failed', 0)}/"
        f"{c.get('consistency', 0)} passed",
        f"report {c.get('report', 0)}",
    ]
    if c.get("unclassified"):  # summaries written before the check contract
        parts.append(f"unclassified {c['unclassified']}")
    return ", ".join(parts)


def cmd_list(args) -> int:
    """``jaxdyn list``: the registered experiments."""
    from jaxdyn.runs import list_experiments

    experiments = list_experiments()
    width = max((len(e.name) for e in experiments), default=10)
    for e in experiments:
        tag = "" if e.paper else " [extra]"
        origin = f"  ({e.module})" if args.verbose else ""
        print(f"{e.name:<{width}}  {e.description}{tag}{origin}")
    return EXIT_OK


def prepare_from_args(args):
    """``jaxdyn run``'s parsed arguments -> a validated :class:`jaxdyn.runs.PreparedRun` (bad
    input raises a one-line error here, before anything is compiled or started)."""
    from jaxdyn.runs._execute import prepare_run

    return prepare_run(
        args.experiment,
        out=args.out,
        quick=args.quick,
        toml_path=args.config,
        overrides=args.overrides,
        sweep=args.sweep_options,
        resume=args.resume,
        overwrite=args.overwrite,
        data_dir=launch_config().data_dir,
        load=not args.show_config,  # --show-config needs the config, not the run function
    )


def cmd_run(args) -> int:
    """``jaxdyn run EXPERIMENT``: one experiment into a run directory."""
    from jaxdyn.runs import read_summary
    from jaxdyn.runs._config import describe_config
    from jaxdyn.runs._execute import execute_run

    prepared = prepare_from_args(args)
    if args.show_config:
        config = prepared.config
        print(f"{args.experiment}: {type(config).__name__} (* = not the default; --set NAME=VALUE)")
        print(describe_config(config))
        print("sweep options (--sweep NAME=VALUE):")
        for name, value in prepared.options.as_dict().items():
            print(f"  {name} = {value}")
        return EXIT_OK
    enable_compilation_cache()
    execute_run(prepared, overwrite=args.overwrite)
    _print_run_result(prepared.out)
    summary = read_summary(prepared.out) or {}
    return EXIT_OK if summary.get("status") == "complete" else EXIT_FAILED


def cmd_report(args) -> int:
    """``jaxdyn report DIRS``: one Markdown + HTML report over run directories."""
    from jaxdyn.runs import write_report
    from jaxdyn.runs._report import find_run_dirs

    dirs = find_run_dirs(args.dirs)
    out = write_report(dirs, args.out)
    print_theory_counts(dirs)
    print(f"report: {out / 'report.md'} and {out / 'report.html'} ({len(dirs)} run(s))")
    return EXIT_OK


def print_theory_counts(dirs: list[Path]) -> None:
    """One line per theory: its runs and its checks by kind and verdict."""
    from jaxdyn.runs._report import describe_theory_counts, theory_counts

    for theory, counts in theory_counts(dirs).items():
        print(f"{theory}: {describe_theory_counts(counts)}")


def _reproduce_one(name: str, out: Path, args, say) -> bool:
    """Run one experiment of ``reproduce`` into ``out``; whether it failed."""
    from jaxdyn.runs import ConfigError, read_summary
    from jaxdyn.runs._execute import execute_run, prepare_run

    try:
        prepared = prepare_run(
            name,
            out=out,
            quick=args.quick,
            sweep=args.sweep_options,
            resume=args.resume,
            overwrite=not args.resume,
            data_dir=launch_config().data_dir,
        )
        execute_run(prepared)
        _print_run_result(out)
        summary = read_summary(out) or {}
        if summary.get("status") != "complete":
            say(f"{name}: FAILED: {summary.get('error', summary.get('status'))}", file=sys.stderr)
            return True
    except ConfigError as err:  # e.g. a data file missing on this machine: skip, report
        say(f"{name}: SKIPPED: {err}", file=sys.stderr)
        return True
    except KeyboardInterrupt:
        raise
    except Exception as err:  # one failing experiment must not stop the others
        say(f"{name}: FAILED: {type(err).__name__}: {err}", file=sys.stderr)
        return True
    return False


def reproduce_plan(args) -> tuple[list[str], Path]:
    """``reproduce``'s experiments (unknown names fail here, before anything runs) and the
    folder they go to (:func:`reproduce_out`)."""
    from jaxdyn.runs import get_experiment, list_experiments

    names = list(dict.fromkeys(args.only or [e.name for e in list_experiments() if e.paper]))
    for name in names:
        get_experiment(name)
    return names, reproduce_out(args)


def reproduce_out(args) -> Path:
    """``reproduce``'s folder: ``--out``, else ``runs/reproduce-<time>[-quick]``."""
    import datetime

    if args.out is not None:
        return Path(args.out)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"reproduce-{stamp}{'-quick' if args.quick else ''}"


QUEUE_FILE = ".queue"  # in the pool's claim folder: the experiments in the order workers take them


def write_queue(claims: Path, names: list[str], quick: bool) -> list[str]:
    """Write the pool's queue into its claim folder: ``names``, longest first by the estimate
    of :mod:`._schedule`, so that the workers finish together; return it."""
    from .._atomic import atomic_write_text
    from ._schedule import longest_first

    queue = longest_first(names, quick, compilation_cache_dir())
    atomic_write_text(claims / QUEUE_FILE, "\n".join(queue) + "\n")  # workers may be reading
    return queue


def read_queue(claims: Path, names: list[str]) -> list[str]:
    """The pool's queue (``names`` in the launcher's order; ``names`` itself without one)."""
    try:
        queue = (claims / QUEUE_FILE).read_text().split()
    except OSError:
        return names
    return [n for n in queue if n in names] + [n for n in names if n not in queue]


def wait_for_queue(claims: Path, *, wait_s: float, launcher_pid: int | None) -> bool:
    """Wait (at most ``wait_s`` seconds, while this worker's launcher ``launcher_pid`` is still
    its parent) for the launcher of a pool to write its queue: the workers start before it
    lists and checks the experiments, and a launcher that finds bad input stops them while
    they wait, so the error is said once. ``False`` when the launcher ended without writing it
    (it speaks for the run; the worker says nothing). The launcher is alive while it is the
    parent, as for :mod:`jaxdyn.distributed`'s workers (a process id alone can be reused)."""
    import time

    deadline = time.monotonic() + wait_s
    while not (claims / QUEUE_FILE).exists():
        if launcher_pid is not None and os.getppid() != launcher_pid:
            return False
        if time.monotonic() >= deadline:
            return True  # take the experiments in the registry's order
        time.sleep(0.02)
    return True


def claim_experiment(claims: Path, name: str) -> bool:
    """Whether this process takes ``name`` from the shared queue of a pool of ``reproduce``
    workers (the first to create its claim file does; the others skip it)."""
    try:
        os.close(os.open(claims / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def finish_reproduce(
    names: list[str], out_root: Path, quick: bool, startup_s: float | None = None
) -> int:
    """The end of ``reproduce``: the report over the runs that have a summary, each theory's
    counts, and the exit code (failed when an experiment did not complete). The completed
    experiments' wall times are kept for the next ``reproduce``'s queue order. With
    ``--profile``, ``DIR/profile.json`` has the time outside the experiments: the launcher's
    ``startup_s`` (process start to the workers' start), ``report_s`` and ``wall_s`` (process
    start to the report's end), beside ``experiments_s`` (the experiments' wall times added)."""
    import json
    import time

    from jaxdyn.runs import read_summary, write_report
    from jaxdyn.runs._profile import process_age_s, profiling_enabled

    from .._atomic import atomic_write_text
    from ._schedule import record_times

    report_start = time.perf_counter()

    summaries = {n: read_summary(out_root / n) for n in names}
    run_dirs = [out_root / n for n in names if summaries[n] is not None]
    failed = [n for n in names if (summaries[n] or {}).get("status") != "complete"]
    record_times(
        compilation_cache_dir(),
        quick,
        [(n, s.get("wall_time_s")) for n, s in summaries.items() if n not in failed],
    )
    report_dir = write_report(run_dirs, out_root / "report", title="jaxdyn reproduce")
    report_s = time.perf_counter() - report_start
    if profiling_enabled():
        profile = {
            "startup_s": startup_s,
            "report_s": report_s,
            "wall_s": process_age_s(),
            "experiments_s": sum((s or {}).get("wall_time_s", 0.0) for s in summaries.values()),
        }
        rounded = {k: None if v is None else round(v, 3) for k, v in profile.items()}
        atomic_write_text(out_root / "profile.json", json.dumps(rounded, indent=2))
    print_theory_counts(run_dirs)
    print(f"report: {report_dir / 'report.md'} and {report_dir / 'report.html'}")
    if failed:
        print(f"failed experiments: {', '.join(failed)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def cmd_reproduce(args) -> int:
    """``jaxdyn reproduce``: every paper experiment (or ``--only`` ones), then a report.

    In a pool of workers (the launch configuration's ``reproduce_claims`` names the pool's
    claim folder) this
    process runs the experiments no other worker has claimed, and the pool's launcher writes
    the report."""
    from jaxdyn.runs import read_summary

    launch = launch_config()
    claims = launch.reproduce_claims
    # a pool's worker: its launcher checks the names and writes the queue; a launcher that
    # ended without one stopped the pool (bad input, an interruption) and has said why
    if claims and not wait_for_queue(Path(claims), wait_s=120.0, launcher_pid=launch.launcher_pid):
        return EXIT_INTERRUPTED
    names, out_root = reproduce_plan(args)
    enable_compilation_cache()
    failed = False
    say = print if _is_first_process() else (lambda *a, **k: None)
    queue = read_queue(Path(claims), names) if claims else names
    for i, name in enumerate(queue, 1):
        if claims and not claim_experiment(Path(claims), name):
            continue
        out = out_root / name
        summary = read_summary(out)
        if args.resume and summary and summary.get("status") == "complete":
            say(f"[{i}/{len(names)}] {name}: complete, skipped", file=sys.stderr)
            continue
        say(f"[{i}/{len(names)}] {name}", file=sys.stderr, flush=True)
        failed |= _reproduce_one(name, out, args, say)
    if claims:
        return EXIT_FAILED if failed else EXIT_OK
    if not _is_first_process():
        return EXIT_FAILED if failed else EXIT_OK
    return finish_reproduce(names, out_root, args.quick)


def cmd_data(args) -> int:
    """``jaxdyn data list | fetch NAME``: the text corpora."""
    from jaxdyn.data import CORPORA, FetchError, fetch_corpus, locate_corpus
    from jaxdyn.runs import ConfigError

    data_dir = launch_config().data_dir  # JAXDYN_DATA
    if args.data_command == "list":
        for name, spec in CORPORA.items():
            path, source = locate_corpus(name, data_dir=data_dir)
            print(f"{name:<12} {source:<12} {path}  ({spec.licence}; {spec.attribution})")
        return EXIT_OK
    if args.name not in CORPORA:
        raise ConfigError(f"unknown corpus '{args.name}'; known corpora: {', '.join(CORPORA)}")
    destination = args.to or (Path(data_dir) / args.name if data_dir else None)
    try:
        fetch_corpus(args.name, destination=destination, log=lambda m: print(m, file=sys.stderr))
    except FetchError as err:
        print(f"jaxdyn: data fetch failed: {err}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


COMMANDS = {
    "list": cmd_list,
    "run": cmd_run,
    "report": cmd_report,
    "reproduce": cmd_reproduce,
    "data": cmd_data,
}
