"""Normalization: ``batch_norm``, ``layer_norm``, ``group_norm`` (torch.nn.functional's
semantics, channels at axis 1).

All three run one op on the XLA path, ``affine_normalize``: ``y = (x - mean) rstd w + b`` over
the reduced axes (and over the devices of ``axis_name``) with the statistics as outputs, saving
what torch saves (input, weight, mean, rstd — not a normalized copy). Its VJP is the native
backward with weight; the ``dx`` part is computed by the op ``normalize_backward`` (defined here), whose own
formulas are the seed's double backward, so Hessian-vector products run them. Its vmap rule
(``jaxrules/batching.py``) folds the vmap dimension into a kept axis, as functorch does.

``layer_norm`` and ``rms_norm`` also run, on request (``impl="pallas"``), fused Pallas kernels
(``jaxrules.norm_kernels``) as ops of their own, ``layer_norm_rows`` and ``rms_norm_rows``: their
JVP formulas are jnp, their VJP formulas run the backward kernels, whose own derivatives are those
of the jnp form of the same backward (``mechanism.differentiated_as``), so double backward and
every transform still compose. Under ``jit`` with sharded rows the kernels run on each device's
rows (``jaxrules.partitioning``). The default is always the XLA formulas (``jaxrules.dispatch``).
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.typing import ArrayLike

from jaxrules import _validate as V
from jaxrules import dispatch, partitioning
from jaxrules import partials as P
from jaxrules._namespace import exported_as
from jaxrules.batching import affine_norm_batch_rule
from jaxrules.mechanism import concrete_value, define_op, differentiated_as

# ----------------------------------------------------------------------------------------------
# Ops

# B(g), the ``dx`` of the normalizations' VJP formulas, as an op of its own (called through
# ``normalize_backward``), so that its own formulas give the double backward under a second
# reverse pass.
def _normalize_backward_primal(x, mean, rstd, g, *, axes, eps, axis_name):
    # In x's dtype (computed in the statistics' dtype): for bfloat16 inputs an intermediate XLA
    # keeps between fusions is then bfloat16, not float32.
    return P.norm_projection(x, mean, rstd, g, axes, axis_name).astype(x.dtype)


def normalize_backward_jvp(res, tx, tmean, trstd, tg, *, axes, eps, axis_name):
    """JVP of the backward ``gx = B(g)``: ``B(dg) - rstd (E[dx x_hat] gx + E[g x_hat] B(dx) +
    x_hat E[gx dx])`` — the forward-mode counterpart of the seed's double backward
    (``layer_norm_double_backward`` / ``batchnorm_double_backward`` with weight 1). The statistics
    are recomputed from x (their arguments carry no derivative: see ``normalize_backward``)."""
    x, _, _, g = res
    mean, rstd = P.norm_stats(x, axes, eps, axis_name)
    gx = P.norm_projection(x, mean, rstd, g, axes, axis_name)
    out = None if tg is None else P.norm_projection(x, mean, rstd, tg, axes, axis_name)
    if tx is not None:
        xhat = (x.astype(rstd.dtype) - mean) * rstd
        tx = tx.astype(rstd.dtype)
        mean_ = lambda v: P.group_mean(v, axes, axis_name)  # noqa: E731
        dx_term = -rstd * (
            mean_(tx * xhat) * gx
            + mean_(g.astype(rstd.dtype) * xhat) * P.norm_projection(x, mean, rstd, tx, axes, axis_name)
            + xhat * mean_(gx * tx)
        )
        out = dx_term if out is None else out + dx_term
    return out


def normalize_backward_vjp(res, ct, *, axes, eps, axis_name):
    """The seed's double backward (``layer_norm_double_backward`` / ``batchnorm_double_backward``
    with weight 1; the weight's terms come from the product rule outside the kernel), given
    ``h = ggI``: ``g_x = -rstd (x_hat E[h gx] + E[g x_hat] B(h) + E[h x_hat] gx)`` and
    ``g_gO = B(h)``. The statistics are recomputed from x; their arguments get no cotangent
    (see ``normalize_backward``)."""
    x, _, _, g = res
    mean, rstd = P.norm_stats(x, axes, eps, axis_name)
    h = ct.astype(rstd.dtype)
    gx = P.norm_projection(x, mean, rstd, g, axes, axis_name)
    bh = P.norm_projection(x, mean, rstd, h, axes, axis_name)
    xhat = (x.astype(rstd.dtype) - mean) * rstd
    mean_ = lambda v: P.group_mean(v, axes, axis_name)  # noqa: E731
    g_x = -rstd * (xhat * mean_(h * gx) + mean_(g.astype(rstd.dtype) * xhat) * bh + mean_(h * xhat) * gx)
    return g_x, None, None, bh


normalize_backward_op = define_op(
    "normalize_backward", _normalize_backward_primal, normalize_backward_jvp, normalize_backward_vjp
)


def normalize_backward_eps_jvp(res, tx, tmean, trstd, tg, teps, *, axes, axis_name):
    """``normalize_backward_jvp`` with ``eps`` an array argument, plus its term: ``B(g) = rstd (g
    - E[g]) - rstd^3 (x - mean) E[g (x - mean)]`` depends on eps through ``rstd`` only, so
    ``dB = ((g - E[g]) - 3 rstd^2 (x - mean) E[g (x - mean)]) (-rstd^3 / 2) deps``."""
    x, _, _, g, eps = res
    out = normalize_backward_jvp(res[:4], tx, tmean, trstd, tg, axes=axes, eps=eps, axis_name=axis_name)
    if teps is not None:
        out = P.terms(out, P.norm_projection_eps_partial(x, g, eps, axes, axis_name) * teps)
    return out


def normalize_backward_eps_vjp(res, ct, *, axes, axis_name):
    """``normalize_backward_vjp`` with ``eps`` an array argument, plus eps's cotangent ``sum(h
    dB/deps)``, ``dB/deps = ((g - E[g]) - 3 rstd^2 (x - mean) E[g (x - mean)]) (-rstd^3 / 2)``."""
    x, _, _, g, eps = res
    g_x, _, _, bh = normalize_backward_vjp(res[:4], ct, axes=axes, eps=eps, axis_name=axis_name)
    partial = P.norm_projection_eps_partial(x, g, eps, axes, axis_name)
    return g_x, None, None, bh, jnp.sum(ct.astype(partial.dtype) * partial)


normalize_backward_eps_op = define_op(
    "normalize_backward",
    lambda x, mean, rstd, g, eps, *, axes, axis_name: _normalize_backward_primal(
        x, mean, rstd, g, axes=axes, eps=eps, axis_name=axis_name),
    normalize_backward_eps_jvp, normalize_backward_eps_vjp,
)


def _affine_normalize_primal(x, w, b, *, axes, eps, axis_name):
    """``(y, mean, rstd)``: ``y = (x - mean) rstd w + b`` in x's dtype, the statistics over
    ``axes`` (kept, in ``stat_dtype``); ``w``, ``b`` are views that broadcast against x."""
    mean, rstd = P.norm_stats(x, axes, eps, axis_name)
    stat = rstd.dtype
    y = (x.astype(stat) - mean) * rstd * w.astype(stat) + b.astype(stat)
    return y.astype(x.dtype), mean, rstd


def _save_affine_normalize(outs, x, w, b, **_):
    return (x, w, outs[1], outs[2])


def affine_normalize_jvp(res, tx, tw, tb, *, axes, eps, axis_name):
    """Outputs ``(y, mean, rstd)`` of ``y = x_hat w + b``: ``dmean = E[dx]``, ``drstd = -rstd^2
    E[x_hat dx]``, ``dy = rstd (dx - dmean - x_hat E[x_hat dx]) w + x_hat dw + db`` (seed
    ``layer_norm_jvp`` / ``batch_norm_jvp`` / ``group_norm_jvp``: ``_norm_jvp`` with
    ``_invstd_jvp``, then ``_affine_jvp``)."""
    x, w, mean, rstd = res
    stat = rstd.dtype
    xhat = (x.astype(stat) - mean) * rstd
    dy, dmean, drstd = [], None, None
    if tx is not None:
        t = tx.astype(stat)
        dmean, c = P.group_mean(t, axes, axis_name), P.group_mean(xhat * t, axes, axis_name)
        dy.append(rstd * (t - dmean - xhat * c) * P.with_rank(w.astype(stat), x.ndim))
        drstd = -rstd * rstd * c
    if tw is not None:
        dy.append(xhat * P.with_rank(tw.astype(stat), x.ndim))
    if tb is not None:
        dy.append(jnp.broadcast_to(tb.astype(stat), x.shape))
    return P.terms(*dy), dmean, drstd


def affine_normalize_vjp(res, ct, *, axes, eps, axis_name):
    """The native backward with weight (seed ``native_layer_norm_backward`` /
    ``batch_norm_backward`` / ``native_group_norm_backward``): ``dx = B(g w)`` with ``B(v) = rstd
    (v - E[v] - x_hat E[v x_hat])`` (``w B(g)`` where w is one number per group, batch and instance
    norm, as torch: an infinite weight then gives +-inf, not inf - inf) computed by the
    ``normalize_backward`` op (so its own VJP, the
    seed's double backward, runs under a second reverse pass), plus the statistics outputs'
    terms ``(g_mean - g_rstd rstd^2 x_hat) / count`` when they are used (the op passes ``None``
    for a symbolic zero cotangent); ``dw = sum g x_hat``, ``db = sum g`` over the axes where the
    weight broadcasts. Where those are the normalized axes (batch norm) they are ``count rstd
    E[g (x - mean)]`` and ``count E[g]``, the means ``B(g)`` takes (``P.projection_means``, the same
    expressions), with rstd outside the sum: on a batch sharded over devices no all-reduce then
    waits for the variance's (``sum g x_hat`` did: one more collective in the chain)."""
    x, w, mean, rstd = res
    g_out, g_mean, g_rstd = ct
    stat = rstd.dtype
    xhat = (x.astype(stat) - mean) * rstd
    g = jnp.zeros(x.shape, stat) if g_out is None else g_out.astype(stat)
    ws = P.with_rank(w.astype(stat), x.ndim)
    if all(w.shape[a] == 1 for a in axes):  # one weight per group (batch, instance norm): B(g w) = w B(g)
        dx = ws * normalize_backward(x, mean, rstd, g, axes=axes, eps=eps, axis_name=axis_name)
    else:
        dx = normalize_backward(x, mean, rstd, g * ws, axes=axes, eps=eps, axis_name=axis_name)
    count = math.prod(x.shape[a] for a in axes)  # this device's
    if g_mean is not None or g_rstd is not None:  # None: unused statistics (the usual case)
        total = count * (1 if axis_name is None else lax.psum(1, axis_name))
        g_mean = 0 if g_mean is None else g_mean
        g_rstd = 0 if g_rstd is None else g_rstd
        dx = dx + (g_mean - g_rstd * rstd * rstd * xhat) / total
    spread = tuple(a for a in range(x.ndim) if w.shape[a] == 1)
    if set(spread) == {a % x.ndim for a in axes} and axis_name is None and count:  # batch norm: B(g)'s means
        mean_g, centered = P.projection_means(x, mean, g, axes, None)
        return dx, count * rstd * centered, count * mean_g
    rows = math.prod(partitioning.local_shape(x)[a] for a in spread)  # on this device
    if spread == tuple(range(len(spread))) and g_out is not None and rows >= P.WEIGHT_SUMS_MIN_ROWS:  # layer norm
        return (dx, *P.weight_sums(x, mean, rstd, g_out, spread))
    # x_hat before g in every weight gradient's product: XLA's GPU fusion of it (which recomputes the
    # statistics) runs 3-8% faster in this order at rows of 2304-7168 in half precision (an H200)
    return dx, (xhat * g).sum(spread, keepdims=True), g.sum(spread, keepdims=True)


affine_normalize_op = define_op(
    "affine_normalize", _affine_normalize_primal, affine_normalize_jvp, affine_normalize_vjp,
    _save_affine_normalize, affine_norm_batch_rule(_affine_normalize_primal), none_for_zero_cotangents=True,
)


# The same two ops with ``eps`` an array argument (a traced eps: jit compiles once for every value,
# vmap maps over it, grad differentiates it): the XLA formulas only, batched by the mechanism.
def affine_normalize_eps_jvp(res, tx, tw, tb, teps, *, axes, axis_name):
    """``affine_normalize_jvp`` with ``eps`` an array argument (traced: jit/vmap over it), plus
    its term: ``drstd = -rstd^3 deps / 2`` (``rstd = rsqrt(var + eps)``), ``dy = (x - mean) w
    drstd``; the mean does not depend on eps."""
    x, w, mean, rstd, _ = res
    dy, dmean, drstd = affine_normalize_jvp((x, w, mean, rstd), tx, tw, tb, axes=axes, eps=None, axis_name=axis_name)
    if teps is not None:
        stat = rstd.dtype
        de = -0.5 * rstd * rstd * rstd * teps.astype(stat)
        dy = P.terms(dy, (x.astype(stat) - mean) * P.with_rank(w.astype(stat), x.ndim) * de)
        drstd = P.terms(drstd, de)
    return dy, dmean, drstd


def affine_normalize_eps_vjp(res, ct, *, axes, axis_name):
    """``affine_normalize_vjp`` with ``eps`` an array argument (its ``normalize_backward`` then
    takes eps as an argument too), plus eps's cotangent: ``sum((g w (x - mean) + g_rstd)
    (-rstd^3 / 2))`` (``rstd = rsqrt(var + eps)``; the mean does not depend on eps)."""
    x, w, mean, rstd, eps = res
    dx, dw, db = affine_normalize_vjp((x, w, mean, rstd), ct, axes=axes, eps=eps, axis_name=axis_name)
    g, _, g_rstd = ct
    stat = rstd.dtype
    per_group = 0 if g_rstd is None else g_rstd.astype(stat)
    if g is not None:
        ws = P.with_rank(w.astype(stat), x.ndim)
        per_group = per_group + jnp.sum(g.astype(stat) * ws * (x.astype(stat) - mean), axis=axes,
                                        keepdims=True)
    return dx, dw, db, jnp.sum(-0.5 * rstd * rstd * rstd * per_group)


affine_normalize_eps_op = define_op(
    "affine_normalize",
    lambda x, w, b, eps, *, axes, axis_name: _affine_normalize_primal(x, w, b, axes=axes, eps=eps, axis_name=axis_name),
    affine_normalize_eps_jvp, affine_normalize_eps_vjp,
    lambda outs, x, w, b, eps, **_: (x, w, outs[1], outs[2], eps), none_for_zero_cotangents=True,
)


def _norm_kernels():
    """``jaxrules.norm_kernels``, imported when a fused kernel is traced: it imports Pallas, which
    ``import jaxrules.nn`` does not load (the XLA formulas are the default)."""
    from jaxrules import norm_kernels

    return norm_kernels


def _layer_norm_rows_primal(x, w, b, *, eps, launch):
    return _norm_kernels().forward(x, w, b, eps=eps, launch=launch)


def _rms_norm_rows_primal(x, w, *, eps, launch):
    """``(y, rstd)`` of RMS norm over the last axis of x (M, N), the fused kernel of ``launch``'s
    kernel (``norm_kernels.rms_forward``)."""
    return _norm_kernels().rms_forward(x, w, eps=eps, launch=launch)


def _rows_batch(primal):
    """The vmap rule of a rows kernel op (``primal(x, *vectors) -> (y, *per-row statistics)``):
    the vmap dimension folded into the rows (one kernel launch, as functorch's
    ``native_layer_norm_batch_rule``) when the weight (and bias) are shared; else the kernel under
    ``jax.vmap``."""

    def rule(args, dims, *, vmap_axis_name, eps, launch):
        x, x_dim = args[0], dims[0]
        if x_dim is not None and all(d is None for d in dims[1:]):
            x = jnp.moveaxis(x, x_dim, 0)
            batch, m, n = x.shape
            folded = dispatch.relaunch(launch, batch * m, n)
            y, *stats = primal(x.reshape(batch * m, n), *args[1:], eps=eps, launch=folded)
            out = (y.reshape(batch, m, n), *(s.reshape(batch, m) for s in stats))
        else:
            moved = [a if d is None else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims)]
            fn = lambda *a: primal(*a, eps=eps, launch=launch)  # noqa: E731
            out = tuple(jax.vmap(fn, in_axes=[None if d is None else 0 for d in dims])(*moved))
        return out, (0,) * len(out)

    return rule


def layer_norm_rows_jvp(res, tx, tw, tb, *, eps, launch):
    """Layer norm over the last axis with the affine inside (the fused kernel's op), for the
    outputs ``(y, mean, rstd)``: ``dmean = E[dx]``, ``drstd = -rstd^2 E[x_hat dx]``,
    ``dy = rstd (dx - dmean - x_hat E[x_hat dx]) w + x_hat dw + db`` (seed ``layer_norm_jvp``):
    ``affine_normalize_jvp`` over the last axis, its statistics per row."""
    x, w, mean, rstd = res
    dy, dmean, drstd = affine_normalize_jvp((x, w, mean[:, None], rstd[:, None]), tx, tw, tb, axes=(-1,), eps=eps,
                                            axis_name=None)
    return dy, (0 if dmean is None else dmean[:, 0]), (0 if drstd is None else drstd[:, 0])


def layer_norm_rows_reference_vjp(res, ct, eps, launch):
    """The jnp form of the fused layer-norm backward (what the kernel computes): seed
    ``layer_norm_backward`` with weight, ``dw = sum g x_hat``, ``db = sum g``, plus the mean and
    rstd outputs' terms ``(g_mean - g_rstd rstd^2 x_hat) / N``."""
    x, w, mean, rstd = res
    g, g_mean, g_rstd = ct
    stat = rstd.dtype
    xhat = (x.astype(stat) - mean[:, None]) * rstd[:, None]
    g = g.astype(stat)
    ws = P.with_rank(w.astype(stat), x.ndim)
    dx = P.affine_norm_backward(xhat, rstd[:, None], g, ws, g_mean[:, None], g_rstd[:, None], (1,))
    return dx.astype(x.dtype), (xhat * g).sum(0).astype(w.dtype), g.sum(0).astype(w.dtype)


@differentiated_as(layer_norm_rows_reference_vjp, n_static=2)
def _layer_norm_rows_kernel_vjp(res, ct, eps, launch):
    from jaxrules import norm_kernels

    x, w, mean, rstd = res
    return norm_kernels.backward(x, ct[0], w, mean, rstd, ct[1], ct[2], launch=launch)


def layer_norm_rows_vjp(res, ct, *, eps, launch):
    """The fused backward kernel (``norm_kernels.backward``); its own derivative is that of
    ``layer_norm_rows_reference_vjp``."""
    return _layer_norm_rows_kernel_vjp(res, tuple(ct), eps, launch)


layer_norm_rows_op = define_op(
    "layer_norm_rows", _layer_norm_rows_primal, layer_norm_rows_jvp, layer_norm_rows_vjp,
    lambda outs, x, w, b, **_: (x, w, outs[1], outs[2]), _rows_batch(_layer_norm_rows_primal),
)


def _rms_norm_rows_jvp(res, tx, tw, *, eps, launch):
    """Outputs ``(y, rstd)`` of the fused RMS norm on rows (M, N): the XLA op's formula
    (``jvp_rules.rms_norm_jvp``: ``drstd = -rstd^2 E[x_hat dx]``, ``dy = rstd (dx - x_hat E[x_hat
    dx]) w + x_hat dw``) over axis 1, rstd (M,) as (M, 1)."""
    x, w, rstd = res
    dy, drstd = rms_norm_jvp((x, w, rstd[:, None]), tx, tw, axes=(1,), eps=eps)
    return dy, None if drstd is None else drstd[:, 0]


def _rms_norm_rows_reference_vjp(res, ct, eps, launch):
    """The jnp form of the fused RMS-norm backward (what ``norm_kernels.rms_backward`` computes):
    the XLA op's VJP formula (``vjp_rules.rms_norm_vjp``: seed ``_fused_rms_norm_backward`` with
    the rstd output's term, dx through the ``rms_norm_backward`` op) over axis 1, ``dw = sum g
    x_hat`` over the rows."""
    x, w, rstd = res
    g, g_rstd = ct
    dx, g_xhat = rms_norm_vjp((x, w, rstd[:, None]), (g, g_rstd[:, None]), axes=(1,), eps=eps)
    return dx.astype(x.dtype), g_xhat.sum(0).astype(w.dtype)


@differentiated_as(_rms_norm_rows_reference_vjp, n_static=2)
def _rms_norm_rows_kernel_vjp(res, ct, eps, launch):
    x, w, rstd = res
    return _norm_kernels().rms_backward(x, ct[0], w, rstd, ct[1], launch=launch)


def _rms_norm_rows_vjp(res, ct, *, eps, launch):
    """The fused backward kernel; its own derivative is that of ``_rms_norm_rows_reference_vjp``
    (the kernel is never differentiated)."""
    return _rms_norm_rows_kernel_vjp(res, tuple(ct), eps, launch)


rms_norm_rows_op = define_op(
    "rms_norm_rows", _rms_norm_rows_primal, _rms_norm_rows_jvp, _rms_norm_rows_vjp,
    lambda outs, x, w, **_: (x, w, outs[1]), _rows_batch(_rms_norm_rows_primal),
)


# B(v), the ``dx`` of the RMS norm's VJP formula, as an op of its own (called through
# ``rms_norm_backward``), so that its own formulas give the double backward.
def _rms_norm_backward_primal(x, rstd, v, *, axes, eps):
    return P.rms_projection(x, rstd, v, axes).astype(x.dtype)


def rms_norm_backward_jvp(res, tx, trstd, tv, *, axes, eps):
    """JVP of the backward ``gx = B(v)``, ``B(v) = rstd (v - x_hat E[v x_hat])``: ``B(dv) - rstd
    (E[x_hat dx] gx + E[v x_hat] B(dx) + x_hat E[gx dx])`` (the double backward of
    ``normalize_backward_jvp`` without the mean terms, derived from ``drstd = -rstd^2 E[x_hat
    dx]``). ``rstd`` is recomputed from x (its argument carries no derivative: see
    ``rms_norm_backward``)."""
    x, _, v = res
    rstd = P.rms_rstd(x, axes, eps)
    out = None if tv is None else P.rms_projection(x, rstd, tv, axes)
    if tx is not None:
        stat = rstd.dtype
        xhat, t, v = x.astype(stat) * rstd, tx.astype(stat), v.astype(stat)
        gx = P.rms_projection(x, rstd, v, axes)
        mean_ = lambda u: jnp.mean(u, axis=axes, keepdims=True)  # noqa: E731
        dx_term = -rstd * (mean_(xhat * t) * gx + mean_(v * xhat) * P.rms_projection(x, rstd, t, axes)
                           + xhat * mean_(gx * t))
        out = dx_term if out is None else out + dx_term
    return out


def rms_norm_backward_vjp(res, ct, *, axes, eps):
    """Given ``h``: ``g_x = -rstd (x_hat E[h gx] + E[v x_hat] B(h) + E[h x_hat] gx)`` with ``gx =
    B(v)``, and ``g_v = B(h)`` (B is symmetric): ``normalize_backward_vjp`` without the mean
    terms. ``rstd`` is recomputed from x; its argument gets no cotangent."""
    x, _, v = res
    rstd = P.rms_rstd(x, axes, eps)
    stat = rstd.dtype
    h, v = ct.astype(stat), v.astype(stat)
    gx = P.rms_projection(x, rstd, v, axes)
    bh = P.rms_projection(x, rstd, h, axes)
    xhat = x.astype(stat) * rstd
    mean_ = lambda u: jnp.mean(u, axis=axes, keepdims=True)  # noqa: E731
    g_x = -rstd * (xhat * mean_(h * gx) + mean_(v * xhat) * bh + mean_(h * xhat) * gx)
    return g_x, None, bh


rms_norm_backward_op = define_op(
    "rms_norm_backward", _rms_norm_backward_primal, rms_norm_backward_jvp, rms_norm_backward_vjp
)


def rms_norm_backward_eps_jvp(res, tx, trstd, tv, teps, *, axes):
    """``rms_norm_backward_jvp`` with ``eps`` an array argument, plus its term: ``B(v) = rstd v -
    rstd^3 x E[v x]`` gives ``dB = (v - 3 rstd^2 x E[v x]) (-rstd^3 / 2) deps``."""
    x, _, v, eps = res
    out = rms_norm_backward_jvp(res[:3], tx, trstd, tv, axes=axes, eps=eps)
    if teps is not None:
        out = P.terms(out, P.rms_projection_eps_partial(x, v, eps, axes) * teps)
    return out


def rms_norm_backward_eps_vjp(res, ct, *, axes):
    """``rms_norm_backward_vjp`` with ``eps`` an array argument, plus eps's cotangent ``sum(h
    dB/deps)``, ``dB/deps = (v - 3 rstd^2 x E[v x]) (-rstd^3 / 2)``."""
    x, _, v, eps = res
    g_x, _, bh = rms_norm_backward_vjp(res[:3], ct, axes=axes, eps=eps)
    partial = P.rms_projection_eps_partial(x, v, eps, axes)
    return g_x, None, bh, jnp.sum(ct.astype(partial.dtype) * partial)


rms_norm_backward_eps_op = define_op(
    "rms_norm_backward", lambda x, rstd, v, eps, *, axes: _rms_norm_backward_primal(x, rstd, v, axes=axes, eps=eps),
    rms_norm_backward_eps_jvp, rms_norm_backward_eps_vjp,
)


def _rms_norm_primal(x, w, *, axes, eps):
    """``(y, rstd)``: ``y = x rstd w`` in x's dtype, ``rstd = rsqrt(E[x^2] + eps)`` over ``axes``
    (kept, in ``stat_dtype``); ``w`` broadcasts against x."""
    rstd = P.rms_rstd(x, axes, eps)
    stat = rstd.dtype
    return (x.astype(stat) * rstd * P.with_rank(w.astype(stat), x.ndim)).astype(x.dtype), rstd


def rms_norm_jvp(res, tx, tw, *, axes, eps):
    """Outputs ``(y, rstd)`` of ``y = x_hat w``, ``x_hat = x rstd``, ``rstd = rsqrt(E[x^2] +
    eps)``: ``drstd = -rstd^2 E[x_hat dx]``, ``dy = rstd (dx - x_hat E[x_hat dx]) w + x_hat dw``
    (seeds ``rms_norm_jvp`` and ``rms_norm_rstd_jvp`` of torch's ``_fused_rms_norm``)."""
    x, w, rstd = res
    stat = rstd.dtype
    xhat = x.astype(stat) * rstd
    dy, drstd = [], None
    if tx is not None:
        t = tx.astype(stat)
        c = jnp.mean(xhat * t, axis=axes, keepdims=True)
        dy.append(rstd * (t - xhat * c) * P.with_rank(w.astype(stat), t.ndim))
        drstd = -rstd * rstd * c
    if tw is not None:
        dy.append(xhat * P.with_rank(tw.astype(stat), x.ndim))
    return P.terms(*dy), drstd


def rms_norm_vjp(res, ct, *, axes, eps):
    """Seed ``_fused_rms_norm_backward`` (with the rstd output's cotangent as in
    ``infinitely_differentiable_native_rms_norm_backward``): ``dx = B(g w)`` with ``B(v) = rstd
    (v - x_hat E[v x_hat])`` computed by the ``rms_norm_backward`` op (so its own VJP runs under
    a second reverse pass), plus the rstd output's term ``-g_rstd rstd^2 x_hat / count`` when it
    is used (``None``: unused); ``dw = g x_hat`` (summed to the weight's shape by the mechanism)."""
    x, w, rstd = res
    g, g_rstd = ct
    stat = rstd.dtype
    xhat = x.astype(stat) * rstd
    g = jnp.zeros(x.shape, stat) if g is None else g.astype(stat)
    dx = rms_norm_backward(x, rstd, g * P.with_rank(w.astype(stat), g.ndim), axes=axes, eps=eps)
    if g_rstd is not None:
        count = math.prod(x.shape[a] for a in axes)
        dx = dx - g_rstd * rstd * rstd * xhat / count
    return dx, xhat * g


rms_norm_op = define_op(
    "rms_norm", _rms_norm_primal, rms_norm_jvp, rms_norm_vjp,
    lambda outs, x, w, **_: (x, w, outs[1]), none_for_zero_cotangents=True,
)


# The same two ops with ``eps`` an array argument (traced).
def rms_norm_eps_jvp(res, tx, tw, teps, *, axes):
    """``rms_norm_jvp`` with ``eps`` an array argument, plus its term: ``drstd = -rstd^3 deps /
    2`` (``rstd = rsqrt(E[x^2] + eps)``), ``dy = x w drstd``."""
    x, w, rstd, _ = res
    dy, drstd = rms_norm_jvp((x, w, rstd), tx, tw, axes=axes, eps=None)
    if teps is not None:
        stat = rstd.dtype
        de = -0.5 * rstd * rstd * rstd * teps.astype(stat)
        dy, drstd = P.terms(dy, x.astype(stat) * P.with_rank(w.astype(stat), x.ndim) * de), P.terms(drstd, de)
    return dy, drstd


def rms_norm_eps_vjp(res, ct, *, axes):
    """``rms_norm_vjp`` with ``eps`` an array argument (its ``rms_norm_backward`` then takes eps
    as an argument too), plus eps's cotangent ``sum((g w x + g_rstd) (-rstd^3 / 2))``."""
    x, w, rstd, eps = res
    dx, dw = rms_norm_vjp((x, w, rstd), ct, axes=axes, eps=eps)
    g, g_rstd = ct
    stat = rstd.dtype
    per_row = 0 if g_rstd is None else g_rstd.astype(stat)
    if g is not None:
        ws = P.with_rank(w.astype(stat), x.ndim)
        per_row = per_row + jnp.sum(g.astype(stat) * ws * x.astype(stat), axis=axes, keepdims=True)
    return dx, dw, jnp.sum(-0.5 * rstd * rstd * rstd * per_row)


rms_norm_eps_op = define_op(
    "rms_norm", lambda x, w, eps, *, axes: _rms_norm_primal(x, w, axes=axes, eps=eps), rms_norm_eps_jvp,
    rms_norm_eps_vjp, lambda outs, x, w, eps, **_: (x, w, outs[1], eps), none_for_zero_cotangents=True,
)


# ----------------------------------------------------------------------------------------------
# Public functions


def normalize_backward(x, mean, rstd, g, *, axes, eps, axis_name):
    """``rstd (g - E[g] - x_hat E[g x_hat])``: the normalization's VJP (the native backward
    without weight). ``mean``/``rstd`` are x's statistics, passed so that they are not computed
    again; they carry no derivative of their own (the formulas differentiate through x)."""
    if not isinstance(eps, float):  # an array (traced)
        return normalize_backward_eps_op(x, lax.stop_gradient(mean), lax.stop_gradient(rstd), g, eps, axes=axes,
                                         axis_name=axis_name)
    return normalize_backward_op(x, lax.stop_gradient(mean), lax.stop_gradient(rstd), g, axes=axes, eps=eps,
                                 axis_name=axis_name)


def rms_norm_backward(x, rstd, v, *, axes, eps):
    """``rstd (v - x_hat E[v x_hat])``: the RMS normalization's VJP without weight. ``rstd`` is
    x's statistic, passed so that it is not computed again; it carries no derivative of its own
    (the formulas differentiate through x)."""
    if not isinstance(eps, float):  # an array (traced)
        return rms_norm_backward_eps_op(x, lax.stop_gradient(rstd), v, eps, axes=axes)
    return rms_norm_backward_op(x, lax.stop_gradient(rstd), v, axes=axes, eps=eps)


_ROW_IMPLS = ("xla", "pallas", "pallas_interpret")
_REMOVED_KERNELS = ("mosaic", "mosaic_interpret")  # layer/RMS norm's Mosaic GPU kernels
_REMOVED_GROUPED = ("pallas", "pallas_interpret")  # batch/group norm's fused kernels


def _removed_impl(op, impl, why):
    """``"xla"`` after a ``DeprecationWarning`` for an ``impl`` whose kernels were removed."""
    warnings.warn(f"{op}: impl={impl!r} is deprecated and runs the XLA formulas: {why}", DeprecationWarning,
                  stacklevel=3)
    return "xla"


def _rows_plan(op, impl, x, n):
    """``dispatch.Plan`` of layer/RMS norm on x with rows of ``n``: the XLA formulas unless ``impl``
    asks for the fused kernels (``"pallas"``; ``"pallas_interpret"`` in tests), launched by the rule
    of the shape (``dispatch.rows_launch``). Empty inputs take the XLA formulas, and so does
    ``"pallas"`` in a JAX without Pallas' Triton backend (``dispatch.triton_backend_missing``,
    warned once)."""
    if impl in _REMOVED_KERNELS:
        impl = _removed_impl(op, impl, "the Mosaic GPU kernels were removed (slower than the Triton kernels and the "
                                       "XLA formulas at most shapes)")
    if impl is not None and impl not in _ROW_IMPLS:
        raise ValueError(f"{op}: impl must be None or one of {_ROW_IMPLS}, got {impl!r}")
    if impl in (None, "xla") or x.size == 0:
        return dispatch.Plan("xla", None, "empty input" if x.size == 0 else f"impl={impl!r}")
    if missing := dispatch.triton_backend_missing():  # the interpreted kernels import the backend too
        return dispatch.Plan("xla", None, missing)
    if n > dispatch.MAX_WIDTH:
        raise ValueError(f"{op}: impl={impl!r} takes rows of at most {dispatch.MAX_WIDTH} columns (one program holds "
                         f"a row), got {n}; use impl='xla' or None")
    launch = dispatch.rows_launch(x.size // n, n, interpret=impl == "pallas_interpret")
    return dispatch.Plan("pallas", launch, f"impl={impl!r}")


def _grouped_impl(op, impl):
    """Batch and group norm run their XLA formulas: ``impl`` None or ``"xla"``; ``"pallas"``
    (their removed fused kernels) is deprecated."""
    if impl in _REMOVED_GROUPED:
        return _removed_impl(op, impl, "its fused kernels were removed (slower than the XLA formulas at large shapes)")
    if impl not in (None, "xla"):
        raise ValueError(f"{op}: impl must be None or 'xla', got {impl!r}")
    return "xla"


def _affine_vectors(op, x, channels, weight, bias):
    """``(w, b)`` of shape ``channels`` (checked), ones/zeros in x's dtype where not given; a given
    weight keeps its dtype (float32 weights of a bfloat16 input stay float32 inside the op)."""
    w = _affine(op, jnp.ones(channels, x.dtype), weight, None, channels, 0, keep_dtype=False)
    b = _affine(op, jnp.zeros(channels, x.dtype), None, bias, channels, 0, keep_dtype=False)
    return partitioning.replicated(w), partitioning.replicated(b)


def _affine_normalize(op, x, weight, bias, axes, weight_shape, weight_axis, eps, axis_name):
    """``(y, mean, rstd)`` of the XLA formulas: x normalized over ``axes``, then ``* weight + bias``
    (``weight_shape`` placed at ``weight_axis``, ones/zeros where not given)."""
    w, b = _affine_vectors(op, x, weight_shape, weight, bias)
    view = (1,) * weight_axis + tuple(weight_shape) + (1,) * (x.ndim - weight_axis - len(weight_shape))
    if not isinstance(eps, float):  # traced: an argument, in the statistics' dtype
        return affine_normalize_eps_op(x, w.reshape(view), b.reshape(view), eps.astype(P.stat_dtype(x.dtype)),
                                       axes=axes, axis_name=axis_name)
    return affine_normalize_op(x, w.reshape(view), b.reshape(view), axes=axes, eps=eps, axis_name=axis_name)


def _check_eps(op, eps):
    """Any real number, as torch (whose own tests pass ``eps=-0.5``: ``rsqrt(var + eps)`` is then
    NaN where ``var < 0.5``, as in torch): a Python or NumPy number or a concrete 0-d array (a
    float), or a traced 0-d array (under ``jit``/``vmap``, returned as an array: the XLA formulas
    then take it as an argument, see ``_eps_plan``)."""

    if isinstance(eps, jax.Array | np.ndarray | np.generic) and not isinstance(eps, np.bool_):
        arr = jnp.asarray(eps)
        if arr.ndim != 0 or not (jnp.issubdtype(arr.dtype, jnp.floating) or jnp.issubdtype(arr.dtype, jnp.integer)):
            raise TypeError(f"{op}: eps must be a real scalar, got {arr.dtype}{list(arr.shape)}")
        host = concrete_value(arr)
        if host is not None and not math.isfinite(host.item()):
            raise TypeError(f"{op}: eps must be a finite real number, got {host.item()!r}")
        if host is None or isinstance(eps, jax.core.Tracer):  # traced (an eager grad's tracer too)
            return arr
        eps = host.item()
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps):
        raise TypeError(f"{op}: eps must be a finite real number, got {eps!r}")
    return float(eps)


def _eps_plan(op, impl, eps):
    """``impl`` for a traced eps: the XLA formulas (the fused kernels compile eps in)."""
    if isinstance(eps, float):
        return impl
    if impl not in (None, "xla"):
        raise ValueError(f"{op}: impl={impl!r} compiles eps in; a traced eps needs impl='xla' or None")
    return "xla"


def _affine(op, y, weight, bias, channel_shape, channel_axis, keep_dtype=True):
    """``y * weight + bias`` with ``weight``/``bias`` of ``channel_shape`` placed at
    ``channel_axis`` (torch's padRight), in y's dtype when ``keep_dtype`` (torch's mixed-precision
    norms: bfloat16/float16 input with float32 weights give an output of the input's dtype)."""
    dtype = y.dtype
    trailing = y.ndim - channel_axis - len(channel_shape)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        p = V.array(op, name, p)
        if p.shape != tuple(channel_shape):
            raise ValueError(f"{op}: {name} must have shape {tuple(channel_shape)}, got {p.shape}")
        p = p.reshape(p.shape + (1,) * trailing)
        y = y * p if name == "weight" else y + p
    return y.astype(dtype) if keep_dtype else y


def _trailing_shape(op: str, x: Array, normalized_shape) -> tuple[int, ...]:
    """``normalized_shape`` as a tuple, checked: at least one axis (torch: "Expected
    normalized_shape to be at least 1-dimensional"), equal to x's trailing axes."""
    if isinstance(normalized_shape, numbers.Integral):
        shape = (normalized_shape,)
    else:
        try:
            shape = tuple(normalized_shape)
        except TypeError:
            shape = None
        if shape is None or not all(isinstance(n, numbers.Integral) for n in shape):
            raise TypeError(f"{op}: normalized_shape must be an int or a sequence of ints (torch's rule), "
                            f"got {normalized_shape!r}")
    if not shape:
        raise ValueError(f"{op}: normalized_shape must name at least one axis, got () (x of shape {x.shape})")
    if x.ndim < len(shape) or tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise ValueError(f"{op}: normalized_shape {shape} does not match the trailing axes of x {x.shape}")
    return shape


@exported_as("jaxrules.nn.layer_norm")
def layer_norm(x: ArrayLike, normalized_shape: int | Sequence[int], weight: ArrayLike | None = None,
               bias: ArrayLike | None = None, eps: float | ArrayLike = 1e-5, *, impl: str | None = None) -> Array:
    """Layer normalization ``y = (x - E[x]) rsqrt(Var[x] + eps) * weight + bias`` over the
    trailing ``normalized_shape`` axes (biased variance, statistics in float32 or wider).

    Derivatives: JVP seed ``layer_norm_jvp``, VJP the native backward (``dx = rstd (gw - E[gw]
    - x_hat E[gw x_hat])``, ``dw = sum g x_hat``, ``db = sum g``), double backward seed
    ``layer_norm_double_backward``; vmap folds B0 into the leading axis. Mirrors
    ``torch.nn.functional.layer_norm``.

    Args:
        x: the input, real or complex (as torch: ``x^2`` unconjugated, so the op is holomorphic
            and its derivatives are JAX's holomorphic ones, torch's conjugated); its trailing
            axes match ``normalized_shape``.
        normalized_shape: an int (the last axis) or the trailing shape to normalize over.
        weight: the elementwise scale, of shape ``normalized_shape``; None: 1.
        bias: the elementwise shift, of shape ``normalized_shape``; None: 0.
        eps: added to the variance; a finite real number (negative too, as torch), or a traced
            scalar (then the XLA formulas run: the kernels compile ``eps`` in).
        impl: keyword-only: None or ``"xla"`` (the XLA formulas, the default everywhere),
            ``"pallas"`` (the opt-in fused kernels, ``norm_kernels``: Pallas' Triton backend,
            rows of at most 16384; faster than the XLA formulas at many large shapes on an H200,
            ``benchmarks/README.md``) or ``"pallas_interpret"`` (the kernels interpreted, for
            tests); ``"mosaic"`` is deprecated (the XLA formulas run).

    Returns:
        ``y``, of x's shape and dtype.

    Raises:
        ValueError: ``normalized_shape`` does not match x's trailing axes, a weight/bias of
            another shape or an unknown ``impl``.
        TypeError: a ``normalized_shape`` that is not an int or ints, a non-real or non-finite ``eps``.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nn as nn
        >>> print(nn.layer_norm(jnp.array([[1.0, 2.0, 3.0]]), 3).round(4))
        [[-1.2247  0.      1.2247]]
    """
    x = V.array("layer_norm", "x", x)
    shape = _trailing_shape("layer_norm", x, normalized_shape)
    k = len(shape)
    axes = tuple(range(x.ndim - k, x.ndim))
    eps = _check_eps("layer_norm", eps)
    impl = _eps_plan("layer_norm", impl, eps)
    n = math.prod(shape)
    m = x.size // max(n, 1)
    plan = _rows_plan("layer_norm", impl, x, n)
    if plan.impl == "xla":
        return _affine_normalize("layer_norm", x, weight, bias, axes, shape, x.ndim - k, eps, None)[0]
    w, b = _affine_vectors("layer_norm", x, shape, weight, bias)
    y, _, _ = layer_norm_rows_op(x.reshape(m, n), w.reshape(n), b.reshape(n), eps=eps, launch=plan.launch)
    return y.reshape(x.shape)


@exported_as("jaxrules.nn.group_norm")
def group_norm(x: ArrayLike, num_groups: int, weight: ArrayLike | None = None, bias: ArrayLike | None = None,
               eps: float | ArrayLike = 1e-5, *, impl: str | None = None) -> Array:
    """Group normalization: ``x`` of shape ``(N, C, *)`` viewed as ``(N, G, C/G * prod(*))``, each
    group normalized ``(x - E[x]) rsqrt(Var[x] + eps)`` (biased variance), then per-channel
    ``* weight + bias``.

    Derivatives: JVP seed ``group_norm_jvp``, VJP the native backward (layer norm's per group),
    double backward through ``normalize_backward``'s formulas; vmap folds B0 into N. Mirrors
    ``torch.nn.functional.group_norm``.

    Args:
        x: the input ``(N, C, *)``, real.
        num_groups: G, a positive divisor of C.
        weight: the per-channel scale (C,); None: 1.
        bias: the per-channel shift (C,); None: 0.
        eps: added to the variance; a finite real number, or a traced scalar (then the XLA
            formulas run).
        impl: keyword-only: None or ``"xla"`` (the XLA formulas); ``"pallas"`` is deprecated
            (its kernels were removed: the XLA formulas run).

    Returns:
        ``y``, of x's shape and dtype.

    Raises:
        ValueError: x of rank < 2, a ``num_groups`` that does not divide C, weight/bias not of
            shape (C,) or an unknown ``impl``.
        TypeError: a ``num_groups`` that is not an int, a non-real or non-finite ``eps``.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nn as nn
        >>> x = jnp.array([[[1.0, 2.0], [3.0, 4.0]]])  # (N, C, L) = (1, 2, 2), one group of both channels
        >>> print(nn.group_norm(x, 1).ravel().round(4))
        [-1.3416 -0.4472  0.4472  1.3416]
    """
    x = V.array("group_norm", "x", x)
    if x.ndim < 2:
        raise ValueError(f"group_norm: x must have shape (N, C, *), got {x.shape}")
    if isinstance(num_groups, bool) or not isinstance(num_groups, numbers.Integral):
        raise TypeError(f"group_norm: num_groups must be an int, got {num_groups!r}")
    if num_groups < 1 or x.shape[1] % num_groups:
        raise ValueError(f"group_norm: num_groups={num_groups!r} must be a positive divisor of C={x.shape[1]}")
    eps = _check_eps("group_norm", eps)
    _grouped_impl("group_norm", impl)
    # (N, G, C/G, L), in two reshapes: one that merges and splits at once is refused for a sharded
    # N under an Explicit mesh.
    # (-1 is avoided: it is ambiguous for an empty batch.)
    length = math.prod(x.shape[2:])
    grouped = x.reshape(x.shape[0], x.shape[1], length).reshape(x.shape[0], num_groups, x.shape[1] // num_groups,
                                                                 length)
    weight, bias = (_grouped_channels(name, v, x.shape[1], num_groups) for name, v in (("weight", weight),
                                                                                      ("bias", bias)))
    y = _affine_normalize("group_norm", grouped, weight, bias, (2, 3), grouped.shape[1:3], 1, eps, None)[0]
    return y.reshape(x.shape[0], x.shape[1], length).reshape(x.shape)


def _grouped_channels(name, v, channels, groups):
    """A per-channel ``weight``/``bias`` (C,) as (G, C/G); None stays None."""
    if v is None:
        return None
    v = V.array("group_norm", name, v)
    if v.shape != (channels,):
        raise ValueError(f"group_norm: {name} must have shape ({channels},), got {v.shape}")
    return partitioning.replicated(v).reshape(groups, -1)


@exported_as("jaxrules.nn.batch_norm")
def batch_norm(
    x: ArrayLike, running_mean: ArrayLike | None, running_var: ArrayLike | None, weight: ArrayLike | None = None,
    bias: ArrayLike | None = None, *, training: bool = False, momentum: float = 0.1, eps: float | ArrayLike = 1e-5,
    axis_name: str | None = None, impl: str | None = None,
) -> tuple[Array, Array | None, Array | None]:
    """Batch normalization ``y = (x - mean) rsqrt(var + eps) * weight + bias`` per channel (axis
    1), functional: returns ``(y, new_running_mean, new_running_var)`` (``None`` where the
    running statistic is ``None``), not y alone. Mirrors ``torch.nn.functional.batch_norm``.

    Training: statistics over every axis but the channel axis 1 (and over the devices of
    ``axis_name`` — under ``shard_map``, ``pmap`` or ``vmap(axis_name=...)`` — for a global
    batch); running statistics updated with torch's momentum convention and the unbiased batch
    variance; they carry no gradient (torch updates them in place under no_grad). Eval:
    ``(x - running_mean) / sqrt(running_var + eps)``. Seed ``batch_norm_jvp``, the native
    backward and ``batchnorm_double_backward``; vmap folds B0 into the channels.

    Under ``jax.vmap`` with a batched input and unbatched running statistics in training,
    functorch raises (it would update the statistics in place); here the new statistics are
    outputs, so the case is well defined: they come back batched, one per example.

    Args:
        x: the input ``(N, C, *)``, real.
        running_mean: the running mean (C,), or None (training only).
        running_var: the running variance (C,), or None (training only).
        weight: the per-channel scale (C,); None: 1.
        bias: the per-channel shift (C,); None: 0.
        training: keyword-only: batch statistics (True) or the running ones (False).
        momentum: keyword-only: ``new = (1 - momentum) old + momentum batch`` (torch's
            convention); a finite real number or a traced scalar.
        eps: keyword-only: added to the variance; a finite real number, or a traced scalar
            (then the XLA formulas run).
        axis_name: keyword-only: the mapped axis whose devices share the batch statistics
            (training), or None.
        impl: keyword-only: None or ``"xla"`` (the XLA formulas); ``"pallas"`` is deprecated
            (its kernels were removed: the XLA formulas run).

    Returns:
        ``(y, new_running_mean, new_running_var)``: y of x's shape and dtype; the running
        statistics updated in training, unchanged in eval, None where given None.

    Raises:
        ValueError: x of rank < 2, running statistics or weight/bias not of shape (C,), eval
            without running statistics, a non-finite ``momentum`` or an unknown ``impl``.
        TypeError: a non-real or non-finite ``eps``.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nn as nn
        >>> x, mean, var = jnp.array([[1.0], [3.0]]), jnp.zeros(1), jnp.ones(1)
        >>> y, new_mean, new_var = nn.batch_norm(x, mean, var, training=True)
        >>> print(y.ravel().round(4), f"{new_mean[0]:.4f} {new_var[0]:.4f}")  # momentum 0.1, unbiased var 2
        [-1.  1.] 0.2000 1.1000
    """
    x = V.array("batch_norm", "x", x)
    if x.ndim < 2:
        raise ValueError(f"batch_norm: x must have shape (N, C, *), got {x.shape}")
    eps = _check_eps("batch_norm", eps)
    momentum = _check_momentum("batch_norm", momentum)
    channels = x.shape[1]
    stats = []
    for name, s in (("running_mean", running_mean), ("running_var", running_var)):
        if s is not None:
            s = V.array("batch_norm", name, s)
            if s.shape != (channels,):
                raise ValueError(f"batch_norm: {name} must have shape ({channels},), got {s.shape}")
        stats.append(s)
    running_mean, running_var = stats
    channel_view = (1, channels) + (1,) * (x.ndim - 2)
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: running_mean and running_var are required when training=False")
        y = (x - running_mean.reshape(channel_view)) * lax.rsqrt(running_var.reshape(channel_view) + eps)
        return _affine("batch_norm", y.astype(x.dtype), weight, bias, (channels,), 1), running_mean, running_var
    _grouped_impl("batch_norm", impl)

    host_eps = eps if isinstance(eps, float) else concrete_value(eps)  # checked when concrete
    if host_eps is not None and host_eps <= 0:  # torch: "batch_norm eps must be positive during training"
        raise ValueError(f"batch_norm: eps must be positive during training (as torch), got {eps!r}")
    axes = (0,) + tuple(range(2, x.ndim))
    count = math.prod(x.shape[a] for a in axes) * (1 if axis_name is None else lax.psum(1, axis_name))
    if isinstance(count, int) and count == 1:  # torch: none (an empty x) is accepted
        raise ValueError(f"batch_norm: expected more than 1 value per channel when training, got input {x.shape}")
    y = _affine_normalize("batch_norm", x, weight, bias, axes, (channels,), 1, eps, axis_name)[0]
    if running_mean is None and running_var is None:
        return y, None, None
    xs = lax.stop_gradient(x).astype(P.stat_dtype(x.dtype))
    mean = P.group_mean(xs, axes, axis_name)
    var = P.group_mean(jnp.square(xs - mean), axes, axis_name)
    new_mean, new_var = _updated_running_stats(mean, var, count, running_mean, running_var, momentum)
    return y, new_mean, new_var


def _updated_running_stats(mean, var, count, running_mean, running_var, momentum):
    """torch's momentum update with the unbiased batch variance (``var`` is the biased one); an
    empty batch (``count`` 0) leaves them as they are, as torch."""
    if isinstance(count, int) and count == 0:
        return running_mean, running_var
    var = var * (count / (count - 1))
    new = []
    for s, batch in ((running_mean, mean), (running_var, var)):
        new.append(None if s is None else ((1 - momentum) * s + momentum * batch.reshape(-1)).astype(s.dtype))
    return tuple(new)


def _check_momentum(op, momentum):
    """A real number, array or tracer (jit, vmap over it); finite (checked when concrete). It only
    weighs the running statistics, which carry no gradient."""
    return V.hyperparameter(op, "momentum", momentum)


@exported_as("jaxrules.nn.instance_norm")
def instance_norm(x: ArrayLike, running_mean: ArrayLike | None = None, running_var: ArrayLike | None = None,
                  weight: ArrayLike | None = None, bias: ArrayLike | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float | ArrayLike = 1e-5) -> tuple[Array, Array | None, Array | None]:
    """Instance normalization: each (sample, channel) of x ``(N, C, *)`` normalized over its spatial
    axes, ``(x - E[x]) rsqrt(Var[x] + eps) * weight + bias``, functional: returns ``(y,
    new_running_mean, new_running_var)`` (``None`` where the running statistics are ``None``),
    as ``batch_norm``. Mirrors ``torch.nn.functional.instance_norm``.

    torch runs batch norm on x ``(N, C, *)`` viewed as ``(1, N*C, *)``: statistics per (sample, channel)
    over the spatial axes, then per-channel ``* weight + bias``. Here that is the
    ``affine_normalize`` op over the spatial axes (the XLA formulas of batch/layer/group norm:
    seed ``batch_norm_jvp``, the native backward, ``batchnorm_double_backward`` through
    ``normalize_backward``); its vmap rule folds B0 into N. No fused kernel is wired (group
    norm's, with one channel per group, would compute the same statistics).

    ``use_input_stats`` (torch's default): normalize with the input's statistics and, when
    running statistics are given (both or neither, as torch), return them updated as torch
    does: each (sample, channel) updated with ``momentum`` and its unbiased spatial variance,
    then averaged over the samples; they carry no gradient. ``use_input_stats=False``: ``(x -
    running_mean) / sqrt(running_var + eps)`` per channel, running statistics returned unchanged.

    Empty input: the running statistics come back unchanged (torch's batch norm does so for
    zero-size input; for N = 0 torch's average over no samples gives NaN instead).

    Args:
        x: the input ``(N, C, *)``, real.
        running_mean: the running mean (C,), or None (with ``running_var``: both or neither).
        running_var: the running variance (C,), or None.
        weight: the per-channel scale (C,); None: 1.
        bias: the per-channel shift (C,); None: 0.
        use_input_stats: normalize with each instance's statistics (True) or the running ones.
        momentum: the running statistics' update factor (torch's convention); a finite real
            number or a traced scalar.
        eps: added to the variance; a finite real number, or a traced scalar.

    Returns:
        ``(y, new_running_mean, new_running_var)``: y of x's shape and dtype.

    Raises:
        ValueError: x of rank < 2, only one running statistic given, shapes other than (C,),
            ``use_input_stats=False`` without running statistics or a non-finite ``momentum``.
        TypeError: a non-real or non-finite ``eps``.
    """
    op = "instance_norm"
    x = V.array(op, "x", x)
    if x.ndim < 2:
        raise ValueError(f"{op}: x must have shape (N, C, *), got {x.shape}")
    eps = _check_eps(op, eps)
    momentum = _check_momentum(op, momentum)
    channels = x.shape[1]
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{op}: running_mean and running_var must both be None or neither (as torch)")
    stats = []
    for name, s in (("running_mean", running_mean), ("running_var", running_var)):
        if s is not None:
            s = V.array(op, name, s)
            if s.shape != (channels,):
                raise ValueError(f"{op}: {name} must have shape ({channels},), got {s.shape}")
        stats.append(s)
    running_mean, running_var = stats
    if not use_input_stats:
        if running_mean is None:
            raise ValueError(f"{op}: running_mean and running_var are required when use_input_stats=False")
        view = (1, channels) + (1,) * (x.ndim - 2)
        y = (x - running_mean.reshape(view)) * lax.rsqrt(running_var.reshape(view) + eps)
        return _affine(op, y.astype(x.dtype), weight, bias, (channels,), 1), running_mean, running_var
    spatial = math.prod(x.shape[2:])
    if spatial == 1:  # torch's _verify_spatial_size
        raise ValueError(f"{op}: expected more than 1 spatial element when use_input_stats=True, got input {x.shape}")
    axes = tuple(range(2, x.ndim))
    y = _affine_normalize(op, x, weight, bias, axes, (channels,), 1, eps, None)[0]
    if running_mean is None or x.size == 0:
        return y, running_mean, running_var
    xs = lax.stop_gradient(x).astype(P.stat_dtype(x.dtype))
    mean = P.group_mean(xs, axes, None)  # (N, C, 1, ...)
    var = P.group_mean(jnp.square(xs - mean), axes, None)
    new_mean, new_var = _updated_running_stats(jnp.mean(mean, 0), jnp.mean(var, 0), spatial, running_mean,
                                               running_var, momentum)
    return y, new_mean, new_var


@exported_as("jaxrules.nn.rms_norm")
def rms_norm(x: ArrayLike, normalized_shape: int | Sequence[int], weight: ArrayLike | None = None,
             eps: float | ArrayLike | None = None, *, impl: str | None = None) -> Array:
    """RMS normalization ``y = x rsqrt(E[x^2] + eps) * weight`` with the mean over the trailing
    ``normalized_shape`` axes (statistics in float32 or wider, output in x's dtype). Mirrors
    ``torch.nn.functional.rms_norm`` (torch 2.4+).

    Derivatives: JVP ``dy = rstd (dx - x_hat E[x_hat dx]) w + x_hat dw``; VJP ``dx = rstd (gw -
    x_hat E[gw x_hat])``, ``dw = sum g x_hat`` (``x_hat = x rstd``), the dx part computed by the
    op ``rms_norm_backward``, whose own formulas give the double backward (seeds
    ``rms_norm_jvp``, ``rms_norm_rstd_jvp``, ``_fused_rms_norm_backward``,
    ``infinitely_differentiable_native_rms_norm_backward``; the op returns ``(y, rstd)`` as
    torch's ``_fused_rms_norm``). vmap: the XLA formulas under ``jax.vmap`` (reductions over
    trailing axes need no fold); the kernels' op folds B0 into the rows.

    With ``impl="pallas"`` the fused kernels run (``norm_kernels.rms_forward``/``rms_backward``:
    layer norm's row kernels without centering). Their VJP runs the backward kernel, whose own
    derivatives are those of the jnp formulas above, so double backward and every transform
    compose; under ``jit`` with sharded rows they run on each device's rows
    (``jaxrules.partitioning``).

    Args:
        x: the input, real or complex (as torch: ``x^2`` unconjugated, so the op is holomorphic
            and its derivatives are JAX's holomorphic ones, torch's conjugated); its trailing
            axes match ``normalized_shape``.
        normalized_shape: an int (the last axis) or the trailing shape to normalize over.
        weight: the elementwise scale, of shape ``normalized_shape``; None: 1.
        eps: added to the mean square; None: the machine epsilon of the statistics' dtype
            (float32 for bfloat16/float16 input: torch 2.13 takes its ``opmath`` type's epsilon,
            not ``finfo(x.dtype).eps`` as its documentation says); a finite real number, or a
            traced scalar (then the XLA formulas run: the kernels compile ``eps`` in).
        impl: keyword-only: None or ``"xla"`` (the XLA formulas, the default everywhere),
            ``"pallas"`` (the opt-in fused kernels, ``norm_kernels``: Pallas' Triton backend,
            rows of at most 16384; faster than the XLA formulas at many large shapes on an H200,
            ``benchmarks/README.md``) or ``"pallas_interpret"`` (the kernels interpreted, for
            tests); ``"mosaic"`` is deprecated (the XLA formulas run).

    Returns:
        ``y``, of x's shape and dtype.

    Raises:
        ValueError: ``normalized_shape`` does not match x's trailing axes, a weight of another
            shape, an unknown ``impl``, or a kernel ``impl`` with a traced ``eps``.
        TypeError: complex input with a kernel ``impl``, a non-real or non-finite ``eps``.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nn as nn
        >>> print(nn.rms_norm(jnp.array([1.0, 7.0]), 2, eps=0.0))  # x / sqrt(mean(x^2)) = x / 5
        [0.2 1.4]
    """
    op = "rms_norm"
    x = V.array(op, "x", x)
    shape = _trailing_shape(op, x, normalized_shape)
    k = len(shape)
    eps = float(jnp.finfo(P.stat_dtype(x.dtype)).eps) if eps is None else _check_eps(op, eps)
    if weight is None:
        w = jnp.ones(shape, x.dtype)
    else:
        w = V.array(op, "weight", weight)
        if w.shape != shape:
            raise ValueError(f"{op}: weight must have shape {shape}, got {w.shape}")
    if jnp.iscomplexobj(x) or jnp.iscomplexobj(w):  # torch's complex result: both in the common dtype
        x = x.astype(jnp.result_type(x, w))
        if impl in ("pallas", "pallas_interpret"):
            raise TypeError(f"{op}: impl={impl!r} (the fused kernels) takes real x and weight, got {x.dtype}; "
                            "use impl=None")
    impl = _eps_plan(op, impl, eps)
    n = math.prod(shape)
    plan = _rows_plan(op, impl, x, n)
    if plan.impl != "xla":
        y, _ = rms_norm_rows_op(x.reshape(x.size // n, n), partitioning.replicated(w).reshape(n), eps=eps,
                                launch=plan.launch)
        return y.reshape(x.shape)
    axes = tuple(range(x.ndim - k, x.ndim))
    if not isinstance(eps, float):  # traced: an argument, in the statistics' dtype
        return rms_norm_eps_op(x, w, eps.astype(P.stat_dtype(x.dtype)), axes=axes)[0]
    return rms_norm_op(x, w, axes=axes, eps=eps)[0]
