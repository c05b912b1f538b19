import importlib.util
import os
import tempfile

import jax

from jaxrules.cli import configure_check_process

# The harness's process settings (``check``'s too): float64; XLA's optimization passes off (the
# tests compile thousands of tiny functions, about 15% of the suite's time on 2 cores); Python's
# garbage collector run less often. No persistent compilation cache (it wrote every program, ~11,700 a
# run): on 2 cores with the same seeds the whole suite took 1035 s with it and 984 s without (one run
# each; two runs before differed by 286 s), while a subset (registry, linalg, indexing, nested,
# nonfinite) took 230 s with it and 242 s without: no gain either way beyond this machine's noise, so
# the simpler setting.
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getpid())
os.environ["JAXRULES_CHECK_CACHE"] = os.path.join(tempfile.gettempdir(), f"jaxrules-test-compile-{_RUN}")  # the CLI
# tests' ``check`` keeps its cache there, not in ~/.cache
configure_check_process()  # before JAX's backend starts: XLA reads its flags once
# The processes the tests start inherit XLA's fast-compile flags through XLA_FLAGS (set above); the
# optimization passes go off for them too (the notebook's kernel: 44 -> 34 CPU s; the forced-device
# workers that replace XLA_FLAGS call ``configure_check_process`` or ``use_fast_compile_flags``).
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
# On a GPU the xdist workers share the device: with XLA's default each preallocates 75% of its
# memory, and the later workers abort.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def _default_backend_is_a_gpu() -> bool:
    """Without starting a backend (some tests configure the CPU's device count before it starts):
    ``JAX_PLATFORMS``' first entry, else whether a CUDA plugin is installed."""
    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    if platforms:
        return platforms.split(",")[0] in ("cuda", "gpu", "rocm")
    try:
        return any(importlib.util.find_spec(f"jax_plugins.xla_{cuda}") for cuda in ("cuda12", "cuda13"))
    except ModuleNotFoundError:
        return False


# On a GPU JAX's default precision runs float32 matmuls and convolutions in TF32 (a 10-bit
# mantissa). The tests compare the formulas with float64 references at float32's tolerance, so
# there they ask for full float32 products: a setting of the platform, not of the formulas (the
# ``check`` keeps JAX's default; records that need it allow TF32's error). The processes the tests
# start inherit it through the environment.
if _default_backend_is_a_gpu():
    os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
    jax.config.update("jax_default_matmul_precision", os.environ["JAX_DEFAULT_MATMUL_PRECISION"])


# The longest items (pytest --durations on 2 cores: 20-66 s each) start first, then the registry's
# records (0.5-47 s each, 24% of the suite's test time), then the rest (mostly under a second), so
# that no worker is still in a long test after the other has run out (ordered by name the
# registry's records come last, and one worker sat idle for the last 175 s of a 16.5-minute run).
# (Not the modules whose tests share a module fixture: each stays on one worker, ``one_xdist_worker``.)
LONGEST_FIRST = ("test_sharded.py::test_sharded_check_over_the_registry", "quickstart.ipynb",
                 "test_sharded.py::test_the_direct_form",
                 "test_registry.py::test_op[nested.scaled_dot_product_attention[pallas]]",
                 "test_registry.py::test_op[scaled_dot_product_attention[pallas]]", "test_registry.py::test_op[expm]",
                 "test_registry.py::test_op[svd]")


def _start_order(item) -> int:
    if any(name in item.nodeid for name in LONGEST_FIRST):
        return 0
    return 1 if "test_registry.py::test_op[" in item.nodeid else 2


def pytest_collection_modifyitems(items):
    items.sort(key=_start_order)  # stable otherwise
