"""Fused GPU kernels (Pallas, Triton backend) of layer norm and RMS norm over the last axis of an
(M, N) array, with the affine weight (and bias) inside. Opt-in: ``impl="pallas"`` of
``layer_norm`` / ``rms_norm``; the launch is ``dispatch.rows_launch``, a rule of the shape.

* forward: a program per tile of ``launch.rows`` rows: ``mean``, ``rstd`` (float32) and ``y =
  x_hat w + b`` (RMS norm: ``x_hat = x rstd``, ``rstd = rsqrt(E[x^2] + eps)``, no bias, no mean);
* backward: ``launch.backward_programs(M)`` programs, each walking ``launch.steps`` consecutive
  tiles: ``dx = rstd (g w - E[g w] - x_hat E[g w x_hat]) + (g_mean - g_rstd rstd^2 x_hat) / N``
  (the native backward with weight, plus the terms of the mean/rstd outputs' cotangents; RMS norm
  without the means) and the program's partial sums of ``dw = sum g x_hat`` and ``db = sum g``,
  which XLA adds up.

Any M and N: loads and stores are masked past the last row and column (a row is padded to the
launch's power-of-two width). Inputs may be float32, bfloat16 or float16 (float64 in interpret
mode); statistics and sums are float32 (float64 for float64). The same kernels run on a CPU in
Pallas' interpret mode, against the XLA formulas (the tests).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from jaxrules import dispatch, partitioning
from jaxrules.dispatch import RowsLaunch
from jaxrules.mechanism import varying_struct
from jaxrules.partials import defined_mean, stat_dtype
from jaxrules.partitioning import even_axes, named, shards


def _triton():
    """Pallas' Triton backend (``jax.experimental.pallas.triton``), imported when a kernel is traced:
    deprecated since JAX 0.11 and absent from some builds (``dispatch.triton_backend_missing``), it is
    no dependency of the rest of the package."""
    from jax.experimental.pallas import triton

    return triton


def _compiler_params(launch: RowsLaunch) -> dict:
    if launch.interpret:
        return {}
    plgpu = _triton()
    return {"compiler_params": plgpu.CompilerParams(num_warps=launch.num_warps, num_stages=launch.num_stages)}


def _columns(launch: RowsLaunch, shape=None):
    """The column index of each element of a tile row (shape ``(1, width)``, or ``shape``)."""
    shape = shape or (1, launch.width)
    return lax.broadcasted_iota(jnp.int32, shape, len(shape) - 1)


def _tile(op, ref, tile, launch: RowsLaunch, n: int, *args):
    """``plgpu.load`` / ``plgpu.store`` of row tile ``tile`` of ``ref`` (M, N) or (M,), masked past
    row M and column N. The slices start at traced offsets: a tile may reach past the array."""
    m = ref.shape[0]
    rows = tile * launch.rows + lax.broadcasted_iota(jnp.int32, (launch.rows, 1), 0)
    if len(ref.shape) == 1:
        return op(ref.at[pl.ds(tile * launch.rows, launch.rows)], *args, mask=rows[:, 0] < m)
    return op(ref.at[pl.ds(tile * launch.rows, launch.rows), pl.ds(jnp.int32(0), launch.width)], *args,
              mask=(rows < m) & (_columns(launch) < n))


def _load(ref, tile, launch, n, dtype):
    """Tile ``tile`` of ``ref`` in ``dtype``, zeros where masked."""
    return _tile(functools.partial(_triton().load, other=0), ref, tile, launch, n).astype(dtype)


def _store(ref, tile, launch, n, value):
    _tile(_triton().store, ref, tile, launch, n, value.astype(ref.dtype))


def _vector(ref, launch, n, dtype):
    """A length-N vector as (width,), zeros past N."""
    return _triton().load(ref.at[pl.ds(jnp.int32(0), launch.width)], mask=_columns(launch, (launch.width,)) < n,
                      other=0).astype(dtype)


def _forward_kernel(*refs, eps, launch, center):
    """One tile of rows: layer norm (``center``: refs x, w, b -> y, mean, rstd) or RMS norm (x, w
    -> y, rstd)."""
    if center:
        x_ref, w_ref, b_ref, y_ref, mean_ref, rstd_ref = refs
    else:
        x_ref, w_ref, y_ref, rstd_ref = refs
    n, stat, tile = x_ref.shape[1], rstd_ref.dtype, pl.program_id(0)
    x = _load(x_ref, tile, launch, n, stat)
    w = _vector(w_ref, launch, n, stat)[None, :]
    if center:
        mean = x.sum(1) / n
        centered = jnp.where(_columns(launch) < n, x - mean[:, None], 0)
        rstd = lax.rsqrt((centered * centered).sum(1) / n + eps)
        y = centered * rstd[:, None] * w + _vector(b_ref, launch, n, stat)[None, :]
        _store(mean_ref, tile, launch, n, mean)
    else:
        rstd = lax.rsqrt((x * x).sum(1) / n + eps)
        y = x * rstd[:, None] * w
    _store(y_ref, tile, launch, n, y)
    _store(rstd_ref, tile, launch, n, rstd)


def forward(x, w, b, *, eps, launch):
    """``(y, mean, rstd)`` of layer norm over the last axis of ``x`` (M, N). Under ``jit`` with a
    sharded ``x`` the kernel runs on each device's rows (``jaxrules.partitioning``)."""
    return _layer_norm_forward(x, w, b, eps=eps, launch=launch)


def rms_forward(x, w, *, eps, launch):
    """``(y, rstd)`` of RMS norm over the last axis of ``x`` (M, N): ``y = x rstd w``, ``rstd =
    rsqrt(E[x^2] + eps)``; partitioned as ``forward``."""
    return _rms_norm_forward(x, w, eps=eps, launch=launch)


def local_forward(x, w, b, *, eps, launch: RowsLaunch):
    """``forward`` on one device's array (the kernel itself); ``b=None``: RMS norm (``rms_forward``,
    outputs ``(y, rstd)``)."""
    center = b is not None
    m, n = x.shape
    launch.check_covers(n, "layer_norm/rms_norm forward kernel")
    struct = functools.partial(varying_struct, refs=(x, w, b))
    per_row = struct((m,), stat_dtype(x.dtype))
    return pl.pallas_call(
        functools.partial(_forward_kernel, eps=eps, launch=launch, center=center),
        grid=(launch.forward_programs(m),),
        out_shape=[struct(x.shape, x.dtype)] + [per_row] * (2 if center else 1),
        interpret=launch.interpret, name=f"{'layer' if center else 'rms'}_norm_fwd", **_compiler_params(launch),
    )(x, w, *([b] if center else []))


def _backward_kernel(*refs, launch, center):
    """``launch.steps`` tiles of rows from ``program_id * steps``: ``dx`` and this program's
    partial sums of ``dw`` (and ``db``). Layer norm (``center``): refs x, g, w, mean, rstd,
    g_mean, g_rstd -> dx, dw, db; RMS norm: x, g, w, rstd, g_rstd -> dx, dw."""
    if center:
        x_ref, g_ref, w_ref, mean_ref, rstd_ref, gmean_ref, grstd_ref, dx_ref, *sum_refs = refs
    else:
        x_ref, g_ref, w_ref, rstd_ref, grstd_ref, dx_ref, *sum_refs = refs
    n, stat = x_ref.shape[1], rstd_ref.dtype
    w = _vector(w_ref, launch, n, stat)[None, :]
    valid = _columns(launch) < n
    first = pl.program_id(0) * launch.steps

    def body(step, sums):
        tile = first + step
        x, g = _load(x_ref, tile, launch, n, stat), _load(g_ref, tile, launch, n, stat)
        rstd, grstd = _load(rstd_ref, tile, launch, n, stat), _load(grstd_ref, tile, launch, n, stat)
        gw = g * w
        if center:
            mean, gmean = _load(mean_ref, tile, launch, n, stat), _load(gmean_ref, tile, launch, n, stat)
            xhat = jnp.where(valid, (x - mean[:, None]) * rstd[:, None], 0)
            mean_gw = defined_mean(gw.sum(1) / n)
            dx = (rstd[:, None] * (gw - mean_gw[:, None] - xhat * ((gw * xhat).sum(1) / n)[:, None])
                  + (gmean[:, None] - (grstd * rstd * rstd)[:, None] * xhat) / n)
            terms = ((g * xhat).sum(0), g.sum(0))
        else:
            xhat = x * rstd[:, None]
            dx = (rstd[:, None] * (gw - xhat * ((gw * xhat).sum(1) / n)[:, None])
                  - (grstd * rstd * rstd)[:, None] * xhat / n)
            terms = ((g * xhat).sum(0),)
        _store(dx_ref, tile, launch, n, dx)
        return tuple(s + t for s, t in zip(sums, terms))

    zeros = (jnp.zeros((launch.width,), stat),) * len(sum_refs)
    for ref, total in zip(sum_refs, lax.fori_loop(0, launch.steps, body, zeros)):
        ref[...] = total


def backward(x, g, w, mean, rstd, g_mean, g_rstd, *, launch):
    """``(dx, dw, db)``: the VJP of ``forward`` for cotangents ``g`` (of y), ``g_mean``,
    ``g_rstd``. Under ``jit`` with sharded rows the kernel runs on each device's rows and ``dw``,
    ``db`` are summed over the devices (``jaxrules.partitioning``)."""
    dx, dw, db = _layer_norm_backward(x, g, w, mean, rstd, g_mean, g_rstd, launch=launch)
    return dx, dw.astype(w.dtype), db.astype(w.dtype)


def rms_backward(x, g, w, rstd, g_rstd, *, launch):
    """``(dx, dw)``: the VJP of ``rms_forward`` for cotangents ``g`` (of y) and ``g_rstd``, ``dx =
    rstd (g w - x_hat E[g w x_hat]) - g_rstd rstd^2 x_hat / N``, ``dw = sum g x_hat``; partitioned
    as ``backward``."""
    dx, dw = _rms_norm_backward(x, g, w, rstd, g_rstd, launch=launch)
    return dx, dw.astype(w.dtype)


def local_backward(x, g, w, mean, rstd, g_mean, g_rstd, *, launch: RowsLaunch):
    """``backward`` on one device's rows (the kernel itself), with ``dw``, ``db`` in the
    statistics' dtype (summed over devices before the cast to the weight's). ``mean=None`` (and
    ``g_mean=None``): RMS norm's (``rms_backward``), ``(dx, dw)``."""
    center = mean is not None
    m, n = x.shape
    launch.check_covers(n, "layer_norm/rms_norm backward kernel")
    stat = rstd.dtype
    programs = launch.backward_programs(m)
    stats = (mean, rstd, g_mean, g_rstd) if center else (rstd, g_rstd)
    n_sums = 2 if center else 1
    struct = functools.partial(varying_struct, refs=(x, g, w, *stats))
    dx, *sums = pl.pallas_call(
        functools.partial(_backward_kernel, launch=launch, center=center),
        grid=(programs,),
        in_specs=[pl.no_block_spec] * (3 + len(stats)),  # whole arrays: the kernel indexes its tiles
        out_specs=[pl.no_block_spec] + [pl.BlockSpec((None, launch.width), lambda i: (i, 0))] * n_sums,
        out_shape=[struct(x.shape, x.dtype)] + [struct((programs, launch.width), stat)] * n_sums,
        interpret=launch.interpret, name=f"{'layer' if center else 'rms'}_norm_bwd", **_compiler_params(launch),
    )(x, g, w, *[v.astype(stat) for v in stats])
    return (dx, *(s.sum(0)[:n] for s in sums))


# ----------------------------------------------------------------------------------------------
# Partitioned under ``jit`` (``jaxrules.partitioning``): x (M, N), rows sharded, the weight's
# gradients all-reduced.


def _ln_forward_impl(x, w, b, eps, launch):
    return local_forward(x, w, b, eps=eps, launch=launch)


def _rms_forward_impl(x, w, eps, launch):
    return local_forward(x, w, None, eps=eps, launch=launch)


def _rows_forward_partition(impl, n_stats: int):
    """The ``partition`` of a rows forward (``impl``, ``n_stats`` per-row outputs after y): rows
    sharded, N and the weight (and bias) replicated."""

    def partition(eps, launch, mesh, arg_shapes, result_shape):
        x = arg_shapes[0]
        rows = even_axes(mesh, x, 0)
        local = dispatch.relaunch(launch, x.shape[0] // shards(mesh, rows), x.shape[1])
        lower = functools.partial(impl, eps=eps, launch=local)
        matrix = named(mesh, rows, ())
        return lower, (matrix,) + (named(mesh, rows),) * n_stats, (matrix,) + (named(mesh, ()),) * (
            len(arg_shapes) - 1)

    return partition


_ln_forward = partitioning.kernel_op(
    _ln_forward_impl, 3, lambda *_: ("m n, n, n -> m n, m, m", {"need_replication_factors": ("n",)}),
    _rows_forward_partition(_ln_forward_impl, 2))
_rms_forward = partitioning.kernel_op(
    _rms_forward_impl, 2, lambda *_: ("m n, n -> m n, m", {"need_replication_factors": ("n",)}),
    _rows_forward_partition(_rms_forward_impl, 1))


def _layer_norm_forward(x, w, b, *, eps: float, launch):
    """``forward``'s kernel (``local_forward``), partitioned: ``(y, mean, rstd)``."""
    return tuple(_ln_forward(x, w, b, eps, launch))


def _rms_norm_forward(x, w, *, eps: float, launch):
    """``rms_forward``'s kernel, partitioned: ``(y, rstd)``."""
    return tuple(_rms_forward(x, w, eps, launch))


def _ln_backward_impl(x, g, w, mean, rstd, g_mean, g_rstd, launch):
    return local_backward(x, g, w, mean, rstd, g_mean, g_rstd, launch=launch)


def _rms_backward_impl(x, g, w, rstd, g_rstd, launch):
    return local_backward(x, g, w, None, rstd, None, g_rstd, launch=launch)


def _rows_backward_partition(impl, n_stats: int, n_sums: int):
    """The ``partition`` of a rows backward (``impl``: x, g, w, then ``n_stats`` per-row arrays ->
    dx and ``n_sums`` weight gradients): rows sharded, the weight gradients summed over the row
    axes (one all-reduce)."""

    def partition(launch, mesh, arg_shapes, result_shape):
        x = arg_shapes[0]
        rows = even_axes(mesh, x, 0)
        local = dispatch.relaunch(launch, x.shape[0] // shards(mesh, rows), x.shape[1])

        def lower(*args):
            dx, *sums = impl(*args, local)
            if rows:  # the weight's gradient sums over every row: one all-reduce of the sums
                sums = lax.psum(tuple(sums), rows)
            return (dx, *sums)

        matrix, vector, per_row = named(mesh, rows, ()), named(mesh, ()), named(mesh, rows)
        return lower, (matrix,) + (vector,) * n_sums, (matrix, matrix, vector) + (per_row,) * n_stats

    return partition


_ln_backward = partitioning.kernel_op(
    _ln_backward_impl, 7,
    lambda *_: ("m n, m n, n, m, m, m, m -> m n, n, n", {"need_replication_factors": ("n",)}),
    _rows_backward_partition(_ln_backward_impl, 4, 2))
_rms_backward = partitioning.kernel_op(
    _rms_backward_impl, 5, lambda *_: ("m n, m n, n, m, m -> m n, n", {"need_replication_factors": ("n",)}),
    _rows_backward_partition(_rms_backward_impl, 2, 1))


def _layer_norm_backward(x, g, w, mean, rstd, g_mean, g_rstd, *, launch):
    """``local_backward``, partitioned: ``(dx, dw, db)``, the weight's gradients in
    the statistics' dtype, summed over the devices."""
    stat = mean.dtype
    return tuple(_ln_backward(x, g, w, mean, rstd, g_mean.astype(stat), g_rstd.astype(stat), launch))


def _rms_norm_backward(x, g, w, rstd, g_rstd, *, launch):
    """``local_backward`` of RMS norm, partitioned: ``(dx, dw)``, ``dw`` in the
    statistics' dtype, summed over the devices."""
    return tuple(_rms_backward(x, g, w, rstd, g_rstd.astype(rstd.dtype), launch))
