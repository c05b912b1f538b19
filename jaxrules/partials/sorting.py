"""Sorting (sort, topk, cummax/cummin, nanmedian, quantile). Part of ``jaxrules.partials``."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from jaxrules.mechanism import explicit_sharding, unsharded_along
from jaxrules.partials.elementwise import with_rank

__all__ = [  # the helpers jaxrules.partials re-exports (formulas write P.<name>)
    "QUANTILE_METHODS", "cummaxmin_select", "lerp_selected", "quantile_q_slope", "quantile_selection",
    "sort_permutation",
]

# ----------------------------------------------------------------------------------------------
# Sorting (sort, topk, cummax/cummin, nanmedian, quantile)


def sort_permutation(x, axis, descending=False):
    """torch's stable sort order along ``axis`` (default-int indices): NaN after every number
    (before, when ``descending``), equal values (``-0.0 == 0.0``) in their positions' order."""
    axis = axis % x.ndim
    x = unsharded_along(x, (axis,))  # an Explicit mesh: XLA sorts along unsharded axes only
    nan = jnp.isnan(x)
    value = jnp.where(nan | (x == 0), jnp.zeros((), x.dtype), x)  # XLA's total order splits -0.0 and 0.0
    if descending:  # ~ reverses integer and boolean order without overflow
        value = -value if jnp.issubdtype(x.dtype, jnp.inexact) else ~value
    first, second = (~nan, value) if descending else (nan, value)
    iota = lax.broadcasted_iota(jnp.zeros((), int).dtype, x.shape, axis, out_sharding=explicit_sharding(x))
    return lax.sort((first, second, iota), dimension=axis, num_keys=2, is_stable=True)[2]


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
