"""Sorting (sort, topk, cummax/cummin, nanmedian, quantile). Part of ``jaxrules.partials``."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from jaxrules.mechanism import explicit_sharding, unsharded_along
from jaxrules.partials.elementwise import with_rank

__all__ = [  # the helpers jaxrules.partials re-exports (formulas write P.<name>)
    "QUANTILE_METHODS", "cummaxmin_select", "lerp_selected", "quantile_q_slope", "quantile_selection",
    "order_key", "sort_permutation", "top_k_indices",
]

# ----------------------------------------------------------------------------------------------
# Sorting (sort, topk, cummax/cummin, nanmedian, quantile)


def _canonical_bits(x):
    """A float array's bits as signed integers of its width, with ``-0.0`` as ``0.0`` and every
    NaN as the positive quiet NaN; and the integer dtype. Computed on the bits: a float
    comparison could flush subnormals to zero (XLA's CPU does)."""
    int_dtype = jnp.dtype(f"int{8 * x.dtype.itemsize}")
    info = jnp.iinfo(int_dtype)
    magnitude = jnp.array(info.max, int_dtype)
    infinity, nan = (lax.bitcast_convert_type(jnp.array(v, x.dtype), int_dtype) for v in (jnp.inf, jnp.nan))
    bits = lax.bitcast_convert_type(x, int_dtype)
    bits = jnp.where(bits == info.min, jnp.zeros((), int_dtype), bits)
    return jnp.where((bits & magnitude) > infinity, nan & magnitude, bits), int_dtype


def order_key(x, descending=False):
    """An integer array whose ascending order is torch's order of ``x``: NaN after every number
    (before, when ``descending``), ``-0.0 == 0.0``, subnormals by value. A float's canonical bits
    (``_canonical_bits``) as a signed integer order the positive floats and NaN above them;
    flipping every bit but the sign of a negative one orders the negatives below them. ``~``
    reverses any integer order without overflow. One integer comparison a step, where JAX's float
    comparator canonicalizes both operands on every comparison."""
    if x.dtype == jnp.bool_:
        key = x.astype(jnp.uint8)
    elif jnp.issubdtype(x.dtype, jnp.inexact):
        bits, int_dtype = _canonical_bits(x)
        key = jnp.where(bits < 0, bits ^ jnp.array(jnp.iinfo(int_dtype).max, int_dtype), bits)
    else:
        key = x
    return ~key if descending else key


def sort_permutation(x, axis, descending=False):
    """torch's stable sort order along ``axis`` (default-int indices): NaN after every number
    (before, when ``descending``), equal values (``-0.0 == 0.0``) in their positions' order. One
    integer key (``order_key``) and the positions: a pair sort."""
    axis = axis % x.ndim
    x = unsharded_along(x, (axis,))  # an Explicit mesh: XLA sorts along unsharded axes only
    iota = lax.broadcasted_iota(jnp.zeros((), int).dtype, x.shape, axis, out_sharding=explicit_sharding(x))
    return lax.sort((order_key(x, descending), iota), dimension=axis, num_keys=1, is_stable=True)[1]


GPU_TOP_K_KERNEL_MAX_K = 16  # XLA's GPU TopK kernel, taken up to this k, does not order NaN


def top_k_indices(x, k, axis, largest=True):
    """The positions of the first ``k`` entries of ``sort_permutation(x, axis, descending=largest)``
    (default-int indices) by ``lax.top_k``. A float input goes in as its canonical value
    (``_canonical_bits``), with the sign flipped for the smallest: ``lax.top_k``'s sort orders
    floats by their bits with the positive NaN last, and for 16-bit floats moves half the bytes
    of an integer key of 32 bits; an integer input goes in as ``order_key``. It asks for at
    least ``GPU_TOP_K_KERNEL_MAX_K + 1`` entries, so that a GPU sorts instead of taking its TopK
    kernel, and keeps the first ``k``; a line of no more entries takes the integer key's sort.
    ``lax.top_k`` puts the lower position first among equal values, as the stable sort does."""
    axis = axis % x.ndim
    if x.shape[axis] <= GPU_TOP_K_KERNEL_MAX_K:
        return lax.slice_in_dim(sort_permutation(x, axis, descending=largest), 0, k, axis=axis)
    x = unsharded_along(x, (axis,))  # an Explicit mesh: XLA selects along unsharded axes only
    if jnp.issubdtype(x.dtype, jnp.inexact):
        bits, int_dtype = _canonical_bits(x)
        if not largest:
            bits = bits ^ jnp.array(jnp.iinfo(int_dtype).min, int_dtype)
        key = lax.bitcast_convert_type(bits, x.dtype)
    else:
        key = order_key(x, descending=not largest)
    _, idx = lax.top_k(key, max(k, GPU_TOP_K_KERNEL_MAX_K + 1), axis=axis)
    return lax.slice_in_dim(idx, 0, k, axis=axis).astype(jnp.zeros((), int).dtype)


def cummaxmin_select(x, axis, largest):
    """torch's ``cummax`` (``largest``) / ``cummin``: ``(values, indices)``. A later entry
    replaces the running one when it is NaN or (the running one is not NaN and) it is ``>=``
    (``<=``): NaN propagates with the index of the latest NaN, ties take the later index. This is
    the maximum in the order (is NaN, +-value, index), hence associative (a parallel scan)."""
    index = lax.broadcasted_iota(jnp.zeros((), int).dtype, x.shape, axis, out_sharding=explicit_sharding(x))

    def combine(a, b):
        (va, ia), (vb, ib) = a, b
        better = vb >= va if largest else vb <= va
        take_b = jnp.isnan(vb) | (~jnp.isnan(va) & better)
        return jnp.where(take_b, vb, va), jnp.where(take_b, ib, ia)

    return lax.associative_scan(combine, (x, index), axis=axis)


QUANTILE_METHODS = ("linear", "lower", "higher", "midpoint", "nearest", "inverted_cdf")


def quantile_selection(x, q, method, ignore_nan):
    """The two order statistics each quantile reads and the weight of the upper one, for ``x``
    with the reduced axis last, ``(..., n)``, and ``q`` ``m`` numbers in [0, 1] (a tuple or a
    1-d array, traced or not):
    ``(lower index, upper index, weight)``, each ``(..., m)``, indices into ``x``'s last axis.

    torch's ``quantile_compute``: rank ``q (c - 1)`` in the stable NaN-last order, ``c`` the count
    of numbers (``ignore_nan``: nanquantile/nanmedian; 0 numbers read position 0) or ``n``, where
    a NaN in the slice moves the rank to the last position (a NaN: the result is NaN). ``linear``
    reads floor and ceil with weight ``rank - floor``; ``midpoint`` weight 1/2; ``lower``,
    ``higher`` and ``nearest`` (half to even, as torch and numpy) one position. ``inverted_cdf``
    (numpy's and jax.numpy's; torch has none) reads the one position ``ceil(q c) - 1`` clipped to
    ``[0, c - 1]``: the first order statistic whose empirical CDF ``(k + 1) / c`` reaches ``q``.
    The weight is 0 where both positions are one entry."""
    n = x.shape[-1]
    x = unsharded_along(x, (x.ndim - 1,))  # an Explicit mesh: the sort and reads along the axis
    perm = sort_permutation(x, -1)
    nan = jnp.isnan(x)
    if ignore_nan:
        count = n - jnp.sum(nan, axis=-1, keepdims=True)
    else:
        count = jnp.full(x.shape[:-1] + (1,), n)
    qs = with_rank(jnp.asarray(q, x.dtype), count.ndim)
    if method == "inverted_cdf":
        last = jnp.maximum(count - 1, 0).astype(x.dtype)
        rank = jnp.clip(jnp.ceil(qs * count.astype(x.dtype)) - 1, 0, last)
    else:
        rank = qs * jnp.maximum(count - 1, 0).astype(x.dtype)
    if not ignore_nan:
        rank = jnp.where(jnp.any(nan, axis=-1, keepdims=True), jnp.asarray(n - 1, x.dtype), rank)
    below, above = jnp.floor(rank), jnp.ceil(rank)
    if method == "linear":
        weight = rank - below
    elif method == "midpoint":
        weight = jnp.full_like(rank, 0.5)
    else:
        below = above = {"lower": below, "higher": above, "nearest": jnp.round(rank), "inverted_cdf": rank}[method]
        weight = jnp.zeros_like(rank)
    weight = jnp.where(below == above, 0, weight)
    lo = jnp.take_along_axis(perm, below.astype(perm.dtype), axis=-1)
    hi = jnp.take_along_axis(perm, above.astype(perm.dtype), axis=-1)
    return lo, hi, weight


def quantile_q_slope(x, lo, hi, method, ignore_nan):
    """The derivative of each quantile with respect to its ``q``, ``(..., m)``, for ``x`` with the
    reduced axis last and ``quantile_selection``'s ``lo``, ``hi``: for ``linear``, ``(c - 1)
    (x[hi] - x[lo])`` (the rank is ``q (c - 1)``, ``c`` the count of numbers), 0 where both
    ends are one entry (an integer rank, as jax.numpy's derivative there, or a NaN in the slice);
    0 for the other methods, which are piecewise constant in ``q``."""
    if method != "linear":
        return jnp.zeros(lo.shape, x.dtype)
    x = unsharded_along(x, (x.ndim - 1,))  # an Explicit mesh: reads along the axis
    n = x.shape[-1]
    count = n - jnp.sum(jnp.isnan(x), axis=-1, keepdims=True) if ignore_nan else jnp.full(x.shape[:-1] + (1,), n)
    a, b = jnp.take_along_axis(x, lo, axis=-1), jnp.take_along_axis(x, hi, axis=-1)
    return jnp.where(lo == hi, 0, jnp.maximum(count - 1, 0).astype(x.dtype) * (b - a))


def lerp_selected(x, lo, hi, weight):
    """``x[lo] + weight (x[hi] - x[lo])`` along the last axis (torch's ``lerp``: from the upper
    end for weights >= 1/2), exactly ``x[lo]`` where the two ends are equal. With one infinite
    end the limit of ``(1 - w) a + w b``: that end's infinity for ``0 < w < 1``, the end itself
    at ``w`` 0 or 1 (torch's and NumPy's forms give ``inf - inf = NaN`` there; NaN stays for
    ends of opposite infinities)."""
    x = unsharded_along(x, (x.ndim - 1,))  # an Explicit mesh: reads along the axis
    a = jnp.take_along_axis(x, lo, axis=-1)
    b = jnp.take_along_axis(x, hi, axis=-1)
    mixed = jnp.where(weight < 0.5, a + weight * (b - a), b - (b - a) * (1 - weight))
    limit = jnp.where(weight == 0, a, jnp.where(weight == 1, b, a * (1 - weight) + b * weight))
    mixed = jnp.where(jnp.isinf(a) | jnp.isinf(b), limit, mixed)
    return jnp.where((lo == hi) | (a == b), a, mixed)
