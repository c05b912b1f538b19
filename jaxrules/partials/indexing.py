"""Scatter / gather along one axis (torch's ``scatter_reduce``). Part of ``jaxrules.partials``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrules.mechanism import explicit_sharding, unsharded_along
from jaxrules.partials.elementwise import nan_factor, safe_reciprocal

__all__ = [  # the helpers jaxrules.partials re-exports (formulas write P.<name>)
    "embedding_row_weights", "gather_at", "repeat_along", "scatter_add", "scatter_coords", "scatter_prod_weights",
    "scatter_reduce_weights", "scattered_mask", "segment_products_of_others", "sum_repeats", "zeros_sharded_like"
]

# Scatter / gather along one axis (torch's ``scatter_reduce``): ``coords`` addresses, for each
# position of ``index``, the target element (the position with its ``axis`` coordinate replaced
# by the index).


class _CoordsAlong(tuple):
    """Scatter coordinates that are ``index`` along ``axis`` and the position elsewhere."""

    index: jax.Array
    axis: int


def scatter_coords(index, axis):
    """The scatter target coordinates of ``index`` along ``axis``."""
    coords = list(jnp.indices(index.shape, sparse=True))
    coords[axis] = index
    out = _CoordsAlong(coords)
    out.index, out.axis = index, axis % index.ndim
    return out


def zeros_sharded_like(shape, dtype, like):
    """``zeros(shape)`` sharded as ``like`` along the axes where both have the same size, under an
    ``Explicit`` mesh (the operand of a scatter, sharded as its updates); else plain zeros."""
    sharding = explicit_sharding(like)
    if sharding is None or jnp.ndim(like) != len(shape):
        return jnp.zeros(shape, dtype)
    spec = tuple(sharding.spec) + (None,) * len(shape)
    spec = [e if jnp.shape(like)[a] == n else None for a, (e, n) in enumerate(zip(spec, shape))]
    return jnp.zeros(shape, dtype, out_sharding=jax.sharding.PartitionSpec(*spec))


def gather_at(a, coords, like):
    """``a[coords]`` (the values at scattered positions), sharded as ``like`` (the scattered
    values, of the result's shape) under an ``Explicit`` mesh, where ``a`` sharded along a
    scattered axis leaves the result's sharding ambiguous; else a plain gather."""
    return jnp.asarray(a).at[coords].get(out_sharding=explicit_sharding(like, a))


def scatter_add(shape, coords, values):
    """``zeros(shape).at[coords].add(values)`` (indices along the axis in range).

    With one index per line along the axis (the backward of a pick: ``nll_loss``'s and
    ``cross_entropy``'s target class, a max with its indices) no two values meet, and the
    scatter is the elementwise ``where(position == index, values, 0)``, which XLA fuses into
    its consumers where a scatter first writes zeros of the target's size (a GPT's head at 4096
    tokens of a 32768 vocabulary on an H200: the cross entropy's backward outside the matmuls
    took 0.53 ms in three passes over float32 logits, 0.26 ms in two with the select). Not
    under an ``Explicit`` mesh (there the scatter's sharding rules place the result)."""
    if isinstance(coords, _CoordsAlong) and values.shape == coords.index.shape and all(
            n == m for a, (n, m) in enumerate(zip(shape, values.shape)) if a != coords.axis):
        if values.shape[coords.axis] == 1 and explicit_sharding(values) is None:
            position = lax.broadcasted_iota(coords.index.dtype, shape, coords.axis)
            return jnp.where(position == coords.index, values, jnp.zeros((), values.dtype))
        # One scatter per line along the axis, vmapped: the other axes become the scatter's
        # batching dimensions, which XLA's partitioner keeps sharded (it replicates a scatter of
        # sparse iotas into replicated zeros) and which an Explicit mesh resolves.
        def line(index, values):
            return jnp.zeros((shape[coords.axis],), values.dtype).at[index].add(values)

        for _ in range(values.ndim - 1):
            line = jax.vmap(line)
        moved = line(jnp.moveaxis(coords.index, coords.axis, -1), jnp.moveaxis(values, coords.axis, -1))
        return jnp.moveaxis(moved, -1, coords.axis)
    zeros = zeros_sharded_like(shape, values.dtype, values)
    return zeros.at[coords].add(values, out_sharding=explicit_sharding(zeros))


def repeat_along(x, counts, axis):
    """Entry ``i`` of ``x`` along ``axis`` repeated ``counts[i]`` times (``counts`` static);
    under an ``Explicit`` mesh ``axis`` unsharded, the others kept."""
    x = unsharded_along(x, (axis % x.ndim,))
    return jnp.repeat(x, jnp.asarray(counts), axis=axis, total_repeat_length=sum(counts),
                      out_sharding=explicit_sharding(x))


def sum_repeats(ct, counts, axis):
    """The transpose of ``repeat_along``: each entry's copies summed (a segment sum)."""
    ids = np.repeat(np.arange(len(counts)), counts)
    moved = jnp.moveaxis(ct, axis, 0)
    return jnp.moveaxis(jax.ops.segment_sum(moved, ids, num_segments=len(counts)), 0, axis)


def scattered_mask(shape, coords):
    """Which target elements receive at least one scattered value."""
    index = max(coords, key=jnp.size)  # the scattered index (the others are sparse iotas)
    zeros = zeros_sharded_like(shape, bool, index)
    return zeros.at[coords].set(True, out_sharding=explicit_sharding(zeros))


def _segmented_cumprod(values, starts):
    """Inclusive cumulative products that restart where ``starts`` is true (an associative scan:
    products only, so JAX differentiates it to any order)."""

    def combine(a, b):
        (a_value, a_start), (b_value, b_start) = a, b
        return jnp.where(b_start, b_value, a_value * b_value), a_start | b_start

    return lax.associative_scan(combine, (values, starts))[0]


def segment_products_of_others(values, segments):
    """``prod_{j != i, segments[j] == segments[i]} values[j]`` for each ``i`` (1-D), zero-safe
    and division-free: exclusive segmented products forward and backward over the members
    sorted by segment (seed ``scatter_reduce_backward``'s prod, without its single-zero special
    case, so second and higher derivatives are exact with any number of zeros)."""
    order = jnp.argsort(segments, stable=True)
    v, s = values[order], segments[order]
    boundary = s[1:] != s[:-1]
    starts = jnp.concatenate([jnp.ones(1, bool), boundary])
    ends = jnp.concatenate([boundary, jnp.ones(1, bool)])
    one = jnp.ones(1, v.dtype)
    before = jnp.where(starts, 1, jnp.concatenate([one, _segmented_cumprod(v, starts)[:-1]]))
    after = jnp.where(ends, 1, jnp.concatenate([_segmented_cumprod(v[::-1], ends[::-1])[:-1][::-1], one]))
    return jnp.zeros_like(values).at[order].set(before * after)


def embedding_row_weights(indices, padding_idx, scale_grad_by_freq, num, dtype):
    """Per looked-up row: 0 for ``padding_idx``, ``1/count(index)`` with ``scale_grad_by_freq``,
    else 1; NaN for an index out of ``[0, num)`` (a traced bad index, which ``embedding`` does
    not check outside ``jaxrules.checked``: its derivatives are NaN, never a finite wrong value)."""
    weights = nan_factor((indices < 0) | (indices >= num), dtype)
    if scale_grad_by_freq:
        counts = jnp.zeros(num, dtype).at[indices].add(1)
        weights = weights / counts[indices]
    if padding_idx is not None:
        weights = jnp.where(indices == padding_idx, 0.0, weights)
    return weights


def scatter_prod_weights(x, index, src, axis, include_self):
    """``(w_x, w_src)`` of a scatter product: each member's product of the other members of its
    slot (``segment_products_of_others``); an element not kept (``include_self=False`` and
    scattered) has weight 0, one not scattered and not kept weight 1.

    With ``include_self``, x's entry is a factor 1 in the segmented products (``w_x``: the
    product of the slot's src members) and is multiplied into ``w_src`` by a gather: x is never
    concatenated with src, so a batch-sharded x beside a replicated src stays sharded under an
    ``Explicit`` mesh (only the entries scattered into are gathered)."""
    coords = scatter_coords(index, axis)
    target = jnp.ravel_multi_index(jnp.broadcast_arrays(*coords), x.shape, mode="clip").ravel()
    if not include_self:
        others = segment_products_of_others(src.ravel(), target)
        return jnp.where(scattered_mask(x.shape, coords), 0, 1).astype(x.dtype), others.reshape(src.shape)
    slots = jnp.ones(x.size, src.dtype)  # x's own factor, multiplied in below
    others = segment_products_of_others(jnp.concatenate([slots, src.ravel()]),
                                        jnp.concatenate([jnp.arange(x.size), target]))
    w_src = others[x.size :].reshape(src.shape) * gather_at(x, coords, src)
    return others[: x.size].reshape(x.shape), w_src


def scatter_reduce_weights(res, *, axis, reduce, include_self):
    """``(w_x, w_src, coords)``: the derivative of each output element with respect to its own
    ``x`` element and to each scattered ``src`` element (seed ``scatter_reduce_backward`` /
    ``scatter_reduce_jvp``). Residuals: ``(x, index, src, out, prod_weights)`` (the last only
    for prod)."""
    x, index, src, out, prod_weights = res
    coords = scatter_coords(index, axis)
    hit = scattered_mask(x.shape, coords)
    keeps_x = jnp.ones(x.shape, bool) if include_self else ~hit
    if reduce == "sum":
        return keeps_x.astype(x.dtype), jnp.ones(src.shape, src.dtype), coords
    if reduce == "mean":
        count = keeps_x.astype(x.real.dtype) + scatter_add(x.shape, coords, jnp.ones(src.shape, x.real.dtype))
        inverse = 1 / jnp.maximum(count, 1)
        return keeps_x.astype(inverse.dtype) * inverse, gather_at(inverse, coords, src), coords
    if reduce in ("amax", "amin"):
        x_ties = keeps_x & (x == out)
        src_ties = src == gather_at(out, coords, src)
        count = x_ties.astype(x.dtype) + scatter_add(x.shape, coords, src_ties.astype(x.dtype))
        inverse = safe_reciprocal(count, count == 0)
        src_weight = src_ties.astype(inverse.dtype) * gather_at(inverse, coords, src)
        return x_ties.astype(inverse.dtype) * inverse, src_weight, coords
    return (*prod_weights, coords)  # prod: the product of the slot's other members
