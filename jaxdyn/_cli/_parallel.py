"""How ``run``/``reproduce`` use the cores: in-process CPU devices or local worker processes."""

from __future__ import annotations

import os
import threading


def _processes(args, *, one_experiment: bool = True) -> int:
    """How many local worker processes ``run``/``reproduce`` should use (one ``--quick``
    experiment: one, unless asked; a quick ``reproduce`` of several keeps its pool)."""
    from jaxdyn.distributed import resolve_processes
    from jaxdyn.runs import ConfigError

    try:
        return resolve_processes(
            getattr(args, "processes", None),
            cpu_devices=bool(getattr(args, "cpu_devices", None)),
            quick=one_experiment and bool(getattr(args, "quick", False)),
        )
    except ValueError as err:
        raise ConfigError(f"--processes: {err}") from None


def apply_cpu_devices(args) -> None:
    """Split the CPU into ``--cpu-devices`` XLA devices (before JAX starts), if asked."""
    if getattr(args, "show_config", False):  # nothing runs
        return
    from jaxdyn.distributed._devices import resolve_cpu_devices, use_cpu_devices
    from jaxdyn.runs import ConfigError

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
    if getattr(args, "show_config", False):
        return None
    from jaxdyn.distributed import is_worker, launch_local

    if args.command not in ("run", "reproduce") or is_worker():
        return None
    if args.command == "reproduce":
        from ._commands import reproduce_plan

        n = _processes(args, one_experiment=len(reproduce_plan(args)[0]) <= 1)
    else:
        n = _processes(args)
    if n <= 1:
        return None
    if args.command == "run":
        from ._commands import prepare_from_args

        prepared = prepare_from_args(args)  # validate here: one-line errors before workers start
        if getattr(args, "out", None) is None:  # every worker, and --resume, use this folder
            argv = [*argv, "--out", str(prepared.out)]
        return launch_local(argv, n, on_failure=_failure_line(argv, prepared.out))
    from ._commands import reproduce_plan

    names, out_root = reproduce_plan(args)  # unknown names fail here, once
    if len(names) > 1:
        return launch_reproduce_pool(argv, n, names, out_root, args.quick)
    return launch_local([*argv, "--out", str(out_root)], n)  # one folder for every worker


def _last_chunk(out) -> str:
    """Where the run's sweeps stand on disk: the last checkpointed chunk of the sweep written
    most recently, e.g. "last checkpointed chunk: sweep 'toy', chunk 3 (4 of 5 finished)"."""
    import json
    import math
    from pathlib import Path

    chunks = sorted(Path(out, "checkpoints").glob("*/chunk_*.npz"), key=lambda f: f.stat().st_mtime)
    if not chunks:
        return "no sweep chunk checkpointed yet"
    folder = chunks[-1].parent
    done = sorted(folder.glob("chunk_*.npz"))
    try:
        meta = json.loads((folder / "meta.json").read_text())
        total = f" of {math.ceil(int(meta['n_members']) / int(meta['chunk_size']))}"
    except (OSError, ValueError, KeyError, ZeroDivisionError):
        total = ""
    last = int(chunks[-1].stem.split("_")[-1])
    return (
        f"last checkpointed chunk: sweep '{folder.name}', chunk {last}"
        f" ({len(done)}{total} finished)"
    )


def _failure_line(argv: list[str], out):
    """What the launcher says when a worker of ``jaxdyn run`` fails: one line naming the
    worker, the last checkpointed chunk and the exact ``--resume`` command, exit non-zero; a
    worker that ends after the run completed leaves it complete (exit 0)."""
    import json
    import shlex
    import signal
    import sys
    from pathlib import Path

    def report(index: int, n: int, pid: int, rc: int) -> int:
        try:
            how = (
                f"was killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with code {rc}"
            )
        except ValueError:
            how = f"ended by signal {-rc}"
        try:
            status = json.loads(Path(out, "summary.json").read_text()).get("status")
        except (OSError, ValueError):
            status = None
        if status == "complete":
            print(
                f"jaxdyn: worker {index} of {n} (pid {pid}) {how} after the run completed:"
                f" {out} is complete",
                file=sys.stderr,
            )
            return 0
        resume = [a for a in argv if a not in ("--resume", "--overwrite")] + ["--resume"]
        print(
            f"jaxdyn: worker {index} of {n} (pid {pid}) {how}; {_last_chunk(out)};"
            f" continue with: jaxdyn {shlex.join(resume)}",
            file=sys.stderr,
        )
        return rc if rc > 0 else 128 - rc

    return report


_WRITE_LOCK = threading.Lock()


def _forward_lines(source, target) -> threading.Thread:
    """Copy a worker's output stream to ``target`` whole lines at a time, so that the lines of
    workers running side by side never interleave within a line."""

    def forward():
        for line in iter(source.readline, b""):
            with _WRITE_LOCK:
                buffer = getattr(target, "buffer", None)
                if buffer is not None:
                    buffer.write(line)
                else:  # a replaced stream (a notebook, pytest's capture)
                    target.write(line.decode(errors="replace"))
                target.flush()

    thread = threading.Thread(target=forward, daemon=True, name="jaxdyn-pool-output")
    thread.start()
    return thread


def launch_reproduce_pool(argv: list[str], n: int, names: list[str], out_root, quick: bool) -> int:
    """``reproduce`` of ``names`` on a :class:`ReproducePool` of ``n`` workers, then the
    report."""
    return ReproducePool(argv, min(n, len(names)), out_root).finish(names, quick)


def early_reproduce_pool(args, argv: list[str], launch) -> ReproducePool | None:
    """The pool of a ``reproduce`` of several experiments, started before this process imports
    JAX and the experiments: the workers import theirs meanwhile, instead of after (this
    process still lists and checks the experiments, for the queue and the report). ``None``
    where :func:`launch_workers` decides later: one experiment, ``--import`` (a module that
    fails to import would fail in every worker too), ``--show-config``, a worker, or one
    process."""
    import sys

    if args.command != "reproduce" or getattr(args, "show_config", False):
        return None
    if len(set(args.only or ())) == 1 or args.imports or launch.imports or launch.is_worker:
        return None
    if "jax" in sys.modules and sys.modules["jax"].distributed.is_initialized():
        return None
    n = _processes(args, one_experiment=False)
    if args.only:  # no more workers than experiments (every paper experiment: more than cores)
        n = min(n, len(set(args.only)))
    if n <= 1:
        return None
    from ._commands import reproduce_out

    return ReproducePool(argv, n, reproduce_out(args))


class ReproducePool:
    """``reproduce`` on ``n`` cores: ``n`` independent single-process workers that take the
    experiments in turn from one queue (each the next one nobody has claimed, longest first by
    the estimate of :mod:`._schedule`, so that they finish together), then the report.

    Whole experiments run side by side instead of every experiment running on ``n``
    cooperating processes: nothing is compiled or computed twice (cooperating processes each
    trace and compile every program, and share only the sweeps), and each experiment's results
    are those of one process, which equal those of any number of processes. A failed experiment
    does not stop the others; an interruption stops every worker (``--resume`` continues).

    The workers start when the pool is made; they wait for the queue, which :meth:`finish`
    writes, so the launcher may list the experiments while the workers import.
    """

    def __init__(self, argv: list[str], n: int, out_root):
        import subprocess
        import sys
        import tempfile
        from pathlib import Path

        from jaxdyn.distributed import worker_python_path
        from jaxdyn.distributed._cores import pinned_to, worker_cores
        from jaxdyn.runs._profile import process_age_s

        from ._commands import launch_config
        from ._error_mode import use_error_mode

        self.startup_s = process_age_s()  # imports, arguments (and the registry, if listed)
        self.out_root = Path(out_root)
        self._made_out_root = not self.out_root.exists()
        self.out_root.mkdir(parents=True, exist_ok=True)
        self.claims = Path(tempfile.mkdtemp(prefix=".claims-", dir=self.out_root))
        env = dict(os.environ, PYTHONPATH=worker_python_path())
        pool = launch_config().replace(reproduce_claims=str(self.claims), launcher_pid=os.getpid())
        pool.to_environ(env)
        use_error_mode(env)  # the worker's equinox reads it at import
        # later options win in argparse: one process per worker, every worker in one folder
        worker_argv = [*argv, "--processes", "1", "--out", str(self.out_root)]
        self.procs: list = []
        self.forwarders: list = []
        cores = worker_cores(n)
        try:
            for i in range(n):
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "jaxdyn", *worker_argv],
                        env=env,
                        preexec_fn=pinned_to(cores[i]),
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                    )
                )
                self.forwarders += [
                    _forward_lines(self.procs[-1].stdout, sys.stdout),
                    _forward_lines(self.procs[-1].stderr, sys.stderr),
                ]
        except BaseException:
            self.stop()
            raise

    def finish(self, names: list[str], quick: bool) -> int:
        """Queue ``names`` for the workers, wait for them, and write the report; the exit code
        (``EXIT_INTERRUPTED`` when interrupted)."""
        import time

        from ._commands import finish_reproduce, write_queue
        from ._exit_codes import EXIT_INTERRUPTED

        try:
            write_queue(self.claims, names, quick)
            while any(p.poll() is None for p in self.procs):
                time.sleep(0.1)
        except KeyboardInterrupt:
            self.stop()
            return EXIT_INTERRUPTED
        finally:
            self._close()
        if any(p.returncode == EXIT_INTERRUPTED for p in self.procs):
            return EXIT_INTERRUPTED
        return finish_reproduce(names, self.out_root, quick, self.startup_s)

    def stop(self) -> None:
        """Interrupt the workers still running (a no-op once they have ended)."""
        from jaxdyn.distributed import _stop

        if any(p.poll() is None for p in self.procs):
            _stop(self.procs)
        self._close()
        if self._made_out_root and not any(self.out_root.iterdir()):
            self.out_root.rmdir()  # stopped before anything ran: leave no empty folder

    def _close(self) -> None:
        import shutil

        for thread in self.forwarders:
            thread.join(timeout=2.0)
        self.forwarders = []
        shutil.rmtree(self.claims, ignore_errors=True)
