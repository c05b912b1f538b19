"""``python -m jaxrules``: ``jaxrules.cli.main``."""

import os
import sys

from jaxrules.cli import INTERRUPTED, main

code = main()
if code == INTERRUPTED:
    # Ctrl-C: the check has ended its worker processes and printed what finished. Leave now:
    # the interpreter's exit-time joins (the process pool's manager thread) must not hold it up.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
