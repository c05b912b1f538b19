"""Normalization: ``x_hat = (x - mean) rstd``; statistics, projections and their partials
(layer/batch/group/RMS norm). Part of ``jaxrules.partials``."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrules.mechanism import explicit_sharding
from jaxrules.partials.reductions import max_or_neg_inf
from jaxrules.partitioning import local_shape

__all__ = [  # the helpers jaxrules.partials re-exports (formulas write P.<name>)
    "affine_norm_backward", "defined_mean", "direct_forms", "group_mean",
    "masked_softmax_parts", "norm_projection", "norm_projection_eps_partial", "norm_stats", "projection_means",
    "rms_projection", "rms_projection_eps_partial", "rms_rstd", "softmax_parts", "stat_dtype", "weight_sums",
    "welford_moments", "WEIGHT_SUMS_MIN_ROWS"
]

# ----------------------------------------------------------------------------------------------
# Normalization: x_hat = (x - mean) * rstd over ``axes`` (and over the devices of ``axis_name``).
# Statistics are computed in float32 for half-precision input, as torch does.


def stat_dtype(dtype):
    """float32 for float16/bfloat16, else the dtype itself."""
    return jnp.float32 if jnp.dtype(dtype).itemsize < 4 else dtype


def group_mean(v, axes, axis_name):
    """Mean over ``axes`` (kept), and over the devices of ``axis_name`` when given."""
    m = jnp.mean(v, axis=axes, keepdims=True)
    return m if axis_name is None else lax.pmean(m, axis_name)


# The statistics' forms. The direct forms (two-pass statistics, the backward's sums centred on the
# mean) let XLA's GPU row fusions recompute the statistics inside their consumers, as for plain
# JAX's layer norm; the one-pass forms (``welford_moments``, sums over data shifted by each group's
# first element) read x once less but reduce more slowly per element. On an H200
# (``benchmarks/README.md``, the statistics' forms):
#
# * many groups: the one-pass forms are 1.1-1.6x faster than the direct ones (8192 rows of 32 MiB
#   and more, 16384 of 16 MiB), and down to 0.6x of them with a few thousand narrow rows
#   (4096x768);
# * long rows of a row norm (statistics over x's last axis alone: layer norm over one axis): from
#   8192 elements a row the one-pass forms are 1.0-2.0x as fast as the direct ones at every row
#   count from 1024, where the direct forms run down to 0.79x of plain JAX (4096x12288 float32);
#   below 8192, the one-pass forms are 0.89-0.98x of plain JAX in half precision up to 4096 rows;
# * many rows of a row norm below many groups (5120-8192 rows of 1536-6144, every dtype): the
#   one-pass forms are 1.11-1.59x as fast as the direct ones and 1.06x or more of plain JAX, where
#   the direct forms ran down to 0.85x of it; at 4096 rows they are 0.49-0.91x of the direct ones
#   below 4096 elements a row, so the step is at 5120 rows;
# * batch and group norms (a few thousand groups at most, a group over several axes): the one-pass
#   forms are 0.7-1.1x of the direct forms alone, and 0.74x in a UNet's whole training step where
#   every group norm holds 64 MiB or more.
#
# So the one-pass forms run only for x of at least ONE_PASS_MIN_BYTES with either many groups (at
# least ONE_PASS_MIN_GROUPS, groups x bytes at least ONE_PASS_MIN_GROUP_BYTES), or rows of a row
# norm at least ONE_PASS_MIN_ROW long, or at least ONE_PASS_MANY_ROWS rows of a row norm at least
# ONE_PASS_MANY_ROWS_MIN_ROW long.
ONE_PASS_MIN_GROUPS = 8192
ONE_PASS_MIN_BYTES = 10 * 2**20
ONE_PASS_MIN_GROUP_BYTES = 8192 * 32 * 2**20
ONE_PASS_MIN_ROW = 8192
ONE_PASS_MANY_ROWS = 5120
ONE_PASS_MANY_ROWS_MIN_ROW = 1536


def direct_forms(x, axes) -> bool:
    """Whether ``norm_stats`` / ``projection_means`` take the direct forms for x over ``axes``
    (see ``ONE_PASS_MIN_GROUPS``): x's bytes as stored on each device decide
    (``partitioning.local_shape``: its shard where the sharding is known when tracing; under
    ``jax.vmap`` of the primal, as for a traced ``eps``, one example's), with the number of
    groups (statistics) they make and, for statistics over the last axis alone (a row norm), its
    length."""
    shape = local_shape(x)
    nbytes = math.prod(shape) * np.dtype(x.dtype).itemsize
    reduced = {b % x.ndim for b in axes}
    groups = math.prod(d for a, d in enumerate(shape) if a not in reduced)
    many_groups = groups >= ONE_PASS_MIN_GROUPS and groups * nbytes >= ONE_PASS_MIN_GROUP_BYTES
    row_norm = reduced == {x.ndim - 1}
    long_rows = row_norm and shape[-1] >= ONE_PASS_MIN_ROW
    many_rows = row_norm and groups >= ONE_PASS_MANY_ROWS and shape[-1] >= ONE_PASS_MANY_ROWS_MIN_ROW
    return not (nbytes >= ONE_PASS_MIN_BYTES and (many_groups or long_rows or many_rows))


def norm_stats(x, axes, eps, axis_name):
    """``(mean, rstd)`` with the biased variance (torch's saved statistics), in ``stat_dtype``.

    Each device's ``(mean, var)`` comes, on a GPU, from one pass over x (``welford_moments``:
    XLA then reads x once for them instead of twice) where ``direct_forms`` says so, elsewhere,
    and on other platforms,
    from two (the mean, then the centered mean square: faster on a CPU); across the devices of
    ``axis_name`` they merge as Chan et al.'s parallel variance, ``var = E_dev[var_d + (mean_d -
    mean)^2]`` (equal counts per device)."""
    xf = x.astype(stat_dtype(x.dtype))
    two_pass = functools.partial(_two_pass_moments, axes=axes)
    one_pass = functools.partial(welford_moments, axes=axes)
    mean, var = (two_pass(xf) if direct_forms(x, axes) else
                 lax.platform_dependent(xf, cuda=one_pass, rocm=one_pass, default=two_pass))
    if axis_name is not None:
        local_mean = mean
        mean = lax.pmean(local_mean, axis_name)
        var = lax.pmean(var + jnp.square(local_mean - mean), axis_name)
    return mean, lax.rsqrt(var + eps)


def _two_pass_moments(x, axes):
    """``(mean, biased var)`` over ``axes`` (kept): the mean, then the centered mean square."""
    mean = jnp.mean(x, axis=axes, keepdims=True)
    return mean, jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def welford_moments(x, axes):
    """``(mean, biased var)`` over ``axes`` (kept) in one read of x: one variadic reduction of
    (count, mean, M2) triples merged as Chan et al. (``M2 = Ma + Mb + d^2 na nb / n``, ``d = mb -
    ma``; torch's GPU kernels use Welford too), over x minus the group's first element (without
    the shift a float32 mean near 4096 costs 3e-4 of the variance; with it the relative error is
    ~1e-5 at worst, ``tests/test_norm_stats.py``, against ~1e-7 for two passes). An empty group
    gives NaN for both, as ``jnp.mean``. Derivatives (JAX cannot differentiate a variadic
    reduction): ``d mean = E[dx]``, ``d var = 2 E[(x - mean) dx]``."""
    axes = tuple(a % x.ndim for a in axes)
    outer, inner = _per_sample(x, axes)
    shift = _first_of_group(x, inner)

    def merge(a, b):
        (na, ma, sa), (nb, mb, sb) = a, b
        n = na + nb
        frac = jnp.where(n > 0, nb / jnp.where(n > 0, n, 1), 0)
        delta = mb - ma
        return n, ma + delta * frac, sa + sb + delta * delta * na * frac

    zero = jnp.zeros((), x.dtype)
    n, mean, m2 = lax.reduce((jnp.ones_like(x), x - shift, jnp.zeros_like(x)), (zero, zero, zero), merge, inner)
    kept = tuple(1 if a in axes else d for a, d in enumerate(x.shape))
    if outer is not None:  # each sample's (count, shift, mean - shift, M2), merged over the samples
        n, base, offset, m2 = lax.reduce((n, jnp.squeeze(shift, inner), mean, m2), (zero,) * 4, _merge_shifted,
                                         (outer,))
        return jnp.where(n > 0, base + offset, jnp.nan).reshape(kept), (m2 / n).reshape(kept)
    mean = jnp.where(n > 0, mean, jnp.nan).reshape(kept) + shift
    return mean, (m2 / n).reshape(kept)


def _merge_shifted(a, b):
    """Chan et al.'s merge of ``(count, base, offset, M2)`` moments whose mean is ``base + offset``
    (two floats: a sample's mean near 4096 rounded to one float32 would cost the variance 1e-4 of
    its value); the result keeps ``a``'s base (``b``'s when ``a`` is empty)."""
    (na, ba, oa, sa), (nb, bb, ob, sb) = a, b
    n = na + nb
    frac = jnp.where(n > 0, nb / jnp.where(n > 0, n, 1), 0)
    delta = (bb - ba) + (ob - oa)
    merged = (n, ba, oa + delta * frac, sa + sb + delta * delta * na * frac)
    return tuple(jnp.where(na > 0, m, v) for m, v in zip(merged, b))


def _per_sample(x, axes):
    """``(outer, inner)``: ``(0, the other axes)`` when ``axes`` (sorted, non-negative) reduce over
    the batch axis 0 and more, else ``(None, axes)``. Sums over such axes run per sample first,
    shifted by each sample's first element, then over the samples: no value of one sample is
    needed by another's partial sums, so a batch sharded over devices (data parallelism)
    exchanges only the per-sample partial sums, and not first a shift from the device holding
    sample 0."""
    if x.size and len(axes) > 1 and 0 in axes:
        return 0, tuple(a for a in axes if a != 0)
    return None, axes


@welford_moments.defjvp
def _welford_moments_jvp(axes, primals, tangents):
    (x,), (dx,) = primals, tangents
    mean, var = welford_moments(x, axes)
    dmean = jnp.mean(dx, axis=axes, keepdims=True)
    return (mean, var), (dmean, 2 * jnp.mean((x - mean) * dx, axis=axes, keepdims=True))


# ``weight_sums`` serves a layer norm of at least this many rows (on each device). In whole GPT
# steps on an H200 (``benchmarks/README.md``) it ran 4.5% faster than the two sums at 8192 rows
# of 768 and as fast at 8192 rows of 4096; on the held-out draw it is as fast as the two sums
# from 8192 rows, and up to 13% slower at 2048-4096 rows of 1280-5120.
WEIGHT_SUMS_MIN_ROWS = 8192


def weight_sums(x, mean, rstd, g, axes):
    """``(sum g x_hat, sum g)`` over ``axes`` (kept), ``x_hat = (x - mean) rstd``, in ``rstd``'s
    dtype: the weight and bias gradients of a layer norm (the sums run over the rows), for
    ``WEIGHT_SUMS_MIN_ROWS`` rows or more.

    Both sums are one variadic reduction over the rows, computed from x and g behind an
    ``optimization_barrier``. As two sums of expressions of x and g, XLA's GPU fusion computes
    ``g x_hat`` inside the row fusion that computes dx and writes it out in float32 for a
    separate column sum; the barrier changes that choice at 8192 rows of 768 (a width of 8192
    still writes the product out, and a barrier on the statistics too, which avoids that write,
    gained no time). RMS norm keeps its plain sum: no benchmarked model has one, and on the
    held-out draw's RMS norms alone the barrier changed nothing."""
    x, g = lax.optimization_barrier((x, g))
    stat = rstd.dtype
    xhat = (x.astype(stat) - mean) * rstd
    gs = g.astype(stat)
    return _summed_together(xhat * gs, gs, tuple(a % x.ndim for a in axes))


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _summed_together(a, b, axes):
    """``(sum a, sum b)`` over ``axes`` (kept) as one variadic reduction (XLA then reads the
    operands of a and b once for both). Linear: its JVP sums the tangents."""
    zero = jnp.zeros((), a.dtype)
    sums = lax.reduce((a, b), (zero, zero), lambda p, q: (p[0] + q[0], p[1] + q[1]), axes)
    return tuple(jnp.expand_dims(s, axes) for s in sums)


@_summed_together.defjvp
def _summed_together_jvp(axes, primals, tangents):
    ta, tb = tangents
    return _summed_together(*primals, axes), (jnp.sum(ta, axes, keepdims=True), jnp.sum(tb, axes, keepdims=True))


def norm_projection_eps_partial(x, g, eps, axes, axis_name):
    """``dB(g)/deps`` of the normalization's backward ``B(g) = rstd (g - E[g] - x_hat E[g
    x_hat]) = rstd (g - E[g]) - rstd^3 (x - mean) E[g (x - mean)]``, ``rstd = rsqrt(var + eps)``:
    ``((g - E[g]) - 3 rstd^2 (x - mean) E[g (x - mean)]) (-rstd^3 / 2)``, statistics from x."""
    mean, rstd = norm_stats(x, axes, eps, axis_name)
    xm = x.astype(rstd.dtype) - mean
    g = g.astype(rstd.dtype)
    e = lambda v: group_mean(v, axes, axis_name)  # noqa: E731
    return ((g - e(g)) - 3 * rstd * rstd * xm * e(g * xm)) * (-0.5 * rstd * rstd * rstd)


def defined_mean(mean_gw):
    """``E[g w]`` of a normalized group, NaN where it is infinite: an infinite weight entry that
    varies within the group makes the input gradient ``B(g w)`` undefined over the whole group
    (as torch's, which is NaN there; see ``norm_projection``)."""
    return jnp.where(jnp.isinf(mean_gw), jnp.nan, mean_gw)


def affine_norm_backward(xhat, rstd, g, w, g_mean, g_rstd, axes, per_group_weight=False):
    """dx of ``y = x_hat w + b`` with the statistics as outputs too, every per-group value kept
    along ``axes``: ``rstd (g w - E[g w] - x_hat E[g w x_hat]) + (g_mean - g_rstd rstd^2 x_hat) /
    count`` (the native backward with weight plus the statistics' cotangents; the fused norm
    kernels compute it, their reference VJPs call this). ``per_group_weight`` (w constant over
    each group, batch norm): ``w B(g)``, so that an infinite w gives +-inf, as torch's."""
    count = math.prod(xhat.shape[a] for a in axes)
    v = g if per_group_weight else g * w
    dx = rstd * (v - defined_mean(v.mean(axes, keepdims=True)) - xhat * (v * xhat).mean(axes, keepdims=True))
    return (w * dx if per_group_weight else dx) + (g_mean - g_rstd * rstd * rstd * xhat) / count


def softmax_parts(x, axis):
    """``(e, s)``: ``e = exp(x - max x)`` and ``s = sum e`` over ``axis`` (kept), softmax = e / s.
    The shift is a constant for differentiation (softmax does not depend on it)."""
    e = jnp.exp(x - lax.stop_gradient(max_or_neg_inf(x, axis)))
    return e, jnp.sum(e, axis=axis, keepdims=True)


def masked_softmax_parts(x, mask, axis):
    """``(e, s)`` of the softmax over the entries where ``mask`` (jax.nn's ``where=``): ``e =
    exp(x - max x)`` there and 0 elsewhere, ``s = sum e`` (kept axes), 1 where no entry is
    included (softmax 0 there, as JAX's; log_softmax -inf). The shift is a constant."""
    xs = jnp.where(mask, x, -jnp.inf)
    m = jnp.max(xs, axis=axis, keepdims=True, initial=-jnp.inf)
    m = lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0))
    e = jnp.where(mask, jnp.exp(xs - m), 0)
    s = jnp.sum(e, axis=axis, keepdims=True)
    return e, jnp.where(jnp.any(mask, axis=axis, keepdims=True), s, 1)


def norm_projection(x, mean, rstd, v, axes, axis_name):
    """``rstd (v - E[v] - x_hat E[v x_hat])``: both the JVP of x -> x_hat (seed ``_norm_jvp`` with
    ``_invstd_jvp``) and its transpose (the native backward without weight), since the operator
    is symmetric. Computed in the statistics' dtype.

    ``E[v x_hat]`` is summed over shifted data, ``rstd (E[v (x - s)] - (mean - s) E[v])`` with
    ``s`` the group's first element (on each device): exact in exact arithmetic for any ``s``;
    the sums do not wait for the statistics, so XLA computes them in the pass that reads x for
    the statistics or for dx (faster on a GPU than summing ``v x_hat``), except where
    ``direct_forms`` says so (``s = mean``). torch's
    kernels sum over unshifted x (``s = 0``), which cancels when ``|mean| >> std``; with the
    shift only ``|mean - s| / std`` matters."""
    stat = rstd.dtype
    v = v.astype(stat)
    mean_v, centered = projection_means(x, mean, v, axes, axis_name)
    xhat = (x.astype(stat) - mean) * rstd
    return rstd * (v - defined_mean(mean_v) - xhat * (rstd * centered))


def projection_means(x, mean, v, axes, axis_name):
    """``(E[v], E[v (x - mean)])`` over ``axes`` (kept; and over the devices of ``axis_name``), in
    v's dtype (x is cast to it; x as stored decides ``direct_forms``): ``norm_projection``'s two
    means, which the weight gradients of batch norm reuse
    (``sum g = count E[g]``, ``sum g x_hat = count rstd E[g (x - mean)]``: no sum waits for the
    variance, so on a sharded batch they are all-reduced with it, not after). Summed over shifted data,
    ``E[v (x - s)] - (mean - s) E[v]`` with ``s`` the group's first element, per sample where the
    axes hold the batch axis (see ``norm_projection``)."""
    axes = tuple(sorted(a % x.ndim for a in axes))
    outer, inner = _per_sample(x, axes)
    direct, x = direct_forms(x, axes), x.astype(v.dtype)
    shift = None if direct else lax.stop_gradient(_first_of_group(x, inner))
    mean_v = jnp.mean(v, axes, keepdims=True)
    if direct:
        centered = jnp.mean(v * (x - mean), axes, keepdims=True)
    elif outer is None:
        centered = jnp.mean(v * (x - shift), axes, keepdims=True) - (mean - shift) * mean_v  # E[v (x - mean)]
    else:  # each sample's shift s_n: E[v (x - mean)] = sum_n [sum v (x - s_n) - (mean - s_n) sum v] / count
        count = math.prod(x.shape[a] for a in axes)
        per_sample = (jnp.sum(v * (x - shift), inner, keepdims=True)
                      - (mean - shift) * jnp.sum(v, inner, keepdims=True))
        centered = jnp.sum(per_sample, outer, keepdims=True) / count
    if axis_name is not None:  # each device's shift is undone before the devices' means are taken
        mean_v, centered = lax.pmean((mean_v, centered), axis_name)
    return mean_v, centered


def _first_of_group(x, axes):
    """x at index 0 of each of ``axes`` (kept, so it broadcasts against x); 0 when x is empty."""
    if x.size == 0:
        return jnp.zeros((), x.dtype)
    axes = {a % x.ndim for a in axes}
    sharding = explicit_sharding(x)
    spec = (() if sharding is None else tuple(sharding.spec)) + (None,) * x.ndim
    sharded = tuple(a for a in sorted(axes) if spec[a] is not None)
    first = x[tuple(slice(0, 1) if a in axes and a not in sharded else slice(None) for a in range(x.ndim))]
    if not sharded:
        return first
    # An Explicit mesh refuses to slice a sharded axis: there the first element is picked by a
    # masked sum instead (elementwise, then a reduction, as the statistics are).
    at_zero = functools.reduce(jnp.logical_and, [lax.broadcasted_iota(np.int32, first.shape, a) == 0 for a in sharded])
    return jnp.sum(jnp.where(at_zero, first, jnp.zeros((), x.dtype)), axis=sharded, keepdims=True)


def rms_rstd(x, axes, eps):
    """``rsqrt(E[x^2] + eps)`` over ``axes`` (kept), in ``stat_dtype`` (torch's ``rms_norm``)."""
    xf = x.astype(stat_dtype(x.dtype))
    return lax.rsqrt(jnp.mean(jnp.square(xf), axis=axes, keepdims=True) + eps)


def rms_projection_eps_partial(x, v, eps, axes):
    """``dB(v)/deps`` of the RMS normalization's backward ``B(v) = rstd (v - x_hat E[v x_hat]) =
    rstd v - rstd^3 x E[v x]``, ``rstd = rsqrt(E[x^2] + eps)``: ``(v - 3 rstd^2 x E[v x])
    (-rstd^3 / 2)``, rstd from x."""
    rstd = rms_rstd(x, axes, eps)
    xs, v = x.astype(rstd.dtype), v.astype(rstd.dtype)
    return (v - 3 * rstd * rstd * xs * jnp.mean(v * xs, axis=axes, keepdims=True)) * (-0.5 * rstd * rstd * rstd)


def rms_projection(x, rstd, v, axes):
    """``rstd (v - x_hat E[v x_hat])`` with ``x_hat = x rstd``: both the JVP of x -> x_hat for
    the RMS norm and its transpose (the operator is symmetric), as ``norm_projection`` without
    the mean. Computed in the statistics' dtype, as ``rstd v + x c`` with the row factor ``c =
    -rstd^3 E[v x]``: the row sum ``E[v x]`` does not wait for ``rstd``, so XLA computes it in the
    pass that reads x for the statistics (on the H100, ``E[v x_hat]`` cost a pass: 0.85x of plain
    JAX at 16384x4096), and a sum of two products (plain JAX's order) where ``rstd v - rstd^3 x
    E[v x]`` measured 0.87x of plain JAX at 21844x12288 bfloat16 (1.106 vs 0.959 ms;
    ``benchmarks/xla_layer_norm_forms.py --op rms_norm``)."""
    stat = rstd.dtype
    xs, v = x.astype(stat), v.astype(stat)
    return rstd * v + xs * (-(rstd * rstd * rstd) * jnp.mean(v * xs, axis=axes, keepdims=True))
