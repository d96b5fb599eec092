"""Multi-host entry point: ``python -m jaxdyn.distributed <jaxdyn CLI arguments>``.

Initialises ``jax.distributed`` (one process per host) before any computation, then runs the
normal command line. Coordinator settings come from ``JAXDYN_COORDINATOR`` (host:port),
``JAXDYN_NUM_PROCESSES`` and ``JAXDYN_PROCESS_ID``, or, when those are unset, from the cluster
environment that ``jax.distributed.initialize()`` detects itself (SLURM, Open MPI, ...).
"""

from __future__ import annotations

import os
import sys


def initialize() -> None:
    import jax

    coordinator = os.environ.get("JAXDYN_COORDINATOR")
    if coordinator:
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=int(os.environ["JAXDYN_NUM_PROCESSES"]),
            process_id=int(os.environ["JAXDYN_PROCESS_ID"]),
        )
    else:
        jax.distributed.initialize()


def main(argv: list[str] | None = None) -> int:
    initialize()
    from jaxdyn.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
