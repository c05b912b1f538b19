"""Shape and indexing ops of ``jaxrules.numpy`` (jax.numpy's names and signatures): each is
linear, so its JVP is the op applied to the tangents (``jvp_rules.linear_map_jvp``) and its VJP
the seed's backward (split, unbind, scatter-add, mask, slice)."""

from __future__ import annotations

import itertools
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules import _validate as V
from jaxrules import jvp_rules as J
from jaxrules import partials as P
from jaxrules import vjp_rules as R
from jaxrules.mechanism import concrete_value, define_op
from jaxrules.ops._sampling import normal
from jaxrules.registry import OpRecord, Sample, register


def _save_nothing(out, *arrays, **_):
    """Linear ops: the formulas read no residual."""
    return ()


concatenate_op = define_op("concatenate", lambda *xs, axis, shapes: jnp.concatenate(xs, axis=axis), J.concatenate_jvp, R.concatenate_vjp, _save_nothing)
stack_op = define_op("stack", lambda *xs, axis, shape: jnp.stack(xs, axis=axis), J.stack_jvp, R.stack_vjp, _save_nothing)
take_along_axis_op = define_op("take_along_axis", lambda x, indices, *, axis, shape: jnp.take_along_axis(x, indices, axis=axis), J.take_along_axis_jvp, R.take_along_axis_vjp, lambda out, x, indices, **_: indices)
masked_fill_op = define_op("masked_fill", lambda x, mask, *, value: jnp.where(mask, jnp.asarray(value, x.dtype), x), J.masked_fill_jvp, R.masked_fill_vjp, lambda out, x, mask, **_: mask)
pad_op = define_op("pad", lambda x, *, widths, value: jnp.pad(x, widths, constant_values=jnp.asarray(value, x.dtype)), J.pad_jvp, R.pad_vjp, _save_nothing)
split_op = define_op("split", lambda x, *, axis, sizes: tuple(jnp.split(x, list(itertools.accumulate(sizes))[:-1], axis=axis)), J.split_jvp, R.split_vjp, _save_nothing)
unstack_op = define_op("unstack", lambda x, *, axis: tuple(jnp.moveaxis(x, axis, 0)), J.unstack_jvp, R.unstack_vjp, _save_nothing)
block_diag_op = define_op("block_diag", lambda *xs, shapes: jax.scipy.linalg.block_diag(*xs), J.block_diag_jvp, R.block_diag_vjp, _save_nothing)
tile_op = define_op("tile", lambda x, *, reps, shape: jnp.tile(x, reps), J.tile_jvp, R.tile_vjp, _save_nothing)
repeat_op = define_op("repeat", lambda x, *, counts, axis: P.repeat_along(x, counts, axis), J.repeat_jvp, R.repeat_vjp, _save_nothing)
take_op = define_op("take", lambda x, indices, *, axis, shape: jnp.take(x, indices, axis=axis), J.take_jvp, R.take_vjp, lambda out, x, indices, **_: indices)


def _same_dtype_arrays(op, arrays, dtype=None):
    """The arrays in their common dtype (or in ``dtype``, jax.numpy's argument, when given)."""
    arrays = [V.array(op, f"arrays[{k}]", a) for k, a in enumerate(arrays)]
    if not arrays:
        raise ValueError(f"{op}: needs at least one array")
    dtype = jnp.result_type(*arrays) if dtype is None else jnp.dtype(dtype)
    return [a.astype(dtype) for a in arrays]


def concatenate(arrays, axis=0, dtype=None):
    """``jax.numpy.concatenate`` (seed ``cat_tensors_backward``: the cotangent is split back);
    ``axis=None`` concatenates the flattened arrays, ``dtype`` casts them first, as JAX."""
    arrays = _same_dtype_arrays("concatenate", arrays, dtype)
    if axis is None:
        arrays, axis = [a.reshape(-1) for a in arrays], 0
    ax = V.single_axis("concatenate", arrays[0].ndim, axis)
    for a in arrays[1:]:
        off_axis = lambda s: s[:ax] + s[ax + 1 :]  # noqa: E731
        if a.ndim != arrays[0].ndim or off_axis(a.shape) != off_axis(arrays[0].shape):
            raise ValueError(f"concatenate: shapes {[x.shape for x in arrays]} differ off axis {axis}")
    return concatenate_op(*arrays, axis=ax, shapes=tuple(a.shape for a in arrays))


def concat(arrays, /, *, axis=0):
    """``jax.numpy.concat`` (the array API's spelling of ``concatenate``: the same op)."""
    return concatenate(arrays, axis=axis)


def stack(arrays, axis=0, out=None, dtype=None):
    """``jax.numpy.stack`` (seed ``stack_tensors_backward``: the cotangent is unbound); ``dtype``
    casts the arrays first; ``out`` must be None, as in JAX."""
    V.unsupported("stack", out=out)
    arrays = _same_dtype_arrays("stack", arrays, dtype)
    if any(a.shape != arrays[0].shape for a in arrays):
        raise ValueError(f"stack: all arrays must have the same shape, got {[a.shape for a in arrays]}")
    ax = V.single_axis("stack", arrays[0].ndim + 1, axis)
    return stack_op(*arrays, axis=ax, shape=arrays[0].shape)


def take_along_axis(arr, indices, axis):
    """``jax.numpy.take_along_axis`` (seed ``gather_backward``: scatter-add, duplicates
    accumulate). Indices must be in range."""
    x = V.array("take_along_axis", "arr", arr)
    indices = jnp.asarray(indices)
    if not jnp.issubdtype(indices.dtype, jnp.integer) or indices.ndim != x.ndim:
        raise TypeError(f"take_along_axis: indices must be integers of rank {x.ndim}, got {indices.dtype}{indices.shape}")
    ax = V.single_axis("take_along_axis", x.ndim, axis)
    return take_along_axis_op(x, indices, axis=ax, shape=x.shape)


def masked_fill(x, mask, value):
    """torch's ``masked_fill``: ``value`` where ``mask``, else ``x`` (the gradient of ``x`` is
    zero under the mask)."""
    x = V.array("masked_fill", "x", x)
    mask = jnp.asarray(mask)
    if mask.dtype != bool:
        raise TypeError(f"masked_fill: mask must be boolean, got {mask.dtype}")
    V.broadcast("masked_fill", x=x, mask=mask)
    if not isinstance(value, int | float | complex) or isinstance(value, bool):
        raise TypeError(f"masked_fill: value must be a Python number, got {type(value).__name__}")
    return masked_fill_op(x, jnp.broadcast_to(mask, x.shape), value=value)


def pad(array, pad_width, mode="constant", constant_values=0):
    """``jax.numpy.pad`` with ``mode='constant'`` (one fill value; seed
    ``constant_pad_nd_backward``: the cotangent's interior slice)."""
    if mode != "constant":
        raise ValueError(f"pad: only mode='constant' is supported, got {mode!r}")
    if isinstance(constant_values, bool) or not isinstance(constant_values, int | float | complex):
        raise TypeError(f"pad: constant_values must be a Python number, got {constant_values!r}")
    x = V.array("pad", "array", array)
    widths = np.broadcast_to(np.asarray(pad_width, dtype=int), (x.ndim, 2))
    if np.any(widths < 0):
        raise ValueError(f"pad: pad_width must be non-negative, got {pad_width!r}")
    return pad_op(x, widths=tuple(map(tuple, widths.tolist())), value=constant_values)


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
    bounds = [0, *cuts, n]
    return tuple(max(b - a, 0) for a, b in zip(bounds[:-1], bounds[1:]))


def split(ary, indices_or_sections, axis=0):
    """``jax.numpy.split`` (seed ``split_backward``: the cotangents concatenated, zeros for
    unused pieces). Returns a list, as numpy does."""
    x = V.array("split", "ary", ary)
    ax = V.single_axis("split", x.ndim, axis)
    return list(split_op(x, axis=ax, sizes=_sections("split", x.shape[ax], indices_or_sections, True)))


def array_split(ary, indices_or_sections, axis=0):
    """``jax.numpy.array_split``: as ``split``, sections may differ in size by one."""
    x = V.array("array_split", "ary", ary)
    ax = V.single_axis("array_split", x.ndim, axis)
    return list(split_op(x, axis=ax, sizes=_sections("array_split", x.shape[ax], indices_or_sections, False)))


def unstack(x, /, *, axis=0):
    """``jax.numpy.unstack`` (seed ``unbind_backward``: the cotangents stacked)."""
    x = V.array("unstack", "x", x)
    return unstack_op(x, axis=V.single_axis("unstack", x.ndim, axis))


def block_diag(*arrs):
    """``jax.scipy.linalg.block_diag`` of arrays of rank <= 2 (seed ``block_diag_backward``:
    each input's diagonal block of the cotangent)."""
    arrays = _same_dtype_arrays("block_diag", arrs)
    for k, a in enumerate(arrays):
        if a.ndim > 2:
            raise ValueError(f"block_diag: arrays[{k}] must have rank <= 2, got shape {a.shape}")
    return block_diag_op(*arrays, shapes=tuple(a.shape for a in arrays))


def tile(A, reps):  # noqa: N803 - numpy's argument name
    """``jax.numpy.tile`` (torch's ``repeat``; seed ``repeat_backward``: the copies summed)."""
    x = V.array("tile", "A", A)
    reps = (reps,) if isinstance(reps, numbers.Integral) else tuple(reps)
    if not all(isinstance(r, numbers.Integral) and r >= 0 for r in reps):
        raise ValueError(f"tile: reps must be non-negative integers, got {reps!r}")
    return tile_op(x, reps=tuple(int(r) for r in reps), shape=x.shape)


def repeat(a, repeats, axis=None):
    """``jax.numpy.repeat`` with static ``repeats`` (an int or one count per entry; torch's
    ``repeat_interleave``): its backward sums each entry's copies."""
    x = V.array("repeat", "a", a)
    if axis is None:
        x, axis = x.reshape(-1), 0
    ax = V.single_axis("repeat", x.ndim, axis)
    try:
        counts = np.broadcast_to(np.asarray(repeats), (x.shape[ax],))
    except ValueError:
        raise ValueError(f"repeat: repeats must be an int or have {x.shape[ax]} entries, got {np.shape(repeats)}") from None
    if not np.issubdtype(counts.dtype, np.integer) or np.any(counts < 0):
        raise ValueError(f"repeat: repeats must be non-negative integers, got {repeats!r}")
    return repeat_op(x, counts=tuple(int(c) for c in counts), axis=ax)


def take(a, indices, axis=None):
    """``jax.numpy.take`` with in-range indices (negative ones count from the end; torch's
    ``index_select`` / ``take``): its backward scatter-adds (duplicates accumulate)."""
    x = V.array("take", "a", a)
    if axis is None:
        x, axis = x.reshape(-1), 0
    ax = V.single_axis("take", x.ndim, axis)
    indices = jnp.asarray(indices)
    if not jnp.issubdtype(indices.dtype, jnp.integer):
        raise TypeError(f"take: indices must be integers, got {indices.dtype}")
    n = x.shape[ax]
    host = concrete_value(indices)
    if host is not None and host.size and (host.min() < -n or host.max() >= n):
        raise ValueError(f"take: indices must lie in [-{n}, {n}), got values in [{host.min()}, {host.max()}]")
    return take_op(x, jnp.where(indices < 0, indices + n, indices), axis=ax, shape=x.shape)


# ----------------------------------------------------------------------------------------------
# Records

_C = ("float64", "complex128")

register(OpRecord(
    "concatenate", lambda *xs, axis=0: concatenate(xs, axis), ("jaxrules.numpy.concatenate",), ("concatenate",),
    ("cat_tensors_backward",),
    lambda rng, dt: [Sample((normal(rng, dt, 2, 3), normal(rng, dt, 1, 3))),
                     Sample((normal(rng, dt, 2, 3), normal(rng, dt, 2, 2), normal(rng, dt, 2, 1)), {"axis": 1})],
    lambda torch, *xs, axis=0: torch.cat(xs, axis), "torch.cat", dtypes=_C,
))
register(OpRecord(
    "stack", lambda *xs, axis=0: stack(xs, axis), ("jaxrules.numpy.stack",), ("stack",), ("stack_tensors_backward",),
    lambda rng, dt: [Sample((normal(rng, dt, 2, 3), normal(rng, dt, 2, 3))),
                     Sample((normal(rng, dt, 3), normal(rng, dt, 3), normal(rng, dt, 3)), {"axis": 1})],
    lambda torch, *xs, axis=0: torch.stack(xs, axis), "torch.stack", dtypes=_C,
))
register(OpRecord(
    "take_along_axis", take_along_axis, ("jaxrules.numpy.take_along_axis",), ("take_along_axis",), ("gather_backward",),
    lambda rng, dt: [Sample((normal(rng, dt, 3, 4), np.array([[0, 0, 3], [1, 2, 1], [3, 3, 3]]), 1)),
                     Sample((normal(rng, dt, 3, 2), np.array([[2, 0], [2, 2]]), 0))],
    lambda torch, x, indices, axis: torch.gather(x, axis, indices), "torch.gather", dtypes=_C,
))
register(OpRecord(
    "masked_fill", masked_fill, ("jaxrules.numpy.masked_fill",), ("masked_fill",), ("masked_fill (derivatives.yaml)",),
    lambda rng, dt: [Sample((normal(rng, dt, 3, 4), np.array([True, False, False, True]), 0.5)),
                     Sample((normal(rng, dt, 2, 3), np.array([[True, False, True], [False, False, True]]), -2.0))],
    lambda torch, x, mask, value: torch.masked_fill(x, torch.as_tensor(mask), value), "torch.masked_fill", dtypes=_C,
))
register(OpRecord(
    "pad", pad, ("jaxrules.numpy.pad",), ("pad",), ("constant_pad_nd_backward",),
    lambda rng, dt: [Sample((normal(rng, dt, 3, 4), ((1, 2), (0, 3)))),
                     Sample((normal(rng, dt, 2, 3), 1), {"constant_values": 1.5})],
    lambda torch, x, pad_width, constant_values=0: torch.nn.functional.pad(
        x, tuple(v for lo_hi in reversed(np.broadcast_to(np.asarray(pad_width), (x.ndim, 2)).tolist()) for v in lo_hi),
        value=constant_values,
    ),
    "torch.nn.functional.pad", dtypes=_C,
))
register(OpRecord(
    "split", lambda x, sections, axis=0: split(x, sections, axis), ("jaxrules.numpy.split",), ("split",),
    ("split_backward",),
    lambda rng, dt: [Sample((normal(rng, dt, 6, 2), 3)), Sample((normal(rng, dt, 2, 5), [1, 3], 1))],
    lambda torch, x, sections, axis=0: torch.tensor_split(x, sections, axis), "torch.tensor_split", dtypes=_C,
))
register(OpRecord(
    "array_split", lambda x, sections, axis=0: array_split(x, sections, axis), ("jaxrules.numpy.array_split",),
    ("split",), ("split_backward",),
    lambda rng, dt: [Sample((normal(rng, dt, 7, 2), 3)), Sample((normal(rng, dt, 2, 4), [-1], 1))],
    lambda torch, x, sections, axis=0: torch.tensor_split(x, sections, axis), "torch.tensor_split", dtypes=_C,
))
register(OpRecord(
    "unstack", unstack, ("jaxrules.numpy.unstack",), ("unstack",), ("unbind_backward",),
    lambda rng, dt: [Sample((normal(rng, dt, 3, 2),)), Sample((normal(rng, dt, 2, 4),), {"axis": 1})],
    lambda torch, x, axis=0: torch.unbind(x, axis), "torch.unbind", dtypes=_C,
))
register(OpRecord(
    "block_diag", block_diag, ("jaxrules.scipy.linalg.block_diag",), ("block_diag",), ("block_diag_backward",),
    lambda rng, dt: [Sample((normal(rng, dt, 2, 3), normal(rng, dt, 1, 1), normal(rng, dt, 3), normal(rng, dt, 2, 2)))],
    lambda torch, *xs: torch.block_diag(*xs), "torch.block_diag", dtypes=_C,
))
register(OpRecord(
    "tile", tile, ("jaxrules.numpy.tile",), ("tile",), ("repeat_backward",),
    lambda rng, dt: [Sample((normal(rng, dt, 2, 3), (2, 1, 3))), Sample((normal(rng, dt, 3), 2))],
    lambda torch, x, reps: x.repeat(*((1,) * (x.ndim - len(np.atleast_1d(reps))) + tuple(np.atleast_1d(reps)))),
    "torch.Tensor.repeat", dtypes=_C,
))
register(OpRecord(
    "repeat", repeat, ("jaxrules.numpy.repeat",), ("repeat",), ("repeat_interleave (derivatives.yaml)",),
    lambda rng, dt: [Sample((normal(rng, dt, 3, 2), 2), {"axis": 0}),
                     Sample((normal(rng, dt, 2, 3), np.array([0, 2, 1])), {"axis": 1})],
    lambda torch, x, repeats, axis=None: torch.repeat_interleave(x, torch.as_tensor(repeats), axis),
    "torch.repeat_interleave", dtypes=_C,
))
register(OpRecord(
    "take", take, ("jaxrules.numpy.take",), ("take",), ("index_select_backward", "take_backward"),
    lambda rng, dt: [Sample((normal(rng, dt, 4, 3), np.array([3, 0, 3, -1]), 0)),
                     Sample((normal(rng, dt, 2, 5), np.array([[1, 1], [4, 0]]), 1)),
                     Sample((normal(rng, dt, 3, 2), np.array([5, 0, 5])))],
    lambda torch, x, indices, axis=None: (
        torch.take(x, torch.as_tensor(indices)) if axis is None
        else torch.index_select(x, axis, torch.as_tensor(indices % x.shape[axis]).reshape(-1)).reshape(
            x.shape[:axis] + indices.shape + x.shape[axis + 1:])
    ),
    "torch.index_select / torch.take", dtypes=_C,
))
