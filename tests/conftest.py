import os
import tempfile

from jaxrules.cli import use_fast_compile_flags

use_fast_compile_flags()  # before JAX's backend starts: XLA reads them once

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
# The tests compile thousands of tiny functions: XLA's optimization passes dominate their cost and
# buy nothing at these sizes (about 15% of the suite's time on 2 cores).
jax.config.update("jax_disable_most_optimizations", True)

# The checks build the same programs many times (a fresh ``jax.jit`` per check and sample, the
# same small eager ops in both xdist workers): a compilation cache shared by this run's workers
# (fresh per run) skips those recompilations (about 18% of the registry tests' time on 2 cores).
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getpid())
_CACHE = os.path.join(tempfile.gettempdir(), f"jaxrules-test-compile-{_RUN}")
os.environ["JAXRULES_CHECK_CACHE"] = _CACHE  # the CLI tests' ``check`` uses it too, not ~/.cache
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


# The longest items (pytest --durations on 2 cores: 20-46 s each) start first, so that no worker
# is still in one of them after the other has run out of tests (they sorted last by name: the
# sharded runs, the notebook), which cost CI about half a minute of one idle core.
# (Not the modules whose tests share a module fixture: spread over both workers, each would run it.)
LONGEST_FIRST = ("test_sharded.py::test_sharded_check_over_the_registry", "quickstart.ipynb",
                 "test_sharded.py::test_the_direct_form",
                 "test_registry.py::test_op[nested.scaled_dot_product_attention[pallas]]",
                 "test_registry.py::test_op[scaled_dot_product_attention[pallas]]", "test_registry.py::test_op[expm]",
                 "test_registry.py::test_op[svd]")


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: not any(name in item.nodeid for name in LONGEST_FIRST))  # stable otherwise
