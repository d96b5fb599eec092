import sys

from jaxdyn.cli import main

sys.exit(main())
