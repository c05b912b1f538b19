"""The Mosaic GPU layer-norm / RMS-norm row kernels (``jaxrules.mosaic_kernels``, issue 21).

* export for CUDA on any machine (the Mosaic GPU lowering runs without a GPU): the module holds
  the ``mosaic_gpu`` custom call;
* values against plain jnp formulas (the forward written out, the backward as ``jax.vjp`` of that
  forward, with cotangents for y, mean and rstd): on the CPU in Pallas' interpret mode (the
  kernel bodies without their register layout casts, which only the GPU lowering reads), on a GPU
  the compiled kernels.
"""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from jaxrules import mosaic_kernels as mk

EPS = 1e-5
ON_GPU = jax.default_backend() == "gpu"
gpu_only = pytest.mark.skipif(not ON_GPU, reason="compiled Mosaic GPU kernels need a (Hopper) GPU")


def reference_forward(x, w, b, center):
    """Layer norm (``center``) or RMS norm over the last axis in float32, jnp only."""
    x = x.astype(jnp.float32)
    mean = jnp.mean(x, axis=1)
    c = x - mean[:, None] if center else x
    rstd = 1.0 / jnp.sqrt(jnp.mean(c * c, axis=1) + EPS)
    y = c * rstd[:, None] * w.astype(jnp.float32)
    return (y + b.astype(jnp.float32), mean, rstd) if center else (y, rstd)


def reference_backward(x, g, w, b, g_mean, g_rstd, center):
    """``(dx, dw, db)`` (``(dx, dw)`` for RMS norm): the VJP of ``reference_forward``."""
    primals = (x.astype(jnp.float32), w.astype(jnp.float32)) + ((b.astype(jnp.float32),) if center else ())
    _, vjp = jax.vjp(lambda *a: reference_forward(a[0], a[1], a[2] if center else None, center), *primals)
    cotangent = (g.astype(jnp.float32), g_mean, g_rstd) if center else (g.astype(jnp.float32), g_rstd)
    return vjp(cotangent)


def _inputs(m, n, dtype, center, seed=0):
    k = jax.random.split(jax.random.PRNGKey(seed), 6)
    x = (jax.random.normal(k[0], (m, n), jnp.float32) * 2 + 0.5).astype(dtype)
    g = jax.random.normal(k[1], (m, n), jnp.float32).astype(dtype)
    w = jax.random.normal(k[2], (n,), jnp.float32)
    b = jax.random.normal(k[3], (n,), jnp.float32) if center else None
    return x, g, w, b, jax.random.normal(k[4], (m,), jnp.float32), jax.random.normal(k[5], (m,), jnp.float32)


def _tolerance(dtype):
    return {"float32": 2e-5, "bfloat16": 2e-2, "float16": 4e-3}[jnp.dtype(dtype).name]


def _close(got, want, dtype, what):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=_tolerance(dtype), atol=_tolerance(dtype) * scale, err_msg=what)


def _check(m, n, dtype, center, launch):
    x, g, w, b, g_mean, g_rstd = _inputs(m, n, dtype, center)
    out = jax.jit(lambda x, w, b: mk.local_forward(x, w, b, eps=EPS, launch=launch))(x, w, b)
    want = reference_forward(x, w, b, center)
    assert len(out) == len(want)
    assert out[0].dtype == x.dtype and all(s.dtype == jnp.float32 for s in out[1:])
    for name, got, ref in zip(("y", "mean", "rstd") if center else ("y", "rstd"), out, want):
        _close(got, ref, dtype if name == "y" else jnp.float32, f"forward {name}")
    mean = want[1] if center else None
    rstd = want[-1]
    backward = jax.jit(lambda x, g, w, mean, rstd, gm, gr: mk.local_backward(x, g, w, mean, rstd, gm, gr,
                                                                              launch=launch))
    got = backward(x, g, w, mean, rstd, g_mean if center else None, g_rstd)
    ref = reference_backward(x, g, w, b, g_mean, g_rstd, center)
    assert len(got) == len(ref)
    assert got[0].dtype == x.dtype and all(s.dtype == jnp.float32 for s in got[1:])
    for name, gv, rv in zip(("dx", "dw", "db"), got, ref):
        # dw/db sum m rows of products rounded to the input dtype: scale the tolerance with sqrt(m)
        tol_dtype = dtype if name == "dx" else jnp.float32
        if name != "dx" and jnp.dtype(dtype).itemsize < 4:
            tol_dtype = dtype
        _close(gv, rv, tol_dtype, f"backward {name}")


# (m, n, dtype, center): rows not a multiple of the block, 768 and 4096 wide, both norms
SHAPES = [
    (1000, 768, jnp.bfloat16, True),
    (8195, 4096, jnp.float32, True),
    (37, 768, jnp.float16, False),
    (70, 4096, jnp.bfloat16, False),
    (66850, 768, jnp.float32, True),
    (21844, 12288, jnp.bfloat16, True),
    (5, 16384, jnp.float32, False),
]


@pytest.mark.parametrize("m, n, dtype, center", SHAPES)
def test_export_for_cuda(m, n, dtype, center):
    """The Mosaic GPU lowering runs here without a GPU; the exported module calls the kernel (an
    export-stable custom call: no safety check disabled)."""
    launch = mk.mosaic_rows_launch(m, n, dtype)
    xs, vec, per_row = (jax.ShapeDtypeStruct((m, n), dtype), jax.ShapeDtypeStruct((n,), jnp.float32),
                        jax.ShapeDtypeStruct((m,), jnp.float32))

    def forward(x, w, b):
        return mk.local_forward(x, w, b if center else None, eps=EPS, launch=launch)

    def backward(x, g, w, mean, rstd, gm, gr):
        return mk.local_backward(x, g, w, mean if center else None, rstd, gm if center else None, gr, launch=launch)

    for f, args in ((forward, (xs, vec, vec)), (backward, (xs, xs, vec) + (per_row,) * 4)):
        module = export.export(jax.jit(f), platforms=["cuda"])(*args).mlir_module()
        assert set(re.findall(r"custom_call @(\w+)", module)) == {"mosaic_gpu_v2"}, f.__name__


# Interpret mode on the CPU: small shapes; programs forced low so that a backward program walks
# several blocks and the last block overlaps the one before (its rows must be summed once).
INTERPRET_CASES = [
    (37, 256, jnp.float32, True, None),
    (10, 384, jnp.bfloat16, True, None),
    (9, 512, jnp.float32, False, None),
    (203, 128, jnp.float32, True, 3),
    (203, 256, jnp.bfloat16, False, 4),
    (1, 768, jnp.float32, True, None),  # one row: the one-row kernels
    (3, 9216, jnp.bfloat16, False, None),  # wider than BLOCKS_WIDTH: the one-row kernels
    (11, 256, jnp.float32, True, "rows"),  # the one-row kernels forced, 3 programs walking several rows
]


@pytest.mark.skipif(ON_GPU, reason="interpret mode runs on the CPU")
@pytest.mark.parametrize("m, n, dtype, center, programs", INTERPRET_CASES)
def test_interpret_matches_jnp(m, n, dtype, center, programs):
    launch = mk.mosaic_rows_launch(m, n, dtype, interpret=True)
    if programs == "rows":
        launch = dataclasses.replace(launch, rows=1, programs=3)
    elif programs is not None:
        launch = dataclasses.replace(launch, programs=programs)
        assert launch.backward_steps(m) > 1 and m % launch.rows
    _check(m, n, dtype, center, launch)


GPU_CASES = [
    (1000, 768, jnp.bfloat16, True),
    (1000, 768, jnp.float32, True),
    (8195, 4096, jnp.float32, True),
    (8195, 4096, jnp.bfloat16, True),
    (4099, 5120, jnp.float16, True),
    (37, 768, jnp.float32, False),
    (2051, 4096, jnp.bfloat16, False),
    (3, 128, jnp.float32, True),
    (66850, 768, jnp.bfloat16, True),
    (1, 768, jnp.float32, True),
    (1000, 12288, jnp.bfloat16, True),
    (333, 16384, jnp.float32, False),
    (517, 9216, jnp.float16, True),
]


@gpu_only
@pytest.mark.parametrize("m, n, dtype, center", GPU_CASES)
def test_gpu_matches_jnp(m, n, dtype, center):
    _check(m, n, dtype, center, mk.mosaic_rows_launch(m, n, dtype))


@gpu_only
def test_gpu_many_steps():
    """Backward programs walking many blocks, the last one overlapping."""
    m, n = 20001, 256
    launch = dataclasses.replace(mk.mosaic_rows_launch(m, n, jnp.float32), programs=7)
    assert launch.backward_steps(m) > 1 and m % launch.rows
    _check(m, n, jnp.float32, True, launch)
    rows = dataclasses.replace(launch, rows=1, programs=7)  # the one-row kernels on a narrow width
    _check(m, n, jnp.float32, True, rows)


def test_supports_and_launch():
    assert mk.mosaic_supports(8192, 768, jnp.bfloat16) is None
    assert mk.mosaic_supports(8192, 4096, jnp.float32) is None
    assert "multiple of 128" in mk.mosaic_supports(8192, 1000, jnp.float32)
    assert "float64" in mk.mosaic_supports(8192, 768, jnp.float64)
    assert mk.mosaic_supports(0, 768, jnp.float32) is not None
    assert mk.mosaic_supports(1, 768, jnp.float32) is None
    assert mk.mosaic_supports(10, mk.MAX_WIDTH * 2, jnp.float32) is not None
    with pytest.raises(ValueError, match="do not support"):
        mk.mosaic_rows_launch(10, 100, jnp.float32)
    for m, n in [(8192, 768), (16384, 4096), (65535, 4096), (66850, 768), (1000, 5120), (2, 128), (21844, 12288),
                 (1, 768)]:
        launch = mk.mosaic_rows_launch(m, n, jnp.bfloat16)
        # enough backward programs to fill the H100 (never a one-program backward: issue 14's cliff)
        assert launch.programs >= min(launch.blocks(m), mk.SMS)
        assert n % launch.chunk == 0 and launch.chunk == 128 * launch.vector
        assert launch.rows == 1 if n > mk.BLOCKS_WIDTH or m == 1 else 2 <= launch.rows <= m
        assert launch.forward_programs(m) * launch.rows >= m
        assert launch.programs * launch.backward_steps(m) >= launch.blocks(m)
