"""Run a benchmark script with the rows kernels' launch rule on every device kind
(``dispatch.tuned_rows_launch`` returning None; in this process only, not in processes it starts),
for A/B runs of the tuned launches in one tree:

    PYTHONPATH=. python3 benchmarks/untuned.py benchmarks/nested_attention_block.py --one nested ...
"""

import os
import runpy
import sys

from jaxrules import dispatch

if __name__ == "__main__":
    dispatch.tuned_rows_launch = lambda *args, **kwargs: None
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))  # as running the script itself would
    runpy.run_path(sys.argv[0], run_name="__main__")
