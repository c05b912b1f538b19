"""Sorting and order statistics with torch's conventions: ``sort``, ``argsort``, ``topk``,
``cummax``, ``cummin``, ``nanmedian`` and ``quantile`` (public through ``jaxrules.numpy``).
Primal, residuals, JVP and VJP formulas of each, side by side (gathered in ``jvp_rules`` /
``vjp_rules``), the selection rules in ``partials.sorting``.

torch 2.13's orders, checked on the CPU: NaN sorts after every number (first when descending,
and as the largest for topk); sort (``stable=True``) keeps equal values in position order;
cummax/cummin take the later index among equal values, and a NaN propagates with the index of
the latest NaN; quantile reads the stable NaN-last order (a NaN in the slice: the last entry,
a NaN); nanmedian is the lower median of the numbers."""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike, DTypeLike

from jaxrules import _validate as V
from jaxrules import partials as P
from jaxrules._namespace import exported_as
from jaxrules.checking import runtime_check
from jaxrules.mechanism import define_op, unsharded_along
from jaxrules.ops.reductions import ValuesIndices, _real, nan_of_empty

# ----------------------------------------------------------------------------------------------
# Ops

def _save_indices(out, x, **_):
    return out[1]


def _sort_primal(x, *, axis, descending, shape):
    perm = P.sort_permutation(x, axis, descending)
    return jnp.take_along_axis(x, perm, axis=axis), perm


def _topk_primal(x, *, k, axis, largest, shape):
    idx = P.top_k_indices(x, k, axis, largest)
    return jnp.take_along_axis(x, idx, axis=axis), idx


def _quantile_primal(x, q, *, method, ignore_nan, shape):
    lo, hi, w = P.quantile_selection(x, q, method, ignore_nan)
    return P.lerp_selected(x, lo, hi, w), lo


def sort_jvp(idx, tx, *, axis, **_):
    """The tangent read at the selected indices, ``gather(t, axis, idx)`` (seed sort's and
    topk's ``gather_with_keepdimed_indices``); the indices have no tangent. sort and topk."""
    return jnp.take_along_axis(tx, idx, axis=axis), None


def sort_vjp(idx, ct, *, axis, shape, **_):
    """Seed ``value_selecting_reduction_backward(grad, dim, indices, sizes, keepdim=true)`` (sort
    and topk in derivatives.yaml): each cotangent added at its entry's index."""
    g, _ = ct
    return (P.scatter_add(shape, P.scatter_coords(idx, axis), g),)


sort_op = define_op("sort", _sort_primal, sort_jvp, sort_vjp, _save_indices)
topk_op = define_op("topk", _topk_primal, sort_jvp, sort_vjp, _save_indices)


# cummax/cummin's forward formula in derivatives.yaml, ``t.gather(axis, indices)`` (the transpose
# of ``cummaxmin_backward``), is sort's.
cummaxmin_jvp = sort_jvp


# Seed ``cummaxmin_backward``, ``zeros.scatter_add(axis, indices, grad)`` (an entry that stays the
# running extremum collects the cotangents of all the outputs it is), is sort's formula.
cummaxmin_vjp = sort_vjp


cummax_op = define_op(
    "cummax", lambda x, *, axis, shape: P.cummaxmin_select(x, axis, largest=True), cummaxmin_jvp, cummaxmin_vjp,
    _save_indices,
)
cummin_op = define_op(
    "cummin", lambda x, *, axis, shape: P.cummaxmin_select(x, axis, largest=False), cummaxmin_jvp, cummaxmin_vjp,
    _save_indices,
)


def quantile_jvp(res, tx, tq, **_):
    """``(1 - w) t[lo] + w t[hi] + s tq`` along the last axis: torch's quantile is ``lerp`` of two
    sorted entries with a weight that depends on ``q`` and the count only (seed: the derivatives
    of ``sort`` and ``lerp`` that torch's composite quantile chains); ``s`` is the derivative with
    respect to ``q`` (``partials.quantile_q_slope``: a traced ``q``; torch's ``q`` takes none);
    the indices have no tangent. quantile and nanmedian."""
    lo, hi, w, slope = res
    out = None
    if tx is not None:
        tx = unsharded_along(tx, (tx.ndim - 1,))  # an Explicit mesh: reads along the axis
        out = (1 - w) * jnp.take_along_axis(tx, lo, axis=-1) + w * jnp.take_along_axis(tx, hi, axis=-1)
    if tq is not None:
        out = slope * tq if out is None else out + slope * tq
    return out, None


def quantile_vjp(res, ct, *, shape, **_):
    """The transpose of ``quantile_jvp``: ``(1 - w) ct`` added at ``lo`` and ``w ct`` at ``hi``
    (torch: ``lerp``'s backward then sort's ``value_selecting_reduction_backward``), and
    ``sum(s ct)`` over the rows for ``q``."""
    lo, hi, w, slope = res
    g, _ = ct
    gx = P.scatter_add(shape, P.scatter_coords(lo, lo.ndim - 1), (1 - w) * g)
    gq = jnp.sum(slope * g, axis=tuple(range(g.ndim - 1)))
    return gx + P.scatter_add(shape, P.scatter_coords(hi, hi.ndim - 1), w * g), gq


def _quantile_residuals(out, x, q, *, method, ignore_nan, shape):
    lo, hi, w = P.quantile_selection(x, q, method, ignore_nan)
    return lo, hi, w, P.quantile_q_slope(x, lo, hi, method, ignore_nan)


quantile_op = define_op("quantile", _quantile_primal, quantile_jvp, quantile_vjp, _quantile_residuals)


# ----------------------------------------------------------------------------------------------
# Public functions

def _flag(op, name, value):
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{op}: {name} must be a bool, got {value!r}")
    return bool(value)


def _is_complex(a):
    """Whether ``a`` is complex: ``sort``/``argsort`` then run jax.numpy's (lexicographic: real
    parts, then imaginary parts; torch does not sort complex numbers)."""
    return jnp.iscomplexobj(a) and not isinstance(a, str | bytes)


def _sort_input(op, a, axis, kind, order, stable, descending):
    V.unsupported(op, kind=kind, order=order)
    _flag(op, "stable", stable)
    descending = _flag(op, "descending", descending)
    x = _real(op, a)
    if axis is None:
        return x.ravel(), 0, descending
    return (x.reshape(1), 0, descending) if x.ndim == 0 else (x, V.single_axis(op, x.ndim, axis), descending)


@exported_as("jaxrules.numpy.sort")
def sort(a: ArrayLike, axis: int | None = -1, *, kind: None = None, order: None = None, stable: bool = True, descending: bool = False) -> Array:
    """``jax.numpy.sort`` (flattened for ``axis=None``) in torch's order: NaN last (first when
    ``descending``), equal values by position (always stable). VJP: each cotangent back to its
    entry's position (seed sort's ``value_selecting_reduction_backward``); JVP the tangent
    permuted alike. Integer and boolean input is sorted without a derivative. Mirrors
    ``torch.sort(stable=True)`` (its values).

    Args:
        a: the array. Complex: ``jax.numpy.sort`` itself (lexicographic, its derivative).
        axis: one axis (an int); None sorts the flattened array.
        kind: not supported: must be None (``TypeError`` otherwise).
        order: not supported: must be None (``TypeError`` otherwise).
        stable: a bool; the sort is always stable, so False changes nothing.
        descending: a bool (torch's argument): largest first, NaN first.

    Returns:
        The sorted array, of ``a``'s shape (1-d when ``axis`` is None).
    """
    if _is_complex(a):
        V.unsupported("sort", kind=kind, order=order)
        return jnp.sort(a, axis, stable=_flag("sort", "stable", stable),
                        descending=_flag("sort", "descending", descending))
    shape = jnp.shape(a)
    x, ax, descending = _sort_input("sort", a, axis, kind, order, stable, descending)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        out = jnp.take_along_axis(x, P.sort_permutation(x, ax, descending), axis=ax)
    else:
        out = sort_op(x, axis=ax, descending=descending, shape=x.shape)[0]
    return out.reshape(shape) if len(shape) == 0 and axis is not None else out  # axis=None: flattened, (1,)


@exported_as("jaxrules.numpy.argsort")
def argsort(a: ArrayLike, axis: int | None = -1, *, kind: None = None, order: None = None, stable: bool = True, descending: bool = False, dtype: DTypeLike | None = None) -> Array:
    """``jax.numpy.argsort``: the permutation ``sort`` applies (torch's order, always stable);
    integer output, no derivative. Mirrors ``torch.argsort(stable=True)``.

    Args:
        a: the array. Complex: ``jax.numpy.argsort`` itself (lexicographic order).
        axis: one axis (an int); None: the permutation of the flattened array.
        kind: not supported: must be None (``TypeError`` otherwise).
        order: not supported: must be None (``TypeError`` otherwise).
        stable: a bool; the sort is always stable, so False changes nothing.
        descending: a bool (torch's argument): indices of the largest first, NaN first.
        dtype: the indices' dtype; None: JAX's default index dtype.

    Returns:
        The indices that sort ``a`` along ``axis``, of ``a``'s shape (1-d when ``axis`` is None).
    """
    if _is_complex(a):
        V.unsupported("argsort", kind=kind, order=order)
        perm = jnp.argsort(a, axis, stable=_flag("argsort", "stable", stable),
                           descending=_flag("argsort", "descending", descending))
        return perm if dtype is None else perm.astype(dtype)
    shape = jnp.shape(a)
    x, ax, descending = _sort_input("argsort", a, axis, kind, order, stable, descending)
    perm = P.sort_permutation(x, ax, descending)
    perm = perm.reshape(shape) if len(shape) == 0 and axis is not None else perm
    return perm if dtype is None else perm.astype(dtype)


def _count(op, name, value, high):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= high:
        raise ValueError(f"{op}: {name} must be an integer in [0, {high}], got {value!r}")
    return int(value)


def _single_axis_input(op, x, axis, name="x"):
    """``x`` (integer and boolean input kept, as torch keeps it) and its one normalized axis."""
    x = _real(op, x, name)
    x = x.reshape(1) if x.ndim == 0 else x
    return x, V.single_axis(op, x.ndim, axis)


def _scalar_like_input(result, x):
    """``(values, indices)`` back to 0-d for a 0-d input (torch's shapes; computed as shape (1,))."""
    return ValuesIndices(*(r.reshape(()) for r in result)) if jnp.ndim(x) == 0 else ValuesIndices(*result)


@exported_as("jaxrules.numpy.topk")
def topk(x: ArrayLike, k: int, axis: int = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:  # noqa: A002
    """torch.topk: the ``k`` largest (``largest=False``: smallest) entries along ``axis`` and
    their indices, always in sorted order (torch's ``sorted=False`` order is unspecified). NaN
    counts as the largest, as in torch. Among equal values the earlier position comes first
    (torch 2.13's CPU choice depends on its partial sort: ``topk([3, 1, 3, 3], 2)`` gives indices
    ``[2, 3]``). The derivative goes to the returned indices (seed
    ``value_selecting_reduction_backward``). Mirrors ``torch.topk``.

    Args:
        x: the array, real (complex raises ``TypeError``); integer and boolean input is kept,
            without a derivative. A 0-d array counts as shape (1,).
        k: how many entries, a Python int in ``[0, x.shape[axis]]`` (``ValueError`` otherwise).
        axis: one axis (an int).
        largest: a bool: the largest (True) or the smallest (False) entries.
        sorted: a bool; the result is always sorted (largest first, or smallest first).

    Returns:
        A ``ValuesIndices`` named tuple ``(values, indices)``, ``axis`` of length ``k``.
    """
    x_in, (x, ax) = x, _single_axis_input("topk", x, axis)
    k = _count("topk", "k", k, x.shape[ax])
    _flag("topk", "sorted", sorted)
    largest = _flag("topk", "largest", largest)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return _scalar_like_input(_topk_primal(x, k=k, axis=ax, largest=largest, shape=x.shape), x_in)
    return _scalar_like_input(topk_op(x, k=k, axis=ax, largest=largest, shape=x.shape), x_in)


@exported_as("jaxrules.numpy.cummax")
def cummax(x: ArrayLike, axis: int) -> ValuesIndices:
    """torch.cummax: the running maximum along ``axis`` and its index. Among equal values the
    later index (torch's rule); NaN propagates with the index of the latest NaN. The derivative of
    each output goes to its index (seed ``cummaxmin_backward``). Mirrors ``torch.cummax``.

    Args:
        x: the array, real (complex raises ``TypeError``); integer and boolean input is kept,
            without a derivative.
        axis: one axis (an int; required).

    Returns:
        A ``ValuesIndices`` named tuple ``(values, indices)``, each of ``x``'s shape.
    """
    x_in, (x, ax) = x, _single_axis_input("cummax", x, axis)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return _scalar_like_input(P.cummaxmin_select(x, ax, largest=True), x_in)
    return _scalar_like_input(cummax_op(x, axis=ax, shape=x.shape), x_in)


@exported_as("jaxrules.numpy.cummin")
def cummin(x: ArrayLike, axis: int) -> ValuesIndices:
    """torch.cummin: the running minimum and its index (later index among equal values; NaN
    propagates with the latest NaN's index); seed ``cummaxmin_backward``. Mirrors
    ``torch.cummin``.

    Args:
        x: the array, real (complex raises ``TypeError``); integer and boolean input is kept,
            without a derivative.
        axis: one axis (an int; required).

    Returns:
        A ``ValuesIndices`` named tuple ``(values, indices)``, each of ``x``'s shape.
    """
    x_in, (x, ax) = x, _single_axis_input("cummin", x, axis)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return _scalar_like_input(P.cummaxmin_select(x, ax, largest=False), x_in)
    return _scalar_like_input(cummin_op(x, axis=ax, shape=x.shape), x_in)


def _quantiles(op, q, top=1):
    """``q``, numbers in ``[0, top]`` (1 for quantiles, 100 for percentiles): a NumPy array when
    concrete (checked), else the traced array (its range checked at run time:
    ``jaxrules.checked`` raises)."""
    if isinstance(q, jax.core.Tracer):
        if not (jnp.issubdtype(q.dtype, jnp.integer) or jnp.issubdtype(q.dtype, jnp.floating)):
            raise TypeError(f"{op}: q must be real numbers, got {q.dtype}")
        runtime_check(~((q >= 0) & (q <= top)), f"{op}: q must be in [0, {top}] (a traced value)")
        return q
    try:
        qa = np.asarray(q, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: q must be a number or an array of numbers, got {q!r}") from None
    if not np.all((qa >= 0) & (qa <= top)):
        raise ValueError(f"{op}: q must be in [0, {top}], got {q!r}")
    return qa


def _reduce_last(op, x, axis, keepdims):
    """``x`` with the reduced axes moved last and flattened into one, and a function putting the
    ``(..., m)`` result into jax.numpy's shape ``q.shape + reduced shape``."""
    axes = V.axes(op, x.ndim, axis)
    rest = [d for d in range(x.ndim) if d not in axes]
    n = int(np.prod([x.shape[d] for d in axes]))
    if n == 0:
        raise ValueError(f"{op}: reduction over zero-size axes {axis!r} of shape {x.shape}")
    flat = jnp.transpose(x, rest + list(axes)).reshape(tuple(x.shape[d] for d in rest) + (n,))
    kept = tuple(1 if d in axes else x.shape[d] for d in range(x.ndim)) if keepdims else tuple(x.shape[d] for d in rest)

    def finish(out, qshape):
        return jnp.moveaxis(out, -1, 0).reshape(qshape + kept)

    return flat, finish


@exported_as("jaxrules.numpy.quantile")
def quantile(a: ArrayLike, q: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, out: None = None, overwrite_input: bool = False, method: str = "linear", keepdims: bool = False, *, weights: ArrayLike | None = None) -> Array:
    """``jax.numpy.quantile`` with torch's derivative: torch's ``quantile`` is ``lerp`` of two
    entries of the sorted slice, so the derivative goes to those two order statistics, ``1 - w``
    and ``w`` for ``linear`` (``w`` the rank's fraction; 1/2 each for ``midpoint``; all to one
    for ``lower``, ``higher``, ``nearest`` and ``inverted_cdf``). Equal values are ordered by
    position; a NaN in the slice gives NaN and the derivative goes to its last NaN (torch's rank
    ``n - 1``). A traced ``q`` (``jit``, ``vmap``, ``grad``) has the derivative of torch's and
    jax.numpy's composite forms, ``(n - 1)(x[hi] - x[lo])`` for ``linear`` (0 at an integer rank)
    and 0 for the other methods. ``nearest`` rounds half to even as torch and numpy do (jax.numpy
    0.10 rounds half down). Mirrors ``torch.quantile``.

    Args:
        a: the array, real (complex raises ``TypeError``; integer and boolean input is
            promoted to float).
        q: the quantile(s), a number or an array of numbers in ``[0, 1]`` (``ValueError``
            otherwise); a traced ``q`` is checked at run time (``jaxrules.checking.runtime_check``).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes); not
            zero-size (``ValueError``).
        out: not supported: must be None (``TypeError`` otherwise).
        overwrite_input: accepted for NumPy compatibility and ignored.
        method: ``"linear"``, ``"lower"``, ``"higher"``, ``"midpoint"``, ``"nearest"`` or
            ``"inverted_cdf"`` (numpy's and jax.numpy's, which torch lacks: the order statistic
            at position ``ceil(q n) - 1``, clipped to ``[0, n - 1]``).
        keepdims: keep the reduced axes with length 1.
        weights: None, or per-entry weights: then ``jax.numpy.quantile(..., weights=)`` runs
            (its values, errors and derivatives: JAX's; it takes only ``"inverted_cdf"``, which
            torch lacks, and raises ``NotImplementedError`` for the other methods).

    Returns:
        The quantiles, of shape ``q.shape`` followed by the reduced shape of ``a``.
    """
    return _quantile_family("quantile", a, q, axis, out, method, keepdims, weights, ignore_nan=False, top=1)


def _quantile_family(op, a, q, axis, out, method, keepdims, weights, *, ignore_nan, top):
    """``quantile`` (``top`` 1) and ``percentile`` (``top`` 100, ``q / 100``), their ``nan``
    forms with ``ignore_nan``: the quantile op over the reduced axes; with ``weights``,
    jax.numpy's ``op`` as is."""
    V.unsupported(op, out=out)
    if weights is not None:  # no torch counterpart: jax.numpy's weighted quantile as is
        return getattr(jnp, op)(a, q, tuple(axis) if isinstance(axis, list) else axis, method=method,
                                keepdims=keepdims, weights=weights)
    if method not in P.QUANTILE_METHODS:
        raise ValueError(f"{op}: method must be one of {P.QUANTILE_METHODS}, got {method!r}")
    qa = _quantiles(op, q, top)
    x = V.array(op, "a", _real(op, a))
    flat, finish = _reduce_last(op, x, axis, bool(keepdims))
    qs = jnp.ravel(qa).astype(flat.dtype) / top
    values, _ = quantile_op(flat, qs, method=method, ignore_nan=ignore_nan, shape=flat.shape)
    return finish(values, qa.shape)


@exported_as("jaxrules.numpy.nanquantile")
def nanquantile(a: ArrayLike, q: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, out: None = None, overwrite_input: bool = False, method: str = "linear", keepdims: bool = False, *, weights: ArrayLike | None = None) -> Array:
    """``quantile`` of the numbers, NaN ignored (an all-NaN slice gives NaN): ranks ``q (c - 1)``
    among the ``c`` numbers, the derivative to the two order statistics read (``quantile``'s).
    Mirrors ``torch.nanquantile``; ``jax.numpy.nanquantile``'s arguments.

    Args:
        a: the array, real (complex raises ``TypeError``; integer and boolean input is
            promoted to float).
        q: the quantile(s), numbers in ``[0, 1]``, concrete or traced (as ``quantile``'s).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes); not
            zero-size (``ValueError``).
        out: not supported: must be None (``TypeError`` otherwise).
        overwrite_input: accepted for NumPy compatibility and ignored.
        method: as ``quantile``'s.
        keepdims: keep the reduced axes with length 1.
        weights: None, or per-entry weights: then jax.numpy's function runs, as in ``quantile``.

    Returns:
        The quantiles of the numbers, of shape ``q.shape`` followed by the reduced shape of ``a``.

    Example:
        >>> import jax.numpy as jnp, jaxrules.numpy as rnp
        >>> print(rnp.nanquantile(jnp.array([3.0, jnp.nan, 1.0, 2.0]), 0.5))
        2.0
    """
    return _quantile_family("nanquantile", a, q, axis, out, method, keepdims, weights, ignore_nan=True, top=1)


@exported_as("jaxrules.numpy.percentile")
def percentile(a: ArrayLike, q: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, out: None = None, overwrite_input: bool = False, method: str = "linear", keepdims: bool = False, *, weights: ArrayLike | None = None, out_sharding: None = None) -> Array:
    """``quantile(a, q / 100)``, ``q`` in ``[0, 100]`` (its derivatives, torch's); mirrors
    ``jax.numpy.percentile``.

    Args:
        a: the array, real (complex raises ``TypeError``; integer and boolean input is
            promoted to float).
        q: the percentile(s), numbers in ``[0, 100]``, concrete or traced.
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes); not
            zero-size (``ValueError``).
        out: not supported: must be None (``TypeError`` otherwise).
        overwrite_input: accepted for NumPy compatibility and ignored.
        method: as ``quantile``'s.
        keepdims: keep the reduced axes with length 1.
        weights: None, or per-entry weights: then jax.numpy's function runs, as in ``quantile``.
        out_sharding: must be None (``ValueError`` otherwise).

    Returns:
        The percentiles, of shape ``q.shape`` followed by the reduced shape of ``a``.
    """
    V.unhonoured("percentile", out_sharding=out_sharding)
    return _quantile_family("percentile", a, q, axis, out, method, keepdims, weights, ignore_nan=False, top=100)


@exported_as("jaxrules.numpy.nanpercentile")
def nanpercentile(a: ArrayLike, q: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, out: None = None, overwrite_input: bool = False, method: str = "linear", keepdims: bool = False, *, weights: ArrayLike | None = None) -> Array:
    """``nanquantile(a, q / 100)``, ``q`` in ``[0, 100]``; mirrors ``jax.numpy.nanpercentile``.

    Args:
        a: the array, real (complex raises ``TypeError``; integer and boolean input is
            promoted to float).
        q: the percentile(s), numbers in ``[0, 100]``, concrete or traced.
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes); not
            zero-size (``ValueError``).
        out: not supported: must be None (``TypeError`` otherwise).
        overwrite_input: accepted for NumPy compatibility and ignored.
        method: as ``quantile``'s.
        keepdims: keep the reduced axes with length 1.
        weights: None, or per-entry weights: then jax.numpy's function runs, as in ``quantile``.

    Returns:
        The percentiles of the numbers, of shape ``q.shape`` followed by the reduced shape of
        ``a``.
    """
    return _quantile_family("nanpercentile", a, q, axis, out, method, keepdims, weights, ignore_nan=True, top=100)


@exported_as("jaxrules.numpy.nanmedian")
def nanmedian(a: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, out: None = None, overwrite_input: bool = False, keepdims: bool = False, *, return_indices: bool = False) -> Array | ValuesIndices:
    """``jax.numpy.nanmedian``: the median of the numbers (NaN ignored; all NaN: NaN), the mean
    of the two middle ones for an even count, each getting half the derivative (the middle
    entries only, equal values ordered by position). With ``return_indices=True``, torch's
    ``nanmedian(dim)``: the lower middle number along one ``axis`` and its index, the derivative
    to that index only (seed ``value_selecting_reduction_backward``); an all-NaN slice gives NaN
    and index 0 (torch 2.13's CPU index there is what its nth_element leaves: 0 for up to 3
    entries, 2 for 4 or 5, 3 for 6, 5 for 7). Mirrors ``torch.nanmedian`` (numpy's even-count
    convention without ``return_indices``).

    Args:
        a: the array, real (complex raises ``TypeError``; integer and boolean input is
            promoted to float).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes); with
            ``return_indices``, one axis (an int). Zero-size: NaN (as torch), except with
            ``return_indices`` (``ValueError``).
        out: not supported: must be None (``TypeError`` otherwise).
        overwrite_input: accepted for NumPy compatibility and ignored.
        keepdims: keep the reduced axes with length 1.
        return_indices: return torch's ``(values, indices)`` along ``axis``.

    Returns:
        The median of the non-NaN entries, or with ``return_indices`` a ``ValuesIndices`` named
        tuple ``(values, indices)``.
    """
    V.unsupported("nanmedian", out=out)
    x = V.array("nanmedian", "a", _real("nanmedian", a))
    if not return_indices:
        if x.size == 0:
            return nan_of_empty(x, V.axes("nanmedian", x.ndim, axis), keepdims)
        flat, finish = _reduce_last("nanmedian", x, axis, bool(keepdims))
        values, _ = quantile_op(flat, jnp.full(1, 0.5, flat.dtype), method="linear", ignore_nan=True, shape=flat.shape)
        return finish(values, ())
    scalar = x.ndim == 0  # torch: a 0-d input's axis 0 has length 1, and the result stays 0-d
    x, ax = _single_axis_input("nanmedian", x, axis, "a")
    if x.shape[ax] == 0:
        raise ValueError(f"nanmedian: axis {axis} has length 0")
    moved = jnp.moveaxis(x, ax, -1)
    values, indices = quantile_op(moved, jnp.full(1, 0.5, moved.dtype), method="lower", ignore_nan=True,
                                  shape=moved.shape)
    values, indices = jnp.moveaxis(values, -1, ax), jnp.moveaxis(indices, -1, ax)
    if not keepdims or scalar:
        values, indices = jnp.squeeze(values, ax), jnp.squeeze(indices, ax)
    return ValuesIndices(values, indices)
