"""Many processes, one sweep: ``python -m jaxdyn.distributed <jaxdyn CLI arguments>``.

Each process initialises JAX's distributed runtime (CPU collectives over gloo) before any
computation and then runs the normal command line. Every process runs the experiment; the sweep
engine gives each its share of the chunks and gathers the results to all of them; only
process 0 writes the run directory. Coordinator settings come from the launch configuration
(``JAXDYN_LAUNCH``'s ``coordinator``, ``num_processes``, ``process_id``: ``_launch.py``), or,
when those are unset, from the cluster environment that ``jax.distributed.initialize()``
detects itself (SLURM, Open MPI, ...). ``jaxdyn run EXP --processes N`` starts N such
processes on this machine (:func:`launch_local`).

This package is the launcher the run layer uses (:mod:`jaxdyn.runs` starts workers and waits at
barriers through it); the worker program, which runs the command line, is its ``__main__``
module, so that nothing here imports the command line. Its API is ``__all__``; the rest
(ports, environment names, the workers' ``PYTHONPATH``) is the launcher's plumbing.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

# A user calls initialize() in a script of their own on a cluster; the rest is the launcher the
# run layer uses (`jaxdyn run --processes N`, `python -m jaxdyn.distributed ...`).
__all__ = ["initialize"]

from ._cores import pinned_to, worker_cores
from ._launch import LaunchConfig


def accelerator_installed() -> bool:
    """Whether JAX may use a GPU/TPU here (decided without starting JAX's backends)."""
    import importlib.util

    platforms = os.environ.get("JAX_PLATFORMS", "").strip().lower()
    if platforms:
        return platforms.split(",")[0] != "cpu"
    plugins = (
        "jax_cuda12_plugin",
        "jax_cuda13_plugin",
        "jax_rocm60_plugin",
        "jax_rocm7_plugin",
        "libtpu",
    )
    return any(importlib.util.find_spec(name) is not None for name in plugins)


def resolve_processes(
    value: int | str | None = None,
    *,
    cpu_devices: bool = False,
    launch: LaunchConfig | None = None,
    quick: bool = False,
) -> int:
    """How many local worker processes to run: an int (or digit string), or ``"auto"``, one
    per core available to this process on a CPU-only install and one when a GPU/TPU jaxlib
    is installed (one process drives the accelerators). ``None``: the launch configuration's
    ``processes`` (default: this process's), else one when the CPU is split into in-process
    devices (``cpu_devices``, or ``xla_force_host_platform_device_count`` in ``XLA_FLAGS``:
    the user chose that way of using the cores) or for one ``quick`` experiment (cooperating
    processes each trace and compile every program and share only the sweeps, which at quick
    sizes are one or two chunks: benchmarks/results/cooperating_processes.json), else
    ``"auto"``. Raises ``ValueError`` (one line) on anything else."""
    from jaxdyn.distributed._devices import resolve_cpu_devices

    if value is None:
        value = (launch or LaunchConfig.from_environ()).processes
    if value is None or value == "":
        split = "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
        value = "1" if cpu_devices or split or quick else "auto"
    if str(value).strip().lower() == "auto" and accelerator_installed():
        return 1
    try:
        return resolve_cpu_devices(value) or 1
    except ValueError as err:
        raise ValueError(str(err).replace("cpu devices", "processes")) from None


def is_worker(launch: LaunchConfig | None = None) -> bool:
    """Whether this process already belongs to a multi-process run (started by
    :func:`launch_local` or ``python -m jaxdyn.distributed``): it must not start workers."""
    if (launch or LaunchConfig.from_environ()).is_worker:
        return True
    import jax

    return jax.distributed.is_initialized()


def initialize(launch: LaunchConfig | None = None) -> None:
    """Start JAX's distributed runtime for this process (before any computation).

    The coordinator, the number of processes and this process's index come from ``launch``
    (default: this process's launch configuration, ``JAXDYN_LAUNCH``); when it has no
    coordinator, ``jax.distributed.initialize()`` detects the cluster itself (SLURM, Open
    MPI, ...). On CPUs each process keeps one XLA device: processes, not in-process devices,
    spread work over cores (docs/scaling.md explains the XLA CPU deadlock that rules the
    latter out).
    """
    import jax

    launch = launch or LaunchConfig.from_environ()
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if launch.coordinator:
        if launch.num_processes is None or launch.process_id is None:
            raise ValueError(
                "a coordinator needs num_processes and process_id in the launch configuration"
            )
        jax.distributed.initialize(
            coordinator_address=launch.coordinator,
            num_processes=launch.num_processes,
            process_id=launch.process_id,
        )
    else:
        jax.distributed.initialize()


def barrier(name: str) -> None:
    """Wait until every process reaches ``name`` (no-op in a single process)."""
    import jax

    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def free_port() -> int:
    """A TCP port on localhost that is free now (for the coordinator)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _watch_parent(parent: int) -> None:
    """A worker's watchdog: exit when the launcher (``parent``) is gone, even killed by
    SIGKILL (which it cannot forward)."""
    import threading

    def watch():
        while os.getppid() == parent:
            time.sleep(0.1)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="jaxdyn-parent-watch").start()


def _stop(procs: list[subprocess.Popen], grace_s: float = 2.0) -> None:
    """Interrupt the workers still running (SIGINT: a worker records the interruption in its
    run), then kill those that do not end within ``grace_s`` (e.g. blocked in a collective).
    Not SIGTERM: JAX's distributed runtime takes it as a preemption notice."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


# Gloo's line per process when its collectives connect: noise, not a message for the user.
_GLOO_CONNECTED = re.compile(rb"^\[Gloo\] Rank \d+ is connected to \d+ peer ranks")


def _forward_stdout(proc: subprocess.Popen, stream: str = "stdout", muted=None):
    """Copy a worker's standard output (or ``stream``) to ours, line by line, without Gloo's
    connection lines (which its C++ library prints there), and without anything it says once
    ``muted`` is set (a worker being stopped after another failed: the launcher's own line
    says what happened; the run's log keeps everything)."""
    import threading

    def forward():
        target = getattr(sys, stream)
        out = getattr(target, "buffer", None)
        for line in iter(getattr(proc, stream).readline, b""):
            if _GLOO_CONNECTED.match(line) or (muted is not None and muted.is_set()):
                continue
            if out is not None:
                out.write(line)
                out.flush()
            else:  # a replaced stream (a notebook, pytest's capture)
                target.write(line.decode(errors="replace"))
                target.flush()

    thread = threading.Thread(target=forward, daemon=True, name="jaxdyn-worker-stdout")
    thread.start()
    return thread


def worker_python_path() -> str:
    """``PYTHONPATH`` for worker processes: they import what this process can (experiments
    found through ``sys.path``, e.g. a module in the working directory)."""
    path = [p for p in sys.path if p and os.path.isdir(p)]
    return os.pathsep.join(dict.fromkeys(path + [os.environ.get("PYTHONPATH", "")])).rstrip(
        os.pathsep
    )


def launch_local(
    argv: list[str],
    n: int,
    *,
    quiet: bool = False,
    launch: LaunchConfig | None = None,
    on_failure=None,
) -> int:
    """Run the jaxdyn command line ``argv`` as ``n`` processes on localhost; returns the exit
    code (the first failing worker's, else 0).

    The workers share one coordinator on a free local port and inherit the environment, with
    ``launch`` (default: this process's launch configuration) as theirs plus their place in
    the run. When one worker fails or is killed the others are stopped: a sweep cannot finish
    without every process, and its finished chunks stay on disk for ``--resume``. ``quiet``
    discards the workers' standard output (errors still show).
    ``on_failure(index, n, pid, returncode)``, called once the workers are stopped, says what
    happened in one line and returns the exit code (``returncode`` is negative for a signal,
    as in :mod:`subprocess`).
    """
    import threading

    launch = launch or LaunchConfig.from_environ()
    port = free_port()
    procs, forwarders = [], []
    muted = [threading.Event() for _ in range(n)] if on_failure is not None else None
    python_path = worker_python_path()
    cores = worker_cores(n)
    for i in range(n):
        worker_env = dict(os.environ)
        worker_env["PYTHONPATH"] = python_path
        place = launch.replace(
            coordinator=f"127.0.0.1:{port}",
            num_processes=n,
            process_id=i,
            launcher_pid=os.getpid(),
        )
        place.to_environ(worker_env)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "jaxdyn.distributed", *argv],
                env=worker_env,
                preexec_fn=pinned_to(cores[i]),
                stdout=subprocess.DEVNULL if quiet else subprocess.PIPE,
                stderr=None if muted is None else subprocess.PIPE,
            )
        )
        if not quiet:
            forwarders.append(_forward_stdout(procs[-1], muted=None if muted is None else muted[i]))
        if muted is not None:
            forwarders.append(_forward_stdout(procs[-1], "stderr", muted[i]))
    code, failed = 0, None
    try:
        while procs and code == 0:
            for index, p in enumerate(procs):
                rc = p.poll()
                if rc is not None and rc != 0:
                    code = rc if rc > 0 else 128 - rc
                    failed = (index, p.pid, rc)
                    for other, event in enumerate(muted or []):
                        if other != index:
                            event.set()
                    break
            if all(p.poll() == 0 for p in procs):
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        code = 130
    finally:
        _stop(procs)
        for thread in forwarders:  # the workers' last lines reach our stdout
            thread.join(timeout=2.0)
    if failed is not None and on_failure is not None:
        code = on_failure(failed[0], n, failed[1], failed[2])
    return code
