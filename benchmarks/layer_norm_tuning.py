"""Sweep the fused layer-norm kernels' launch parameters (``jaxrules.dispatch.rows_launch``:
``TILE_ELEMENTS``, ``BACKWARD_PROGRAMS``, the warps) on
the GPU: ``jit(vjp)`` of ``jaxrules.nn.layer_norm`` on 16384x4096 (gradients only, timed as
``python -m jaxrules bench`` times: ``bench.median_ms``), per setting.

    python benchmarks/layer_norm_tuning.py [--repeats 30]
"""

import argparse
import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules import dispatch
from jaxrules.bench import fwd_bwd, median_ms
from jaxrules.nn import layer_norm


def time_once(dtype, repeats):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((16384, 4096)), dtype)
    w, b = jnp.ones(4096, dtype), jnp.zeros(4096, dtype)
    g = jnp.asarray(rng.standard_normal((16384, 4096)), dtype)
    step = fwd_bwd(lambda x, w, b: layer_norm(x, 4096, w, b, impl="pallas"))
    return median_ms(lambda: step(g, x, w, b), repeats)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    grid = itertools.product((2048, 4096, 8192), (128, 256, 512, 1024), (4, 8, 16))
    rows_launch = dispatch.rows_launch
    for tile, programs, warps in grid:
        dispatch.TILE_ELEMENTS, dispatch.BACKWARD_PROGRAMS = tile, programs
        dispatch.rows_launch = lambda *a, warps=warps, **k: dataclasses.replace(rows_launch(*a, **k), num_warps=warps)
        jax.clear_caches()
        try:
            row = [f"{time_once(dtype, args.repeats):.3f}" for dtype in (jnp.float32, jnp.bfloat16)]
        except Exception as err:  # noqa: BLE001 - a setting Triton rejects must not stop the sweep
            row = [f"failed ({type(err).__name__})"] * 2
        print(f"tile={tile} programs={programs} warps={warps}: float32 {row[0]} ms, bfloat16 {row[1]} ms", flush=True)


if __name__ == "__main__":
    main()
