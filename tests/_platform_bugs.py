"""Whether a platform bug pinned in ``test_platform_bugs.py`` applies in this process
(``jaxrules.compat``'s predicates, read once), for the tests whose values it changes."""

import jax

from jaxrules import compat

ON_A_GPU = jax.default_backend() == "gpu"
TRITON_GEMM_FLOAT64_BUG = compat.triton_gemm_float64_bug()
GPU_REDUCTION_BUG = compat.gpu_reduction_bug()
GPU_REDUCTION_BUG_REASON = (
    "jax 0.12.0.1's CUDA backend: XLA's reduction over axes (0, 2, 3) of a small array is off by 0.4-0.8% in some "
    "compilations (XLA_FLAGS=--xla_gpu_deterministic_ops=true avoids it), docs/compatibility.md")
