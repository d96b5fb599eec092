"""One worker process: ``python -m jaxdyn.distributed <jaxdyn CLI arguments>``.

It initialises JAX's distributed runtime (:func:`jaxdyn.distributed.initialize`) before any
computation, then runs the normal command line. This module is an entry point, like
``jaxdyn/__main__.py``: it is the only part of the launcher that imports the command line.
"""

from __future__ import annotations

import sys

from jaxdyn.cli import main as cli_main
from jaxdyn.distributed import LaunchConfig, _watch_parent, initialize


def main(argv: list[str] | None = None) -> int:
    """Entry point of one worker: initialise the runtime, then run the command line."""
    launch = LaunchConfig.from_environ()
    if launch.launcher_pid is not None:
        _watch_parent(launch.launcher_pid)
    initialize(launch)  # starts no backend: the command line still sets XLA's threading
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
