"""Shape and indexing ops of ``jaxrules.numpy`` (jax.numpy's names and signatures): each is
linear, so its JVP formula, beside it, is the op applied to the tangents and its VJP formula
the seed's backward (split, unbind, scatter-add, mask, slice)."""

from __future__ import annotations

import inspect
import itertools
import numbers
import operator
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.typing import ArrayLike, DTypeLike

from jaxrules import _validate as V
from jaxrules import partials as P
from jaxrules._namespace import exported_as
from jaxrules.mechanism import concrete_value, define_op, explicit_sharding, unsharded_along
from jaxrules.ops import reductions

# ----------------------------------------------------------------------------------------------
# Ops

def _save_nothing(out, *arrays, **_):
    """Linear ops: the formulas read no residual."""
    return ()


def _present_dtype(tangents):
    return next(t.dtype for t in tangents if t is not None)


def concatenate_jvp(_, *tangents, axis, shapes):
    """The tangents concatenated (zeros for absent ones)."""
    dtype = _present_dtype(tangents)
    return jnp.concatenate([jnp.zeros(s, dtype) if t is None else t for t, s in zip(tangents, shapes)], axis=axis)


def concatenate_vjp(_, ct, *, axis, shapes):
    """Seed ``cat_tensors_backward``: ``ct`` split back into the pieces."""
    bounds = list(itertools.accumulate(s[axis] for s in shapes))[:-1]
    return tuple(jnp.split(ct, bounds, axis=axis))


concatenate_op = define_op("concatenate", lambda *xs, axis, shapes: jnp.concatenate(xs, axis=axis), concatenate_jvp, concatenate_vjp, _save_nothing)


def stack_jvp(_, *tangents, axis, shape):
    """The tangents stacked (zeros for absent ones)."""
    dtype = _present_dtype(tangents)
    return jnp.stack([jnp.zeros(shape, dtype) if t is None else t for t in tangents], axis=axis)


def stack_vjp(_, ct, *, axis, shape):
    """Seed ``stack_tensors_backward``: ``ct`` unbound along ``axis``."""
    return tuple(jnp.take(ct, k, axis=axis) for k in range(ct.shape[axis]))


stack_op = define_op("stack", lambda *xs, axis, shape: jnp.stack(xs, axis=axis), stack_jvp, stack_vjp, _save_nothing)


def take_along_axis_jvp(indices, tx, _, *, axis, shape):
    """``take_along_axis(dx, indices)``."""
    return jnp.take_along_axis(tx, indices, axis=axis)


def take_along_axis_vjp(indices, ct, *, axis, shape):
    """Seed ``gather_backward``: ``ct`` scatter-added at the gathered positions (duplicates
    accumulate), into ``arr`` broadcast against ``indices`` off ``axis`` (the mechanism sums the
    broadcast dimensions back, torch's ``sum_to``; one index per line: a select,
    ``P.scatter_add``)."""
    target = ct.shape[:axis] + (shape[axis],) + ct.shape[axis + 1 :]
    return P.scatter_add(target, P.scatter_coords(jnp.broadcast_to(indices, ct.shape), axis), ct), None


take_along_axis_op = define_op("take_along_axis", lambda x, indices, *, axis, shape: jnp.take_along_axis(x, indices, axis=axis), take_along_axis_jvp, take_along_axis_vjp, lambda out, x, indices, **_: indices)


def masked_fill_jvp(mask, tx, _, **__):
    """``dx`` where the mask is false, 0 under it."""
    return jnp.where(mask, 0, tx)


def masked_fill_vjp(mask, ct, **_):
    """Seed ``masked_fill`` backward: ``ct`` where the mask is false (the fill value is a
    constant)."""
    return jnp.where(mask, 0, ct), None


masked_fill_op = define_op("masked_fill", lambda x, mask, *, value: jnp.where(mask, jnp.asarray(value, x.dtype), x), masked_fill_jvp, masked_fill_vjp, lambda out, x, mask, **_: mask)


def pad_jvp(_, tx, *, widths, value):
    """``pad(dx)`` (zero fill; a negative width crops)."""
    return jax.lax.pad(tx, jnp.zeros((), tx.dtype), [(lo, hi, 0) for lo, hi in widths])


def pad_vjp(_, ct, *, widths, value):
    """Seed ``constant_pad_nd_backward``: ``ct`` padded by the negated widths (the interior slice
    of ``ct`` for positive widths, zeros where a negative width cropped)."""
    return (lax.pad(ct, jnp.zeros((), ct.dtype), [(-lo, -hi, 0) for lo, hi in widths]),)


# widths of either sign: a negative width crops (torch's constant_pad_nd), which jaxrules.torch's pad uses
pad_op = define_op("pad", lambda x, *, widths, value: jax.lax.pad(x, jnp.asarray(value, x.dtype), [(lo, hi, 0) for lo, hi in widths]),
                   pad_jvp, pad_vjp, _save_nothing)


def split_jvp(_, tx, *, axis, sizes):
    """The tangent split like ``x``."""
    return tuple(jnp.split(tx, list(itertools.accumulate(sizes))[:-1], axis=axis))


def _piece_shape(ct):
    return next(c.shape for c in ct if c is not None)


def split_vjp(_, ct, *, axis, sizes):
    """Seed ``split_backward``: the cotangents concatenated (zeros for absent pieces)."""
    dtype = next(c.dtype for c in ct if c is not None)
    shape = lambda n: tuple(n if d == axis else s for d, s in enumerate(_piece_shape(ct)))  # noqa: E731
    return (jnp.concatenate([jnp.zeros(shape(n), dtype) if c is None else c for c, n in zip(ct, sizes)], axis=axis),)


split_op = define_op("split", lambda x, *, axis, sizes: tuple(jnp.split(x, list(itertools.accumulate(sizes))[:-1], axis=axis)), split_jvp, split_vjp, _save_nothing)


def unstack_jvp(_, tx, *, axis):
    """The tangent unstacked along ``axis``."""
    return tuple(jnp.moveaxis(tx, axis, 0))


def unstack_vjp(_, ct, *, axis):
    """Seed ``unbind_backward``: the cotangents stacked (zeros for absent ones)."""
    like = next(c for c in ct if c is not None)
    return (jnp.stack([jnp.zeros_like(like) if c is None else c for c in ct], axis=axis),)


unstack_op = define_op("unstack", lambda x, *, axis: tuple(jnp.moveaxis(x, axis, 0)), unstack_jvp, unstack_vjp, _save_nothing)


def block_diag_jvp(_, *tangents, shapes):
    """``block_diag`` of the tangents (zero blocks for absent ones)."""
    dtype = _present_dtype(tangents)
    return jax.scipy.linalg.block_diag(*(jnp.zeros(s, dtype) if t is None else t for t, s in zip(tangents, shapes)))


def block_diag_vjp(_, ct, *, shapes):
    """Seed ``block_diag_backward``: each input gets its diagonal block of ``ct``."""
    out, row, col = [], 0, 0
    for shape in shapes:
        r, c = (1, shape[0]) if len(shape) == 1 else ((1, 1) if not shape else shape)
        out.append(ct[row : row + r, col : col + c].reshape(shape))
        row, col = row + r, col + c
    return tuple(out)


block_diag_op = define_op("block_diag", lambda *xs, shapes: jax.scipy.linalg.block_diag(*xs), block_diag_jvp, block_diag_vjp, _save_nothing)


def tile_jvp(_, tx, *, reps, shape):
    """``tile(dx, reps)``."""
    return jnp.tile(tx, reps)


def tile_vjp(_, ct, *, reps, shape):
    """Seed ``repeat_backward`` (torch's ``repeat`` is numpy's ``tile``): the tiled copies summed."""
    full = (1,) * (ct.ndim - len(shape)) + tuple(shape)
    reps = (1,) * (ct.ndim - len(reps)) + tuple(reps)
    split_shape = tuple(v for r, s in zip(reps, full) for v in (r, s))
    sharding = explicit_sharding(ct)
    spec = None if sharding is None else tuple(sharding.spec) + (None,) * ct.ndim
    if spec is not None and all(e is None or r == 1 for r, e in zip(reps, spec)):
        # An Explicit mesh: an axis not tiled keeps its sharding (the copies' axes have none)
        out = jax.sharding.PartitionSpec(*(v for e in spec[: ct.ndim] for v in (None, e)))
        split = lax.reshape(ct, split_shape, out_sharding=out)
    else:
        split = ct.reshape(split_shape)
    summed = split.sum(axis=tuple(range(0, split.ndim, 2)))
    return (summed.reshape(shape),)


tile_op = define_op("tile", lambda x, *, reps, shape: jnp.tile(x, reps), tile_jvp, tile_vjp, _save_nothing)


def repeat_jvp(_, tx, *, counts, axis):
    """``repeat(dx, counts, axis)``."""
    return P.repeat_along(tx, counts, axis)


def repeat_vjp(_, ct, *, counts, axis):
    """Seed ``repeat_interleave`` backward: each entry's copies summed."""
    return (P.sum_repeats(ct, counts, axis),)


repeat_op = define_op("repeat", lambda x, *, counts, axis: P.repeat_along(x, counts, axis), repeat_jvp, repeat_vjp, _save_nothing)


def take_jvp(indices, tx, _, *, axis, shape):
    """``take(dx, indices, axis)`` (``axis`` unsharded first under an ``Explicit`` mesh)."""
    return jnp.take(unsharded_along(tx, (axis,)), indices, axis=axis)


def take_vjp(indices, ct, *, axis, shape):
    """Seed ``index_select_backward`` / ``take_backward``: ``ct`` scatter-added at the taken
    positions (duplicates accumulate)."""
    ct_moved = jnp.moveaxis(ct, tuple(range(axis, axis + indices.ndim)), tuple(range(indices.ndim)))
    sharding = explicit_sharding(ct_moved)  # an Explicit mesh: the other axes as ct's, axis unsharded
    spec = None if sharding is None else jax.sharding.PartitionSpec(
        None, *(tuple(sharding.spec) + (None,) * ct.ndim)[indices.ndim:ct.ndim])
    moved = jnp.zeros((shape[axis], *shape[:axis], *shape[axis + 1:]), ct.dtype, out_sharding=spec)
    return jnp.moveaxis(moved.at[indices].add(ct_moved, out_sharding=spec), 0, axis), None


take_op = define_op("take", lambda x, indices, *, axis, shape: jnp.take(unsharded_along(x, (axis,)), indices, axis=axis),
                    take_jvp, take_vjp, lambda out, x, indices, **_: indices)


def _masked_fill_array_jvp(mask, tx, _, tvalue):
    """``d value`` under the mask, ``dx`` elsewhere."""
    if tvalue is None:
        return masked_fill_jvp(mask, tx, None)
    return jnp.where(mask, tvalue, 0 if tx is None else tx)


def _masked_fill_array_vjp(mask, ct):
    """Seed ``masked_fill_backward``: the fill value gets the sum of ``ct`` under the mask (the
    seed's ``where(mask, grad, 0).sum()``); ``x`` gets ``ct`` off the mask."""
    return jnp.where(mask, 0, ct), None, jnp.sum(jnp.where(mask, ct, 0))


masked_fill_array_op = define_op(
    "masked_fill_array", lambda x, mask, value: jnp.where(mask, value, x), _masked_fill_array_jvp,
    _masked_fill_array_vjp, lambda out, x, mask, value: mask,
)


# ----------------------------------------------------------------------------------------------
# Public functions

def _same_dtype_arrays(op, arrays, dtype=None):
    """The arrays in their common dtype (or in ``dtype``, jax.numpy's argument, when given);
    integer and boolean arrays keep an exact common dtype (``_call`` runs jax.numpy's
    computation on them)."""
    arrays = [V.array(op, f"arrays[{k}]", a, inexact=False) for k, a in enumerate(arrays)]
    if not arrays:
        raise ValueError(f"{op}: needs at least one array")
    dtype = jnp.result_type(*arrays) if dtype is None else jnp.dtype(dtype)
    return [a.astype(dtype) for a in arrays]


def _exact(*arrays) -> bool:
    """Whether the arrays are all integer or boolean: nothing to differentiate."""
    return not any(jnp.issubdtype(jnp.result_type(a), jnp.inexact) for a in arrays)


def _call(op, *arrays, **static):
    """``op(*arrays, **static)``; on integer and boolean arrays the op's primal (jax.numpy's
    computation, which keeps their dtype, as jax.numpy and torch do: the ops are linear, there
    is no derivative to define)."""
    if _exact(*arrays):
        return op.primal(*arrays, **static)
    return op(*arrays, **static)


@exported_as("jaxrules.numpy.concatenate")
def concatenate(arrays: Sequence[ArrayLike] | ArrayLike, axis: int | None = 0, dtype: DTypeLike | None = None) -> Array:
    """Joins arrays along an existing axis; linear: JVP the concatenated tangents, VJP the
    cotangent split back into the inputs' pieces (seed ``cat_tensors_backward``). Mirrors
    ``jax.numpy.concatenate`` (``torch.cat``).

    Args:
        arrays: the arrays (a sequence, or an array whose leading axis is iterated), of one
            shape off ``axis``; cast to their common dtype. Integer and boolean arrays keep
            their dtype (jax.numpy's result; no derivative).
        axis: the axis to join along; None joins the flattened arrays.
        dtype: cast the arrays to this dtype first; None: their common dtype.

    Returns:
        The joined array.

    Raises:
        ValueError: when there are no arrays, the shapes differ off ``axis`` or ``axis`` is
            out of range.
    """
    arrays = _same_dtype_arrays("concatenate", arrays, dtype)
    if axis is None:
        arrays, axis = [a.reshape(-1) for a in arrays], 0
    ax = V.single_axis("concatenate", arrays[0].ndim, axis)
    for a in arrays[1:]:
        off_axis = lambda s: s[:ax] + s[ax + 1 :]  # noqa: E731
        if a.ndim != arrays[0].ndim or off_axis(a.shape) != off_axis(arrays[0].shape):
            raise ValueError(f"concatenate: shapes {[x.shape for x in arrays]} differ off axis {axis}")
    return _call(concatenate_op, *arrays, axis=ax, shapes=tuple(a.shape for a in arrays))


@exported_as("jaxrules.numpy.concat")
def concat(arrays: Sequence[ArrayLike] | ArrayLike, /, *, axis: int | None = 0) -> Array:
    """The array API's spelling of ``concatenate`` (the same op: VJP the cotangent split back).
    Mirrors ``jax.numpy.concat`` (``torch.concat``).

    Args:
        arrays: the arrays, of one shape off ``axis`` (see ``concatenate``).
        axis: the axis to join along; None joins the flattened arrays.

    Returns:
        The joined array.

    Raises:
        ValueError: as ``concatenate``.
    """
    return concatenate(arrays, axis=axis)


@exported_as("jaxrules.numpy.stack")
def stack(arrays: Sequence[ArrayLike] | ArrayLike, axis: int = 0, out: None = None, dtype: DTypeLike | None = None) -> Array:
    """Joins arrays of one shape along a new axis; linear: JVP the stacked tangents, VJP the
    cotangent unbound along ``axis`` (seed ``stack_tensors_backward``). Mirrors
    ``jax.numpy.stack`` (``torch.stack``).

    Args:
        arrays: the arrays (a sequence, or an array whose leading axis is iterated), all of
            one shape; cast to their common dtype. Integer and boolean arrays keep their dtype
            (jax.numpy's result; no derivative).
        axis: where the new axis goes in the result (negative counts from the end).
        out: not supported: must be None, as in JAX (``TypeError`` otherwise).
        dtype: cast the arrays to this dtype first; None: their common dtype.

    Returns:
        The stacked array, of rank one more than the inputs'.

    Raises:
        ValueError: when there are no arrays, the shapes differ or ``axis`` is out of range.
    """
    V.unsupported("stack", out=out)
    arrays = _same_dtype_arrays("stack", arrays, dtype)
    if any(a.shape != arrays[0].shape for a in arrays):
        raise ValueError(f"stack: all arrays must have the same shape, got {[a.shape for a in arrays]}")
    ax = V.single_axis("stack", arrays[0].ndim + 1, axis)
    return _call(stack_op, *arrays, axis=ax, shape=arrays[0].shape)


def _in_bounds(op, indices, n, mode, wrap_negative):
    """``(safe, out_of_bounds)``: the indices mapped into ``[0, n)`` as JAX's ``mode`` does
    (``"fill"``/None and ``"one_hot"``: negative ones wrapped when ``wrap_negative``, the others
    out of bounds, marked; ``"clip"``/``"promise_in_bounds"``: clipped; ``"wrap"``: modulo n),
    and the boolean mask of out-of-bound entries (None when there are none). int8/int16/uint8
    indices are widened first: ``n - 1`` or ``indices + n`` in their dtype could overflow."""
    indices = V.wide_indices(indices)
    if mode == "wrap":
        return jnp.mod(indices, n), None
    if wrap_negative:
        indices = jnp.where(indices < 0, indices + n, indices)
    safe = jnp.clip(indices, 0, n - 1)
    if mode in ("clip", "promise_in_bounds"):
        return safe, None
    host = concrete_value(indices)
    if host is not None and not np.any((host < 0) | (host >= n)):
        return safe, None
    return safe, (indices < 0) | (indices >= n)


def _fill(op, out, bad, fill_value, mode):
    """``out`` with ``fill_value`` (NaN when None, 0 in ``"one_hot"`` mode, as JAX) where ``bad``
    (broadcast against ``out``); the masked entries get no gradient (``masked_fill``'s rule)."""
    if bad is None:
        return out
    value = 0.0 if mode == "one_hot" else (float("nan") if fill_value is None else fill_value)
    return masked_fill_op(out, jnp.broadcast_to(bad, out.shape), value=value)


def _check_mode(op, mode, modes):
    if mode is not None and (not isinstance(mode, str) or mode not in modes):
        raise ValueError(f"{op}: mode must be None or one of {', '.join(map(repr, modes))}, got {mode!r}")


# The installed JAX's default for ``take_along_axis``'s ``wrap_negative_indices``: None (True except
# in "promise_in_bounds" mode) in jax 0.10.2, True (in every mode) in jax 0.12.0.1.
_WRAP_NEGATIVE_DEFAULT = inspect.signature(jnp.take_along_axis).parameters["wrap_negative_indices"].default


@exported_as("jaxrules.numpy.take_along_axis")
def take_along_axis(arr: ArrayLike, indices: ArrayLike, axis: int | None = -1, mode: str | None = None, fill_value: ArrayLike | None = None, *, wrap_negative_indices: bool | None = _WRAP_NEGATIVE_DEFAULT) -> Array:
    """``out[..., i, ...] = arr[..., indices[..., i, ...], ...]`` along ``axis``; linear: JVP
    the same gather of the tangent, VJP a scatter-add of the cotangent (duplicates accumulate;
    seed ``gather_backward``). Mirrors ``jax.numpy.take_along_axis`` (``torch.gather``).

    Args:
        arr: the array to take from. Integer and boolean input keeps its dtype (jax.numpy's
            result; no derivative).
        indices: integer indices of ``arr``'s rank, broadcasting against ``arr`` off ``axis``;
            no derivative.
        axis: the axis to take along; None takes from the flattened array (1-D indices).
        mode: out-of-bound indices, as JAX's: ``"fill"`` (None, the default: ``fill_value``
            there, with no gradient), ``"clip"``, ``"promise_in_bounds"`` (clipped here),
            ``"one_hot"`` (0 out of bounds).
        fill_value: the value out of bounds in ``"fill"`` mode (a number); None: NaN.
        wrap_negative_indices: negative indices count from the end when True; None: True
            except in ``"promise_in_bounds"`` mode. The default is the installed JAX's (None
            in jax 0.10.2, True in jax 0.12.0.1).

    Returns:
        The gathered array, of the broadcast shape of ``arr`` and ``indices``.

    Raises:
        ValueError: when ``mode`` or ``axis`` is invalid, or the shapes do not broadcast.
        TypeError: when ``indices`` are not integers of ``arr``'s rank.
    """
    op = "take_along_axis"
    x = V.array(op, "arr", arr, inexact=False)
    indices = jnp.asarray(indices)
    _check_mode(op, mode, ("fill", "clip", "promise_in_bounds", "one_hot"))
    if fill_value is not None:
        fill_value = V.static_scalar(op, "fill_value", fill_value)
    wrap = mode != "promise_in_bounds" if wrap_negative_indices is None else V.flag(
        op, "wrap_negative_indices", wrap_negative_indices)
    if axis is None:
        if indices.ndim != 1:
            raise ValueError(f"{op}: indices must be 1-D when axis is None, got shape {indices.shape}")
        x, axis = x.reshape(-1), 0
    if not jnp.issubdtype(indices.dtype, jnp.integer) or indices.ndim != x.ndim:
        raise TypeError(f"{op}: indices must be integers of rank {x.ndim}, got {indices.dtype}{indices.shape}")
    ax = V.single_axis(op, x.ndim, axis)
    n = x.shape[ax]
    out_shape = V.broadcast(op, arr=np.broadcast_to(False, x.shape[:ax] + (1,) + x.shape[ax + 1:]), indices=indices)
    if n == 0:  # nothing to take from: zeros, as JAX
        return jnp.zeros(out_shape, x.dtype)
    if _exact(x):  # nothing to differentiate: jax.numpy's gather, its dtype and fill kept
        return jnp.take_along_axis(x, indices, axis=ax, mode=mode, fill_value=fill_value, wrap_negative_indices=wrap)
    safe, bad = _in_bounds(op, indices, n, mode, wrap)
    return _fill(op, take_along_axis_op(x, safe, axis=ax, shape=x.shape), bad, fill_value, mode)


@exported_as("jaxrules.numpy.masked_fill")
def masked_fill(x: ArrayLike, mask: ArrayLike, value: ArrayLike) -> Array:
    """torch's ``masked_fill``: ``value`` where ``mask``, else ``x``. ``x`` gets no gradient
    under the mask; an array ``value`` gets the sum of the gradient there (seed
    ``masked_fill_backward``); a Python number is a constant.

    Args:
        x: the input (integer and boolean input is promoted to float).
        mask: a boolean array broadcastable to ``x``'s shape.
        value: the fill value: a Python number (held fixed), or a 0-d array (differentiable;
            traced values too), cast to ``x``'s dtype. A complex value needs a complex ``x``
            (as torch).

    Returns:
        ``where(mask, value, x)`` of ``x``'s shape and dtype.
    """
    x = V.array("masked_fill", "x", x)
    mask = jnp.asarray(mask)
    if mask.dtype != bool:
        raise TypeError(f"masked_fill: mask must be boolean, got {mask.dtype}")
    V.broadcast("masked_fill", x=x, mask=mask)
    if jnp.broadcast_shapes(x.shape, mask.shape) != x.shape:
        raise ValueError(f"masked_fill: mask of shape {mask.shape} does not broadcast to x's shape {x.shape}")
    mask = jnp.broadcast_to(mask, x.shape)
    if isinstance(value, numbers.Number) and not isinstance(value, bool | np.generic):
        return masked_fill_op(x, mask, value=value)
    value = V.array("masked_fill", "value", value, inexact=False)
    if value.ndim != 0:
        raise ValueError(
            f"masked_fill: value must be a Python number or a 0-d array (torch requires a 0-dim tensor), "
            f"got shape {value.shape}"
        )
    if jnp.iscomplexobj(value) and not jnp.iscomplexobj(x):
        raise TypeError(f"masked_fill: a complex value needs a complex x, got value {value.dtype} and x {x.dtype}")
    return masked_fill_array_op(x, mask, value.astype(x.dtype))


_PAD_OPTIONS = {
    "constant": ("constant_values",), "empty": (), "edge": (), "wrap": (), "reflect": ("reflect_type",),
    "symmetric": ("reflect_type",), "linear_ramp": ("end_values",), "maximum": ("stat_length",),
    "minimum": ("stat_length",), "mean": ("stat_length",), "median": ("stat_length",),
}


def _pairs(op, name, value, nd, *, integral):
    """``value`` broadcast to ``nd`` (before, after) pairs, as numpy's pad arguments."""
    arr = np.asarray(value)
    if arr.ndim > 2 or (arr.ndim == 2 and arr.shape not in ((nd, 2), (1, 2))) or (arr.ndim == 1 and arr.shape[0] not in (1, 2)):
        raise ValueError(f"{op}: {name} must have shape ({nd}, 2), (1, 2), (2,), (1,) or (), got {arr.shape}")
    if integral and not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise TypeError(f"{op}: {name} must be integers, got {value!r}")
    return np.broadcast_to(arr.reshape(-1, 2) if arr.ndim == 2 else arr, (nd, 2))


def _reflect_map(n, lo, hi, mode, reflect_type):
    """The (padded length, n) matrix of the map ``x -> pad(x, (lo, hi), mode)`` along one axis,
    built by jax.numpy.pad's own loop (slices, flips, ``2 edge - x`` for odd reflection) run on
    the identity: the result is a linear function of ``x``."""
    m = np.eye(n)
    if mode == "edge":
        return np.concatenate([np.repeat(m[:1], lo, 0), m, np.repeat(m[-1:], hi, 0)])
    if mode == "wrap":
        idx = np.arange(-lo, n + hi) % n
        return m[idx]
    offset = 1 if (mode == "reflect" and n > 1) else 0
    for before, padding in ((True, lo), (False, hi)):
        edge = m[:1] if before else m[-1:]
        while padding > 0:
            cur = min(padding, n - offset)
            padding -= cur
            x = m[offset:offset + cur] if before else m[m.shape[0] - cur - offset:m.shape[0] - (0 if mode == "symmetric" or n == 1 else 1)]
            x = x[::-1]
            if reflect_type == "odd":
                x = 2 * edge - x
                if n > 1:
                    edge = x[:1] if before else x[-1:]
            m = np.concatenate([x, m]) if before else np.concatenate([m, x])
    return m


def _apply_axis_map(x, m, axis):
    """``m @ x`` along ``axis`` for a static integer matrix ``m``: a ``take`` per nonzero of the
    rows (one for the selections of edge, wrap and even reflection), weighted."""
    rows = [np.flatnonzero(r) for r in m]
    depth = max(len(r) for r in rows)
    out = None
    for k in range(depth):
        idx = np.array([r[k] if k < len(r) else 0 for r in rows])
        coef = np.array([m[i, r[k]] if k < len(r) else 0.0 for i, r in enumerate(rows)])
        term = take_op(x, jnp.asarray(idx), axis=axis, shape=x.shape)
        if not np.all(coef == 1):
            view = (1,) * axis + (-1,) + (1,) * (x.ndim - axis - 1)
            c = jnp.asarray(coef, x.real.dtype).reshape(view)
            term = jnp.where(c != 0, c * term, 0) if k else c * term
        out = term if out is None else out + term
    return out


def _block(x, value, axis, count):
    """``count`` copies of ``value`` (an array broadcasting against ``x`` with length 1 along
    ``axis``) along ``axis``."""
    shape = x.shape[:axis] + (count,) + x.shape[axis + 1:]
    return jnp.broadcast_to(jnp.asarray(value, x.dtype), shape)


def _concat3(before, x, after, axis):
    return concatenate_op(before, x, after, axis=axis, shapes=(before.shape, x.shape, after.shape))


@exported_as("jaxrules.numpy.pad")
def pad(array: ArrayLike, pad_width: ArrayLike, mode: str | Callable[..., Any] = "constant", **kwargs: Any) -> Array:
    """Pads an array, every mode of ``jax.numpy.pad``, derivatives included: ``"constant"``
    with one number (seed ``constant_pad_nd_backward``: VJP the cotangent's interior slice) or
    per-axis values or arrays (differentiable), ``"empty"`` (zeros, as JAX), ``"edge"``,
    ``"wrap"``, ``"reflect"``, ``"symmetric"`` (torch's replicate, circular and reflect pads:
    gathers along each axis, VJP ``take``'s scatter-add; ``reflect_type="odd"`` adds
    ``2 edge - x``), ``"linear_ramp"``, ``"maximum"``, ``"minimum"``, ``"mean"``,
    ``"median"`` (jaxrules' reductions of the edge slices) and a callable (JAX's: applied along
    each axis of the zero-padded array). Mirrors ``jax.numpy.pad``
    (``torch.nn.functional.pad``).

    Args:
        array: the array. Integer and boolean input keeps its dtype (jax.numpy's result; no
            derivative).
        pad_width: non-negative integer (before, after) widths: one int, one pair, or one pair
            per axis.
        mode: one of the modes above, or a callable ``f(vector, widths, axis, kwargs)``.
        **kwargs: the mode's options, as jax.numpy's: ``constant_values`` (``"constant"``),
            ``end_values`` (``"linear_ramp"``), ``stat_length`` (the statistic modes),
            ``reflect_type`` (``"reflect"``, ``"symmetric"``: ``"even"`` or ``"odd"``).

    Returns:
        The padded array, in ``array``'s dtype.

    Raises:
        ValueError: when a width is negative, ``mode`` is unknown or takes none of the given
            options, or an empty axis is padded in a mode that reads it.
    """
    op = "pad"
    x = V.array(op, "array", array, inexact=False)
    widths = _pairs(op, "pad_width", pad_width, x.ndim, integral=True)
    if np.any(widths < 0):
        raise ValueError(f"{op}: pad_width must be non-negative, got {pad_width!r}")
    widths = tuple(map(tuple, widths.astype(int).tolist()))
    if callable(mode):
        padded = _call(pad_op, x, widths=widths, value=0)
        for d in range(x.ndim):
            padded = jnp.apply_along_axis(mode, d, padded, widths[d], d, kwargs)
        return padded
    if not isinstance(mode, str) or mode not in _PAD_OPTIONS:
        raise ValueError(f"{op}: mode must be a callable or one of {', '.join(map(repr, _PAD_OPTIONS))}, got {mode!r}")
    if extra := sorted(set(kwargs) - set(_PAD_OPTIONS[mode])):
        raise ValueError(f"{op}: mode={mode!r} takes no argument {', '.join(extra)} (only {_PAD_OPTIONS[mode] or 'none'})")
    if x.ndim == 0:
        return x
    for d, (lo, hi) in enumerate(widths):
        if x.shape[d] == 0 and (lo or hi) and mode not in ("constant", "empty"):
            raise ValueError(f"{op}: cannot pad the empty axis {d} in mode {mode!r}")
    if _exact(x):  # nothing to differentiate: jax.numpy's pad, which keeps the dtype
        return jnp.pad(x, widths, mode, **kwargs)
    if mode in ("constant", "empty"):
        value = kwargs.get("constant_values", 0)
        if isinstance(value, np.ndarray | np.generic) and np.ndim(value) == 0:
            value = value.item()
        if isinstance(value, int | float | complex) and not isinstance(value, bool):
            return pad_op(x, widths=widths, value=value)
        values = _value_pairs(op, "constant_values", value, x)
        for d, (lo, hi) in enumerate(widths):
            x = _concat3(_block(x, values[d, 0], d, lo), x, _block(x, values[d, 1], d, hi), d)
        return x
    if mode in ("edge", "wrap", "reflect", "symmetric"):
        reflect_type = kwargs.get("reflect_type", "even")
        if reflect_type not in ("even", "odd"):
            raise ValueError(f"{op}: reflect_type must be 'even' or 'odd', got {reflect_type!r}")
        for d, (lo, hi) in enumerate(widths):
            if lo or hi:
                x = _apply_axis_map(x, _reflect_map(x.shape[d], lo, hi, mode, reflect_type), d)
        return x
    if mode == "linear_ramp":
        ends = _value_pairs(op, "end_values", kwargs.get("end_values", 0), x)
        for d, (lo, hi) in enumerate(widths):
            n = x.shape[d]
            view = (1,) * d + (-1,) + (1,) * (x.ndim - d - 1)
            parts = []
            for k, count, end in ((0, lo, ends[d, 0]), (n - 1, hi, ends[d, 1])):
                edge = take_op(x, jnp.asarray([k]), axis=d, shape=x.shape)
                t = jnp.asarray(np.arange(count) / max(count, 1), x.real.dtype).astype(x.dtype).reshape(view)
                ramp = end + (edge - end) * t
                parts.append(ramp if k == 0 else take_op(ramp, jnp.arange(count)[::-1], axis=d, shape=ramp.shape))
            x = _concat3(parts[0], x, parts[1], d)
        return x
    # the statistics of the edge slices (jaxrules' reductions), repeated

    stat = {"maximum": reductions.amax, "minimum": reductions.amin, "mean": reductions.mean,
            "median": reductions.median}[mode]
    lengths = kwargs.get("stat_length")
    if lengths is not None:
        lengths = _pairs(op, "stat_length", lengths, x.ndim, integral=True)
        if np.any(lengths <= 0):
            raise ValueError(f"{op}: stat_length must be positive, got {kwargs['stat_length']!r}")
    for d, (lo, hi) in enumerate(widths):
        n = x.shape[d]
        if lengths is None:
            before = after = stat(x, axis=d, keepdims=True)
        else:
            lb, la = min(int(lengths[d, 0]), n), min(int(lengths[d, 1]), n)
            before = stat(take_op(x, jnp.arange(lb), axis=d, shape=x.shape), axis=d, keepdims=True)
            after = stat(take_op(x, jnp.arange(n - la, n), axis=d, shape=x.shape), axis=d, keepdims=True)
        x = _concat3(_block(x, before, d, lo), x, _block(x, after, d, hi), d)
    return x


def _value_pairs(op, name, value, x):
    """A pad argument of values (numbers or arrays, maybe traced) as an (ndim, 2) array."""
    v = V.array(op, name, value).astype(x.dtype)
    if v.ndim > 2 or (v.ndim == 2 and v.shape not in ((x.ndim, 2), (1, 2))) or (v.ndim == 1 and v.shape[0] not in (1, 2)):
        raise ValueError(f"{op}: {name} must have shape ({x.ndim}, 2), (1, 2), (2,), (1,) or (), got {v.shape}")
    return jnp.broadcast_to(v.reshape(-1, 2) if v.ndim == 2 else v, (x.ndim, 2))


def _sections(op, n, indices_or_sections, even):
    """The piece sizes of ``split``/``array_split`` along an axis of length ``n``."""
    if isinstance(indices_or_sections, numbers.Integral) and not isinstance(indices_or_sections, bool):
        k = int(indices_or_sections)
        if k < 1:
            raise ValueError(f"{op}: the number of sections must be >= 1, got {k}")
        if even and n % k:
            raise ValueError(f"{op}: an axis of length {n} does not split into {k} equal sections")
        return tuple(n // k + (1 if i < n % k else 0) for i in range(k))
    cuts = [min(max(int(c) + (n if c < 0 else 0), 0), n) for c in np.asarray(indices_or_sections).reshape(-1)]
    if any(b < a for a, b in zip(cuts[:-1], cuts[1:])):  # NumPy's overlapping pieces; JAX raises
        raise ValueError(f"{op}: the cut indices must not decrease (after counting negative ones from the end), "
                         f"got {indices_or_sections!r}")
    bounds = [0, *cuts, n]
    return tuple(max(b - a, 0) for a, b in zip(bounds[:-1], bounds[1:]))


@exported_as("jaxrules.numpy.split")
def split(ary: ArrayLike, indices_or_sections: int | Sequence[int] | ArrayLike, axis: int = 0) -> list[Array]:
    """Splits an array into pieces along ``axis``; linear: JVP the split tangent, VJP the
    cotangents concatenated, zeros for unused pieces (seed ``split_backward``). Mirrors
    ``jax.numpy.split`` (``torch.tensor_split``).

    Args:
        ary: the array. Integer and boolean input keeps its dtype (jax.numpy's result; no
            derivative).
        indices_or_sections: the number of equal pieces, or the sorted cut indices along
            ``axis`` (negative ones count from the end, as NumPy).
        axis: the axis to split.

    Returns:
        A list of arrays, as NumPy returns.

    Raises:
        ValueError: when the axis does not split into equal pieces, the number of sections is
            < 1 or the cut indices decrease.
    """
    x = V.array("split", "ary", ary, inexact=False)
    ax = V.single_axis("split", x.ndim, axis)
    return list(_call(split_op, x, axis=ax, sizes=_sections("split", x.shape[ax], indices_or_sections, True)))


@exported_as("jaxrules.numpy.array_split")
def array_split(ary: ArrayLike, indices_or_sections: int | Sequence[int] | ArrayLike, axis: int = 0) -> list[Array]:
    """As ``split``, but a number of sections that does not divide the axis gives pieces
    differing in size by one; VJP the cotangents concatenated (seed ``split_backward``).
    Mirrors ``jax.numpy.array_split`` (``torch.tensor_split``).

    Args:
        ary: the array. Integer and boolean input keeps its dtype (jax.numpy's result; no
            derivative).
        indices_or_sections: the number of pieces, or the sorted cut indices along ``axis``.
        axis: the axis to split.

    Returns:
        A list of arrays.

    Raises:
        ValueError: when the number of sections is < 1 or the cut indices decrease.
    """
    x = V.array("array_split", "ary", ary, inexact=False)
    ax = V.single_axis("array_split", x.ndim, axis)
    return list(_call(split_op, x, axis=ax, sizes=_sections("array_split", x.shape[ax], indices_or_sections, False)))


@exported_as("jaxrules.numpy.unstack")
def unstack(x: ArrayLike, /, *, axis: int = 0) -> tuple[Array, ...]:
    """The slices of ``x`` along ``axis``; linear: VJP the cotangents stacked (seed
    ``unbind_backward``). Mirrors ``jax.numpy.unstack`` (``torch.unbind``).

    Args:
        x: the array. Integer and boolean input keeps its dtype (jax.numpy's result; no
            derivative).
        axis: the axis to unstack.

    Returns:
        A tuple of ``x.shape[axis]`` arrays, each without ``axis``.

    Raises:
        ValueError: when ``axis`` is out of range.
    """
    x = V.array("unstack", "x", x, inexact=False)
    return _call(unstack_op, x, axis=V.single_axis("unstack", x.ndim, axis))


@exported_as("jaxrules.scipy.linalg.block_diag")
def block_diag(*arrs: ArrayLike) -> Array:
    """The block-diagonal matrix of the arrays; linear: VJP each input's diagonal block of the
    cotangent (seed ``block_diag_backward``). Mirrors ``jax.scipy.linalg.block_diag``
    (``torch.block_diag``).

    Args:
        *arrs: arrays of rank <= 2 (0-d and 1-d ones are 1 x 1 and 1 x n blocks), cast to
            their common dtype. Integer and boolean ones keep their dtype (no derivative).

    Returns:
        The (sum of rows, sum of columns) matrix.

    Raises:
        ValueError: when an array has rank > 2 or none is given.
    """
    arrays = _same_dtype_arrays("block_diag", arrs)
    for k, a in enumerate(arrays):
        if a.ndim > 2:
            raise ValueError(f"block_diag: arrays[{k}] must have rank <= 2, got shape {a.shape}")
    return _call(block_diag_op, *arrays, shapes=tuple(a.shape for a in arrays))


@exported_as("jaxrules.numpy.tile")
def tile(A: ArrayLike, reps: int | Sequence[int]) -> Array:  # noqa: N803 - numpy's argument name
    """Repeats the whole array ``reps`` times along each axis; linear: VJP the copies of the
    cotangent summed (seed ``repeat_backward``). Mirrors ``jax.numpy.tile`` (torch's
    ``Tensor.repeat``).

    Args:
        A: the array. Integer and boolean input keeps its dtype (jax.numpy's result; no
            derivative).
        reps: non-negative repetitions per axis (an int or a sequence; aligned to the trailing
            axes, as NumPy).

    Returns:
        The tiled array.

    Raises:
        ValueError: when a repetition is negative or not an int.
    """
    x = V.array("tile", "A", A, inexact=False)
    return _call(tile_op, x, reps=_repetitions(reps), shape=x.shape)


def _repetitions(reps) -> tuple[int, ...]:
    """``tile``'s ``reps`` as Python ints: an int, a sequence of ints or a concrete integer array
    (jax.numpy's forms, each entry read by ``operator.index``); a traced, non-integer, boolean or
    negative repetition is a ``ValueError``."""
    values = []
    for r in [reps] if np.ndim(reps) == 0 else list(reps):
        try:
            if isinstance(r, bool | np.bool_) or np.result_type(r) == np.bool_:
                raise TypeError
            values.append(operator.index(r))
        except Exception:  # noqa: BLE001 - a float, a bool, a tracer (TracerIntegerConversionError)
            raise ValueError(f"tile: reps must be concrete non-negative integers, got {reps!r}") from None
        if values[-1] < 0:
            raise ValueError(f"tile: reps must be concrete non-negative integers, got {reps!r}")
    return tuple(values)


@exported_as("jaxrules.numpy.repeat")
def repeat(a: ArrayLike, repeats: int | ArrayLike, axis: int | None = None, *, total_repeat_length: int | None = None, out_sharding: None = None) -> Array:
    """Repeats each entry along ``axis``; linear: VJP the copies of each entry's cotangent
    summed (a segment sum with static ``repeats``; a ``take``'s scatter-add with
    ``total_repeat_length``). Mirrors ``jax.numpy.repeat`` (``torch.repeat_interleave``).

    Args:
        a: the array. Integer and boolean input keeps its dtype (jax.numpy's result; no
            derivative).
        repeats: non-negative counts: an int, or one per entry along ``axis``; concrete unless
            ``total_repeat_length`` is given.
        axis: the axis to repeat along; None repeats the flattened array.
        total_repeat_length: JAX's output length (extra copies dropped, the last value
            repeated to fill); with it ``repeats`` may be traced.
        out_sharding: must be None (``ValueError`` otherwise).

    Returns:
        The array with the entries repeated.

    Raises:
        ValueError: when ``repeats`` is negative, not integral, of the wrong length or traced
            without ``total_repeat_length``.
    """
    op = "repeat"
    V.unhonoured(op, out_sharding=out_sharding)
    x = V.array(op, "a", a, inexact=False)
    if axis is None:
        x, axis = x.reshape(-1), 0
    ax = V.single_axis(op, x.ndim, axis)
    if total_repeat_length is not None:
        if isinstance(total_repeat_length, bool) or not isinstance(total_repeat_length, numbers.Integral) \
                or total_repeat_length < 0:
            raise ValueError(f"{op}: total_repeat_length must be a non-negative int, got {total_repeat_length!r}")
        counts = jnp.asarray(repeats)
        if not jnp.issubdtype(counts.dtype, jnp.integer) or counts.ndim > 1 or counts.size not in (1, x.shape[ax]):
            raise ValueError(f"{op}: repeats must be an int or {x.shape[ax]} integers, got {counts.dtype}{counts.shape}")
        if x.shape[ax] == 0:
            return jnp.zeros(x.shape[:ax] + (int(total_repeat_length),) + x.shape[ax + 1:], x.dtype)
        idx = jnp.repeat(jnp.arange(x.shape[ax]), counts.reshape(-1) if counts.size > 1 else counts.reshape(()),
                         total_repeat_length=int(total_repeat_length))
        return _call(take_op, x, idx, axis=ax, shape=x.shape)
    try:
        counts = np.broadcast_to(np.asarray(repeats), (x.shape[ax],))
    except ValueError:
        raise ValueError(f"{op}: repeats must be an int or have {x.shape[ax]} entries, got {np.shape(repeats)}") from None
    except jax.errors.TracerArrayConversionError:
        raise ValueError(f"{op}: traced repeats need total_repeat_length (the output length), as in JAX") from None
    if not np.issubdtype(counts.dtype, np.integer) or np.any(counts < 0):
        raise ValueError(f"{op}: repeats must be non-negative integers, got {repeats!r}")
    return _call(repeat_op, x, counts=tuple(int(c) for c in counts), axis=ax)


@exported_as("jaxrules.numpy.take")
def take(a: ArrayLike, indices: ArrayLike, axis: int | None = None, out: None = None, mode: str | None = None, unique_indices: bool = False, indices_are_sorted: bool = False, fill_value: ArrayLike | None = None) -> Array:
    """Takes entries along ``axis`` at ``indices``; linear: JVP the same gather of the tangent,
    VJP a scatter-add of the cotangent (duplicates accumulate; seeds ``index_select_backward``,
    ``take_backward``).
    Mirrors ``jax.numpy.take`` (``torch.index_select`` / ``torch.take``).

    Args:
        a: the array. Integer and boolean input keeps its dtype (jax.numpy's result; no
            derivative).
        indices: integer indices, any shape (booleans read as 0 and 1, as jax.numpy's); no
            derivative.
        axis: the axis to take along; None takes from the flattened array.
        out: must be None (``ValueError`` otherwise).
        mode: out-of-bound indices, as JAX's: ``"fill"`` (None, the default: negative indices
            count from the end, the others out of bounds give ``fill_value`` with no
            gradient), ``"clip"`` (negative ones clip to 0, as JAX), ``"wrap"`` (modulo the
            axis length).
        unique_indices: JAX's promise to XLA (checked as a boolean; results do not depend on
            it).
        indices_are_sorted: JAX's promise to XLA (checked as a boolean).
        fill_value: the value out of bounds in ``"fill"`` mode (a number); None: NaN.

    Returns:
        ``a``'s shape with ``axis`` replaced by ``indices``' shape.

    Raises:
        ValueError: when ``mode`` or ``axis`` is invalid, or entries are taken from an empty
            axis (then ``jaxrules._validate.EmptyAxisIndexError``, also an ``IndexError``, as
            jax.numpy's).
        TypeError: when ``indices`` are not integers.
    """
    op = "take"
    V.unhonoured(op, out=out)
    _check_mode(op, mode, ("fill", "clip", "wrap"))
    V.flag(op, "unique_indices", unique_indices)
    V.flag(op, "indices_are_sorted", indices_are_sorted)
    if fill_value is not None:
        fill_value = V.static_scalar(op, "fill_value", fill_value)
    x = V.array(op, "a", a, inexact=False)
    if axis is None:
        x, axis = x.reshape(-1), 0
    ax = V.single_axis(op, x.ndim, axis)
    indices = jnp.asarray(indices)
    if indices.dtype == jnp.bool_:  # jax.numpy's and NumPy's take read booleans as 0 and 1
        indices = indices.astype(jnp.int32)
    if not jnp.issubdtype(indices.dtype, jnp.integer):
        raise TypeError(f"{op}: indices must be integers, got {indices.dtype}")
    n = x.shape[ax]
    if n == 0 and indices.size:
        raise V.EmptyAxisIndexError(f"{op}: cannot take {indices.size} entries from the empty axis {axis} of shape "
                                    f"{x.shape}")
    if _exact(x):  # nothing to differentiate: jax.numpy's gather, its dtype and fill kept
        return jnp.take(x, indices, axis=ax, mode=mode, fill_value=fill_value)
    if n == 0:
        return take_op(x, indices, axis=ax, shape=x.shape)
    safe, bad = _in_bounds(op, indices, n, mode, wrap_negative=mode != "clip")
    out = take_op(x, safe, axis=ax, shape=x.shape)
    if bad is not None:
        bad = bad.reshape((1,) * ax + bad.shape + (1,) * (x.ndim - ax - 1))
    return _fill(op, out, bad, fill_value, mode)
