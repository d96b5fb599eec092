"""The ``jaxdyn`` argument parser: every command and flag."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._exit_codes import EXIT_BAD_INPUT


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2
        self.exit(EXIT_BAD_INPUT, f"jaxdyn: error: {message}\n")


def _add_parallel_options(parser) -> None:
    """``--processes`` and ``--cpu-devices`` (how ``run``/``reproduce`` use the cores)."""
    options = {
        "--processes": (
            "run as N cooperating processes on this machine (jax.distributed; auto, the "
            "default: one per core on a CPU-only install, one with a GPU/TPU jaxlib or "
            "--cpu-devices); one experiment at --quick runs in one process unless N is "
            "given; reproduce of several experiments runs them side by side on N "
            "single-process workers instead; results are identical for any N (default: "
            "JAXDYN_LAUNCH's processes, else auto)"
        ),
        "--cpu-devices": (
            "split the CPU into N XLA devices in one process (auto: one per core); unsafe "
            "for members with batched LAPACK calls (eigh, solve: an XLA CPU deadlock, "
            "docs/scaling.md), so --processes is the default way to use every core "
            "(default: JAXDYN_LAUNCH's cpu_devices, else one device)"
        ),
    }
    for flag, text in options.items():
        parser.add_argument(flag, default=None, metavar="N|auto", help=text)


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
    common.add_argument(
        "--profile",
        action="store_true",
        help="write where each run's time goes to <run dir>/profile.json "
        "(also JAXDYN_LAUNCH='{\"profile\": true}')",
    )
    return common


def _add_sweep_option(parser) -> None:
    parser.add_argument(
        "--sweep",
        dest="sweep_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a sweep option (vmap_width, chunk_size, memory_budget_gb, devices, progress, "
        "segment_steps, segment_width, segment_widths, narrow_after), e.g. --sweep "
        "vmap_width=64; also the [sweep] table of --config",
    )


def _add_run(sub, common) -> None:
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
    run.add_argument("--config", type=Path, help="TOML file of config fields (and a [sweep] table)")
    _add_sweep_option(run)
    run.add_argument("--resume", action="store_true", help="continue a killed run in --out")
    _add_parallel_options(run)
    run.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    run.add_argument(
        "--show-config", action="store_true", help="print the resolved config and exit"
    )


def _add_reproduce(sub, common) -> None:
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
    _add_parallel_options(reproduce)


def _add_data(sub, common) -> None:
    data = sub.add_parser("data", help="text corpora: list them, fetch a full one", parents=common)
    data_sub = data.add_subparsers(dest="data_command", required=True, parser_class=_Parser)
    data_sub.add_parser("list", help="known corpora, where each is found, their licences")
    fetch = data_sub.add_parser("fetch", help="download a full corpus (checked) into the cache")
    fetch.add_argument("name", help="corpus name (see `jaxdyn data list`)")
    fetch.add_argument("--to", type=Path, help="folder to write to (default: the cache)")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``jaxdyn list | run | report | reproduce | data``."""
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
    _add_run(sub, common)
    report = sub.add_parser(
        "report", help="one Markdown + HTML report over run directories", parents=common
    )
    report.add_argument("dirs", nargs="+", type=Path, help="run directories or folders of runs")
    report.add_argument("--out", type=Path, default=Path("report"), help="report directory")
    _add_reproduce(sub, common)
    _add_data(sub, common)
    return parser
