"""Sweep the fused layer-norm kernels' launch parameters (``jaxrules.norm_kernels.TUNING``) on
the GPU: ``jit(vjp)`` of ``jaxrules.nn.layer_norm`` on 16384x4096, median of 30 runs, per setting.

    python benchmarks/layer_norm_tuning.py
"""

import itertools
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules import norm_kernels
from jaxrules.nn import layer_norm


def time_once(dtype, repeats=30):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((16384, 4096)), dtype)
    w, b = jnp.ones(4096, dtype), jnp.zeros(4096, dtype)
    g = jnp.asarray(rng.standard_normal((16384, 4096)), dtype)

    @jax.jit
    def step(x, w, b, g):
        out, pullback = jax.vjp(lambda *a: layer_norm(a[0], 4096, a[1], a[2]), x, w, b)
        return out, pullback(g)

    for _ in range(3):
        jax.block_until_ready(step(x, w, b, g))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(step(x, w, b, g))
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main():
    grid = itertools.product((4096, 8192, 16384), (256, 1024, 4096), (4, 8, 16))
    for tile, programs, warps in grid:
        norm_kernels.TUNING.update(tile_elements=tile, backward_programs=programs, num_warps=warps)
        jax.clear_caches()
        row = [f"{time_once(dtype):.3f}" for dtype in (jnp.float32, jnp.bfloat16)]
        print(f"tile={tile} programs={programs} warps={warps}: float32 {row[0]} ms, bfloat16 {row[1]} ms", flush=True)


if __name__ == "__main__":
    main()
