"""Argument checks shared by the public functions: bad input raises ``TypeError`` or
``ValueError`` naming the op and the argument, before any tracing work."""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules.checking import checked_only, runtime_check
from jaxrules.mechanism import concrete_entries, concrete_value


class ShapeTypeError(TypeError, ValueError):
    """Operand shapes that do not fit where jax.numpy raises ``TypeError`` (``matmul``'s
    contracting dimensions: ``dot_general``'s error), and a ``ValueError`` as the library's other
    shape refusals."""


class EmptyAxisIndexError(IndexError, ValueError):
    """An index into an empty axis: jax.numpy's error type there (``IndexError``), and a
    ``ValueError`` as the library's other refusals of bad input."""


def array(op: str, name: str, x, *, inexact: bool = True):
    """``x`` as a JAX array; integer and boolean input is promoted to a float dtype when
    ``inexact``, as ``jax.numpy`` does for these ops (``float_for``)."""
    if isinstance(x, str | bytes) or x is None:
        raise TypeError(f"{op}: argument {name!r} must be an array, got {type(x).__name__}")
    if not isinstance(x, jax.Array | np.ndarray | np.generic | int | float | complex | bool):
        try:
            x = np.asarray(x)
        except Exception as err:  # ragged lists and the like
            raise TypeError(f"{op}: argument {name!r} is not array-like ({err})") from None
        if not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
            raise TypeError(f"{op}: argument {name!r} must be numeric, got dtype {x.dtype}")
    x = jnp.asarray(x)
    if inexact and not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(float_for(x.dtype))
    return x


def inexact_arrays(op: str, **named) -> tuple:
    """The named arguments as JAX arrays of one inexact dtype: jax.numpy's promotion of them as
    given, under the user's promotion mode (a Python scalar is weakly typed: ``clip(x_bf16, 0,
    6)`` stays bfloat16; mixed strong dtypes raise under strict promotion, as jax.numpy), and an
    integer or boolean result promoted to a float (``float_for``)."""
    arrays = [array(op, name, value, inexact=False) for name, value in named.items()]
    dtype = jnp.result_type(*arrays)
    if not jnp.issubdtype(dtype, jnp.inexact):
        dtype = float_for(dtype)
    return tuple(a.astype(dtype) for a in arrays)


def float_for(dtype):
    """jax.numpy's float dtype for integer or boolean input (its ``to_inexact_dtype``): float64
    for a 64-bit integer (under ``jax_enable_x64``), float32 for the narrower ones and booleans,
    also under ``jax_enable_x64`` (``jnp.mean`` of int32 is float32 there)."""
    return jnp.result_type(float) if jnp.dtype(dtype).itemsize == 8 else jnp.dtype(jnp.float32)


def axes(op: str, ndim: int, axis, name: str = "axis") -> tuple[int, ...]:
    """Normalize ``axis`` (None, an int or a sequence of ints) to a sorted tuple."""
    if axis is None:
        return tuple(range(ndim))
    items = axis if isinstance(axis, tuple | list) else (axis,)
    out = []
    for a in items:
        try:
            a = operator.index(a)
        except TypeError:
            raise TypeError(f"{op}: {name} must be an int or a tuple of ints, got {axis!r}") from None
        if (ndim and not -ndim <= a < ndim) or (ndim == 0 and a not in (0, -1)):  # 0-d: 0 and -1, as torch
            raise ValueError(f"{op}: {name}={axis!r} is out of range for an array of rank {ndim}")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: {name}={axis!r} repeats an axis")
    return tuple(sorted(out)) if ndim else ()


def single_axis(op: str, ndim: int, axis, name: str = "axis") -> int:
    """Normalize one axis (an int) for an array of rank ``ndim`` (>= 1)."""
    if isinstance(axis, tuple | list) or axis is None:
        raise TypeError(f"{op}: {name} must be a single int, got {axis!r}")
    if ndim == 0:
        raise ValueError(f"{op}: needs an array of rank >= 1, got a scalar")
    return axes(op, ndim, axis, name)[0]


def broadcast(op: str, **arrays) -> tuple[int, ...]:
    """The broadcast shape of the named arrays; ``ValueError`` naming them if there is none."""
    try:
        return jnp.broadcast_shapes(*(jnp.shape(a) for a in arrays.values()))
    except ValueError:
        shapes = ", ".join(f"{k}: {jnp.shape(v)}" for k, v in arrays.items())
        raise ValueError(f"{op}: shapes do not broadcast ({shapes})") from None


def unsupported(op: str, **options) -> None:
    """``TypeError`` for a jax.numpy option this op does not implement, if it was given."""
    for name, value in options.items():
        if value is not None:
            raise TypeError(f"{op}: argument {name!r} is not supported by jaxrules (got {value!r})")


def unhonoured(op: str, **options) -> None:
    """``ValueError`` for a JAX option whose value jaxrules cannot honour, if it was given (not
    None)."""
    for name, value in options.items():
        if value is not None:
            raise ValueError(f"{op}: argument {name!r} must be None in jaxrules (got {value!r})")


def flag(op: str, name: str, value) -> bool:
    """A boolean option (Python or NumPy bool)."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{op}: {name} must be a bool, got {value!r}")
    return bool(value)


def static_scalar(op: str, name: str, value):
    """A Python number from a static scalar (a Python or NumPy number, or a 0-d NumPy array)."""
    if isinstance(value, np.ndarray | np.generic) and np.ndim(value) == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float | complex):
        raise TypeError(f"{op}: {name} must be a static number, got {value!r}")
    return value


def host_value(value):
    """A hyperparameter argument's value on the host, as the caller gave it: a NumPy array for a
    Python or NumPy number or a concrete array, None for a tracer. (Read before any conversion:
    under ``jit`` even ``jnp.asarray(0.5, dtype)`` is traced, and a check on it would become a
    host callback in every call.)"""

    if isinstance(value, int | float | np.number) and not isinstance(value, bool | np.bool_):
        return np.asarray(value)
    return concrete_value(value)


def hyperparameter(op: str, name: str, value, like=None, *, low=None, strict=True, finite=True):
    """A real hyperparameter (``alpha``, ``beta``, ``delta``, ``margin``, ``eps``, ...) as a JAX
    array in ``like``'s dtype (a 0-d array for a Python number): Python and NumPy numbers, arrays
    and tracers, so ``jit`` compiles once for every value, ``vmap`` maps over it and ``grad``
    differentiates it. The checks that need its value (``> low``, or ``>= low`` when not
    ``strict``; finite) run when the value is concrete; for a traced value the bound is checked
    at run time (``jaxrules.checking.runtime_check``: under ``jit`` a ``JaxRuntimeError`` whose
    text ends with the message, a ``ValueError`` under ``jaxrules.checked``)."""
    if isinstance(value, bool | np.bool_ | str | bytes) or value is None:
        raise TypeError(f"{op}: {name} must be a real number or array, got {value!r}")
    if isinstance(value, int | float):
        host = np.asarray(float(value))
        arr = jnp.asarray(float(value), None if like is None else like.dtype)
    else:
        try:
            arr = jnp.asarray(value)
        except TypeError:
            raise TypeError(f"{op}: {name} must be a real number or array, got {type(value).__name__}") from None
        if not (jnp.issubdtype(arr.dtype, jnp.integer) or jnp.issubdtype(arr.dtype, jnp.floating)):
            raise TypeError(f"{op}: {name} must be real, got dtype {arr.dtype}")
        host = host_value(value)
        arr = arr.astype(jnp.result_type(float) if like is None else like.dtype)
    kind = None if low is None else {(0, True): "positive", (0, False): "non-negative"}.get(
        (low, strict), f"{'>' if strict else '>='} {low}")
    if host is not None:
        if finite and not np.all(np.isfinite(host)):
            raise ValueError(f"{op}: {name} must be finite, got {value!r}")
        if low is not None and not np.all(host > low if strict else host >= low):
            raise ValueError(f"{op}: {name} must be {kind}, got {value!r}")
    elif low is not None:  # traced: the run-time check (jaxrules.checking; jaxrules.checked raises it)

        runtime_check(jnp.logical_not(arr > low if strict else arr >= low), f"{op}: {name} must be {kind} "
                      "(a traced value)")
    if like is not None:
        broadcast(op, **{"x": like, name: arr})
    return arr


def wide_indices(indices):
    """Integer ``indices`` of at least 32 bits (int8/int16/uint8/uint16 become int32), so that a
    bound compared with them or a position put in their place (``size``, a clip's ``size - 1``)
    is not cast into a dtype too narrow to hold it."""
    return indices.astype(jnp.int32) if jnp.dtype(indices.dtype).itemsize < 4 else indices


def unit_interval(op: str, name: str, values, hint: str = "") -> None:
    """Every element of ``values`` in ``[0, 1]`` (a NaN is not), torch's check of probabilities
    ("all elements of input should be between 0 and 1"): ``ValueError`` naming ``op`` when they are
    concrete (eagerly, also under an eager ``grad`` or ``vmap``); when traced a run-time check inside
    ``jaxrules.checked`` only (elsewhere the op's result is NaN there)."""
    host = concrete_entries(values)
    if host is not None:
        host = np.asarray(host)
        bad = ~((host >= 0) & (host <= 1))
        if bad.any():
            raise ValueError(f"{op}: all elements of {name} must be between 0 and 1, got "
                             f"{host[bad].ravel()[:5].tolist()}{hint}")
        return
    arr = jnp.asarray(values)
    checked_only(~((arr >= 0) & (arr <= 1)), f"{op}: all elements of {name} must be between 0 and 1 (traced values)")


def index_range(op: str, name: str, indices, size: int, *, allowed=None, low: int = 0) -> None:
    """Integer ``indices`` must lie in ``[low, size)`` (or equal ``allowed``, e.g. an
    ``ignore_index``), torch's rule (``low`` is 0, or ``-size`` where negative indices count from
    the end): ``ValueError`` naming ``op`` when they are concrete (also under an eager ``vmap``);
    when traced a run-time check inside ``jaxrules.checked`` only (``checking.checked_only``;
    elsewhere the op makes its result NaN)."""

    host = concrete_entries(indices)
    if host is not None:
        host = np.asarray(host).astype(np.int64)
        bad = (host < low) | (host >= size)
        if allowed is not None:
            bad &= host != allowed
        if bad.any():
            ignored = "" if allowed is None else f" (or {allowed}, the ignored index)"
            raise ValueError(f"{op}: {name} must lie in [{low}, {size}){ignored}, got "
                             f"{host[bad].ravel()[:5].tolist()}")
        return
    wide = wide_indices(jnp.asarray(indices))
    bad = (wide < low) | (wide >= size)
    if allowed is not None:
        bad &= wide != allowed
    checked_only(bad, f"{op}: {name} must lie in [{low}, {size}), got an index out of range (traced indices)")
