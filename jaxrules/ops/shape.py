"""Shape and indexing ops of ``jaxrules.numpy`` (jax.numpy's names and signatures): each is
linear, so its JVP is the op applied to the tangents (``jvp_rules.linear_map_jvp``) and its VJP
the seed's backward (split, unbind, scatter-add, mask, slice)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxrules import _validate as V
from jaxrules import jvp_rules as J
from jaxrules import vjp_rules as R
from jaxrules.mechanism import define_op
from jaxrules.ops._sampling import normal
from jaxrules.registry import OpRecord, Sample, register


def _linear_op(name, primal, save=lambda out, *arrays, **_: ()):
    """A linear op with formulas ``jvp_rules.<name>_jvp`` / ``vjp_rules.<name>_vjp``."""
    return define_op(name, primal, getattr(J, f"{name}_jvp"), getattr(R, f"{name}_vjp"), save)


concatenate_op = _linear_op("concatenate", lambda *xs, axis, shapes: jnp.concatenate(xs, axis=axis))
stack_op = _linear_op("stack", lambda *xs, axis, shape: jnp.stack(xs, axis=axis))
take_along_axis_op = _linear_op(
    "take_along_axis",
    lambda x, indices, *, axis, shape: jnp.take_along_axis(x, indices, axis=axis),
    lambda out, x, indices, **_: indices,
)
masked_fill_op = _linear_op(
    "masked_fill",
    lambda x, mask, *, value: jnp.where(mask, jnp.asarray(value, x.dtype), x),
    lambda out, x, mask, **_: mask,
)
pad_op = _linear_op("pad", lambda x, *, widths: jnp.pad(x, widths))


def _same_dtype_arrays(op, arrays):
    arrays = [V.array(op, f"arrays[{k}]", a) for k, a in enumerate(arrays)]
    if not arrays:
        raise ValueError(f"{op}: needs at least one array")
    dtype = jnp.result_type(*arrays)
    return [a.astype(dtype) for a in arrays]


def concatenate(arrays, axis=0):
    """``jax.numpy.concatenate`` (seed ``cat_tensors_backward``: the cotangent is split back)."""
    arrays = _same_dtype_arrays("concatenate", arrays)
    ax = V.single_axis("concatenate", arrays[0].ndim, axis)
    for a in arrays[1:]:
        off_axis = lambda s: s[:ax] + s[ax + 1 :]  # noqa: E731
        if a.ndim != arrays[0].ndim or off_axis(a.shape) != off_axis(arrays[0].shape):
            raise ValueError(f"concatenate: shapes {[x.shape for x in arrays]} differ off axis {axis}")
    return concatenate_op(*arrays, axis=ax, shapes=tuple(a.shape for a in arrays))


def stack(arrays, axis=0):
    """``jax.numpy.stack`` (seed ``stack_tensors_backward``: the cotangent is unbound)."""
    arrays = _same_dtype_arrays("stack", arrays)
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
    """``jax.numpy.pad`` with ``mode='constant'`` and zero fill (seed
    ``constant_pad_nd_backward``: the cotangent's interior slice)."""
    if mode != "constant" or constant_values != 0:
        raise ValueError(f"pad: only mode='constant' with constant_values=0 is supported, got {mode!r}/{constant_values!r}")
    x = V.array("pad", "array", array)
    widths = np.broadcast_to(np.asarray(pad_width, dtype=int), (x.ndim, 2))
    if np.any(widths < 0):
        raise ValueError(f"pad: pad_width must be non-negative, got {pad_width!r}")
    return pad_op(x, widths=tuple(map(tuple, widths.tolist())))


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
    lambda rng, dt: [Sample((normal(rng, dt, 3, 4), ((1, 2), (0, 3)))), Sample((normal(rng, dt, 2, 3), 1))],
    lambda torch, x, pad_width: torch.nn.functional.pad(
        x, tuple(v for lo_hi in reversed(np.broadcast_to(np.asarray(pad_width), (x.ndim, 2)).tolist()) for v in lo_hi)
    ),
    "torch.nn.functional.pad", dtypes=_C,
))
