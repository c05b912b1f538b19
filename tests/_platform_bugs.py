"""The conditions under which a platform bug pinned in ``test_platform_bugs.py`` applies, for the
tests whose values it changes."""

import os

import jax

from jaxrules import compat

ON_A_GPU = jax.default_backend() == "gpu"
JAX_0_12 = compat.jax_version_tuple(jax.__version__)[:2] == (0, 12)
# XLA's reductions over several axes that are not the minor one, on jax 0.12.0.1's CUDA backend:
# in some compilations the result is off by 0.4-0.8% (float32 and float64 alike; in 1-2 of 6
# compilations per process at full optimization, in every one seen with
# jax_disable_most_optimizations, as the tests run). Never seen with
# XLA_FLAGS=--xla_gpu_deterministic_ops=true or --xla_gpu_autotune_level=0.
GPU_REDUCTION_BUG = ON_A_GPU and JAX_0_12 and not any(
    flag in os.environ.get("XLA_FLAGS", "")
    for flag in ("--xla_gpu_deterministic_ops=true", "--xla_gpu_autotune_level=0"))
GPU_REDUCTION_BUG_REASON = (
    "jax 0.12.0.1's CUDA backend: XLA's reduction over axes (0, 2, 3) of a small array is off by 0.4-0.8% in some "
    "compilations (XLA_FLAGS=--xla_gpu_deterministic_ops=true avoids it), docs/compatibility.md")
