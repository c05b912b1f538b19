"""Fused GPU kernels (Pallas, Triton backend) for layer norm over the last axis of an (M, N)
array, with the affine weight and bias inside the kernel.

* forward: one program per ``rows`` rows: mean, rstd (float32) and ``y = x_hat w + b``;
* backward: one program per group of rows, looping over them in chunks of ``rows``: ``dx`` (the
  native backward with weight, plus the terms of the mean/rstd outputs' cotangents) and
  per-program partial sums of ``dw = sum g x_hat`` and ``db = sum g``, added up by XLA.

Inputs may be float32, bfloat16 or float16 (float64 in interpret mode); statistics and sums are
float32 (float64 for float64). The same kernels
run on the CPU in Pallas interpret mode (the tests), against the jnp formulas.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from jaxrules.partials import stat_dtype

# Launch parameters (benchmarks/layer_norm_tuning.py sweeps them on the GPU).
TUNING = {"tile_elements": 4096, "backward_programs": 256, "num_warps": None, "num_stages": 2}


def tile_rows(m: int, n: int) -> int:
    """Rows per load: a power of two dividing ``m``, about ``tile_elements`` per tile."""
    rows = max(1, TUNING["tile_elements"] // n)
    while m % rows:
        rows //= 2
    return rows


def program_groups(m: int, rows: int) -> int:
    """Programs of the backward kernel: at most ``backward_programs``, dividing the number of
    row tiles."""
    return math.gcd(m // rows, TUNING["backward_programs"])


def _compiler_params(interpret, n):
    if interpret:
        return {}
    from jax.experimental.pallas import triton as plgpu

    warps = TUNING["num_warps"] or (8 if n >= 2048 else 4)
    return {"compiler_params": plgpu.CompilerParams(num_warps=warps, num_stages=TUNING["num_stages"])}


def _forward_kernel(x_ref, w_ref, b_ref, y_ref, mean_ref, rstd_ref, *, eps):
    stat = mean_ref.dtype
    x = x_ref[...].astype(stat)
    mean = x.mean(-1)
    centered = x - mean[:, None]
    rstd = lax.rsqrt((centered * centered).mean(-1) + eps)
    y = centered * rstd[:, None] * w_ref[...].astype(stat)[None, :] + b_ref[...].astype(stat)[None, :]
    y_ref[...] = y.astype(y_ref.dtype)
    mean_ref[...] = mean
    rstd_ref[...] = rstd


def forward(x, w, b, *, eps, interpret):
    """``(y, mean, rstd)`` of layer norm over the last axis of ``x`` (M, N)."""
    m, n = x.shape
    rows = tile_rows(m, n)
    row_spec = pl.BlockSpec((rows, n), lambda i: (i, 0))
    stat_spec = pl.BlockSpec((rows,), lambda i: (i,))
    vec_spec = pl.BlockSpec((n,), lambda i: (0,))
    return pl.pallas_call(
        functools.partial(_forward_kernel, eps=eps),
        grid=(m // rows,),
        in_specs=[row_spec, vec_spec, vec_spec],
        out_specs=[row_spec, stat_spec, stat_spec],
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((m,), stat_dtype(x.dtype)),
                   jax.ShapeDtypeStruct((m,), stat_dtype(x.dtype))],
        interpret=interpret, name="layer_norm_fwd", **_compiler_params(interpret, n),
    )(x, w, b)


def _backward_kernel(x_ref, g_ref, w_ref, mean_ref, rstd_ref, gmean_ref, grstd_ref, dx_ref, dw_ref, db_ref, *,
                     rows, steps):
    n, stat = x_ref.shape[-1], mean_ref.dtype
    w = w_ref[...].astype(stat)

    def body(step, carry):
        dw, db = carry
        tile = pl.ds(step * rows, rows)
        x, g = x_ref[tile, :].astype(stat), g_ref[tile, :].astype(stat)
        mean, rstd = mean_ref[tile], rstd_ref[tile]
        xhat = (x - mean[:, None]) * rstd[:, None]
        gw = g * w[None, :]
        dx = rstd[:, None] * (gw - gw.mean(-1)[:, None] - xhat * (gw * xhat).mean(-1)[:, None])
        dx = dx + (gmean_ref[tile][:, None] - (grstd_ref[tile] * rstd * rstd)[:, None] * xhat) / n
        dx_ref[tile, :] = dx.astype(dx_ref.dtype)
        return dw + (g * xhat).sum(0), db + g.sum(0)

    zeros = jnp.zeros((n,), stat)
    dw, db = lax.fori_loop(0, steps, body, (zeros, zeros))
    dw_ref[...] = dw
    db_ref[...] = db


def backward(x, g, w, mean, rstd, g_mean, g_rstd, *, interpret):
    """``(dx, dw, db)``: the VJP of ``forward`` for cotangents ``g`` (of y), ``g_mean``,
    ``g_rstd``."""
    m, n = x.shape
    rows = tile_rows(m, n)
    groups = program_groups(m, rows)
    per_program = m // groups
    row_spec = pl.BlockSpec((per_program, n), lambda i: (i, 0))
    stat_spec = pl.BlockSpec((per_program,), lambda i: (i,))
    vec_spec = pl.BlockSpec((n,), lambda i: (0,))
    partial_spec = pl.BlockSpec((None, n), lambda i: (i, 0))
    dx, dw, db = pl.pallas_call(
        functools.partial(_backward_kernel, rows=rows, steps=per_program // rows),
        grid=(groups,),
        in_specs=[row_spec, row_spec, vec_spec, stat_spec, stat_spec, stat_spec, stat_spec],
        out_specs=[row_spec, partial_spec, partial_spec],
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((groups, n), mean.dtype),
                   jax.ShapeDtypeStruct((groups, n), mean.dtype)],
        interpret=interpret, name="layer_norm_bwd", **_compiler_params(interpret, n),
    )(x, g, w, mean, rstd, g_mean.astype(mean.dtype), g_rstd.astype(mean.dtype))
    return dx, dw.sum(0).astype(w.dtype), db.sum(0).astype(w.dtype)
