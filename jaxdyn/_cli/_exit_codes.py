"""The command line's exit codes."""

EXIT_OK = 0  # success
EXIT_FAILED = 1  # an experiment failed at run time
EXIT_BAD_INPUT = 2  # bad input, reported in one line before anything runs
EXIT_INTERRUPTED = 130  # interrupted; finished sweep chunks are kept for --resume
