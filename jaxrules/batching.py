"""vmap rules for ops whose batching logic matters, mirroring functorch's BatchRulesNorm.cpp.

Every other op is batched by the mechanism (its primal and formulas under ``jax.vmap``).

The normalization ``(x, w, b) -> (x_hat w + b, mean, rstd)`` (``ops.normalization``, the XLA
formulas of batch, layer and group norm) reduces over ``axes``. functorch folds the vmap
dimension B0 into a dimension the statistics do *not* reduce, so that the batched computation is
one call with per-example statistics:

* batch norm (reduces all but the channel axis 1): B0 is folded into the channels,
  ``[B0, N, C, *] -> [N, B0*C, *]``, weight and bias tiled (``batch_norm_batch_rule``);
* group norm (x seen as ``[N, G, C/G, L]``, reducing the last two): B0 is folded into N,
  ``[B0, N, ...] -> [B0*N, ...]`` (``native_group_norm_plumbing``);
* layer norm (reduces trailing axes): B0 is folded into the first leading axis, or prepended
  when every axis is reduced (``native_layer_norm_batch_rule``).

Batched weight or bias (one per example) are applied after an unweighted call, by broadcasting,
as functorch applies them outside the native kernels. The fused kernels' own rules (fold into
the kernel's launch) are beside their ops in ``ops.normalization``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def affine_norm_batch_rule(primal):
    """The vmap rule of ``primal(x, w, b, *, axes, eps, axis_name) -> (y, mean, rstd)``, the
    statistics kept along ``axes`` and ``w``/``b`` views that broadcast against x. When the
    statistics are shared across this very vmap axis (``axis_name``), the primal is vmapped
    with that name instead, so its collectives see the batch."""

    def rule(args, dims, *, vmap_axis_name, axes, eps, axis_name):
        (x, w, b), (x_dim, w_dim, b_dim) = args, dims
        params = dict(axes=axes, eps=eps, axis_name=axis_name)
        if axis_name is not None and axis_name == vmap_axis_name:
            fn = lambda *a: primal(*a, **params)  # noqa: E731
            return jax.vmap(fn, in_axes=dims, axis_name=vmap_axis_name)(*args), (0, 0, 0)
        if w_dim is None and b_dim is None:
            return fold_batch(primal, x, x_dim, w, b, params), (0, 0, 0)
        ones = jnp.ones((1,) * (x.ndim - (x_dim is not None)), x.dtype)  # weights per example: applied after
        if x_dim is None:  # the statistics are not batched
            xhat, mean, rstd = primal(x, ones, jnp.zeros_like(ones), **params)
            xhat, stats_dim = xhat[None], None
        else:
            xhat, mean, rstd = fold_batch(primal, x, x_dim, ones, jnp.zeros_like(ones), params)
            stats_dim = 0
        w, b = (jnp.expand_dims(v, 0) if d is None else jnp.moveaxis(v, d, 0) for v, d in ((w, w_dim), (b, b_dim)))
        stat = rstd.dtype
        y = (xhat.astype(stat) * w.astype(stat) + b.astype(stat)).astype(x.dtype)
        return (y, mean, rstd), (0, stats_dim, stats_dim)

    return rule


def fold_batch(primal, x, x_dim, w, b, params):
    """``primal`` of x batched along ``x_dim`` (w, b unbatched) as one call: B0 folded into the
    first kept axis (w and b tiled along it when they vary there), or prepended as a kept axis;
    the outputs with B0 first."""
    axes = params["axes"]
    x = jnp.moveaxis(x, x_dim, 0)
    kept = [a for a in range(x.ndim - 1) if a not in axes]
    if not kept:
        return primal(x, w[None], b[None], **dict(params, axes=tuple(a + 1 for a in axes)))
    into = kept[0]
    moved = jnp.moveaxis(x, 0, into)  # B0 just before the axis it folds into
    shape = moved.shape
    batch = shape[into]
    folded = moved.reshape(shape[:into] + (batch * shape[into + 1],) + shape[into + 2 :])
    w, b = (jnp.tile(v, [batch if a == into else 1 for a in range(v.ndim)]) if v.shape[into] > 1 else v
            for v in (w, b))

    def unfold(v):  # B0 * K at ``into`` -> B0 first
        v = v.reshape(v.shape[:into] + (batch, v.shape[into] // batch) + v.shape[into + 1 :])
        return jnp.moveaxis(v, into, 0)

    return tuple(unfold(v) for v in primal(folded, w, b, **params))


def vmap_size(args, dims) -> int:
    """The size of a batching rule's vmap dimension (the first batched argument's)."""
    return next(a.shape[d] for a, d in zip(args, dims) if d is not None)


def batch_axis_at(a, dim, size: int, at: int = 0):
    """A batching rule's argument ``a`` with its vmap dimension ``dim`` moved to axis ``at``;
    an unbatched one (``dim`` None) broadcast to ``size`` there."""
    if dim is not None:
        return jnp.moveaxis(a, dim, at)
    return jnp.broadcast_to(jnp.expand_dims(a, at), (*jnp.shape(a)[:at], size, *jnp.shape(a)[at:]))


def leading_batch_rule(primal):
    """The vmap rule of a primal that treats every leading axis of its (batched) arguments as a
    batch axis (stacks of matrices): one call with the vmap dimension moved to 0, unbatched
    arguments broadcast along it. Under an ``Explicit`` mesh the primal then sees the batch
    axis and its sharding (``jax.vmap`` would hide them from what it builds from scratch)."""

    def rule(args, dims, *, vmap_axis_name, **static):
        size = vmap_size(args, dims)
        out = primal(*(batch_axis_at(a, d, size) for a, d in zip(args, dims)), **static)
        return out, jax.tree_util.tree_map(lambda _: 0, out)

    return rule
