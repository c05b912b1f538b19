"""``NestedTensor``: a batch of B arrays that differ in the length of their first axis (the
jagged layout of torch's NJT).

Layout: ``values`` of shape (total, *inner) holds the components one after the other, and
``offsets`` (B + 1 integers, ``offsets[0] = 0``, ``offsets[B] = total``) says where each
starts. The logical shape is (B, ragged, *inner); axis 1 is the ragged one.

A NestedTensor is a JAX pytree with two leaves, ``values`` and the offsets, so

* ``jax.jit`` traces it once per (B, total, inner shape, dtype): changing only the lengths
  does not recompile;
* ``jax.grad`` / ``jax.vjp`` with respect to it return a NestedTensor of gradients with the
  same offsets, and ``jax.jvp`` takes ``nt.with_values(tangent)`` as its tangent.

The offsets leaf is stored as floating point (exact integers, float32 up to 2**24 rows) because
``jax.grad`` refuses integer leaves. Every op reads it through ``offsets`` (int32), whose
derivative is zero, so its cotangent is always zero; when JAX rebuilds a NestedTensor from such
a zero cotangent it takes the offsets from the primal (``_unflatten``). Under ``jax.jit`` of a
gradient the primal's offsets are not known on the host; there the returned gradient's offsets
are zero (its ``values`` are right): use ``nt.with_values(grad.values)``.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules.checking import checked_only
from jaxrules.mechanism import concrete_value
from jaxrules.ops.shape import take
from jaxrules.partials import nan_factor, runtime_check

__all__ = ["NestedTensor", "from_jagged", "from_lengths", "from_padded", "nested_tensor"]

_FLOAT32_EXACT = 2**24  # float32 holds every integer up to this exactly


def _is_concrete(x) -> bool:
    return concrete_value(x) is not None


def _host_array(x) -> np.ndarray:
    """``x`` (concrete, or a list) as a NumPy array."""
    value = concrete_value(x)
    return np.asarray(x) if value is None else value


def _offsets_leaf_dtype(total: int):
    if total < _FLOAT32_EXACT:
        return jnp.float32
    if not jax.config.jax_enable_x64:
        raise ValueError(
            f"NestedTensor: {total} rows need float64 offsets (float32 is exact up to 2**24); "
            "enable jax_enable_x64"
        )
    return jnp.float64


class _Static:
    """The pytree aux data: ``max_seqlen`` (static, compared) and the host copy of the offsets
    (not compared, so a new batch with other lengths reuses the compiled function)."""

    __slots__ = ("host_offsets", "max_seqlen")

    def __init__(self, host_offsets, max_seqlen):
        self.host_offsets, self.max_seqlen = host_offsets, max_seqlen

    def __eq__(self, other):
        return isinstance(other, _Static) and other.max_seqlen == self.max_seqlen

    def __hash__(self):
        return hash(("NestedTensor", self.max_seqlen))


def _operator(name, fn, reflected=False):
    """A binary operator method: ``fn`` on the values (``_binary``); ``reflected`` for
    ``other <op> self``."""

    def method(self, other):
        return _binary(name, fn, other, self) if reflected else _binary(name, fn, self, other)

    method.__name__ = f"__{'r' if reflected else ''}{name}__"
    return method


@jax.tree_util.register_pytree_node_class
class NestedTensor:
    """B arrays of shapes ``(n_i, *inner)`` packed as ``values`` ``(sum n_i, *inner)`` plus
    ``offsets`` (B + 1). Build one with ``nested_tensor``, ``from_jagged``, ``from_lengths``
    or ``from_padded``; ``max_seqlen`` (optional, static) bounds the lengths for
    ``scaled_dot_product_attention`` and ``to_padded`` under jit."""

    __slots__ = ("_host_offsets", "_offsets_leaf", "_values", "max_seqlen")

    # -- pytree ---------------------------------------------------------------------------

    def tree_flatten(self):
        return (self._values, self._offsets_leaf), _Static(self._host_offsets, self.max_seqlen)

    @classmethod
    def tree_unflatten(cls, static, leaves):
        values, offsets = leaves
        host = None
        fetched = concrete_value(offsets) if static.host_offsets is not None else None
        if fetched is not None and fetched.shape == static.host_offsets.shape:
            if not fetched.any() and static.host_offsets[-1] != 0:
                # A zero cotangent (or tangent) of the offsets: the offsets are the primal's.
                offsets = jnp.asarray(static.host_offsets, jnp.asarray(offsets).dtype)
                fetched = static.host_offsets
            host = fetched.astype(np.int64)
        return cls._make(values, offsets, host, static.max_seqlen)

    @classmethod
    def _make(cls, values, offsets_leaf, host_offsets, max_seqlen):
        nt = object.__new__(cls)
        nt._values, nt._offsets_leaf, nt._host_offsets, nt.max_seqlen = values, offsets_leaf, host_offsets, max_seqlen
        return nt

    # -- attributes -----------------------------------------------------------------------

    @property
    def values(self) -> jax.Array:
        """The packed components, shape ``(total, *inner)``."""
        return self._values

    @property
    def offsets(self) -> jax.Array:
        """int32 (B + 1,): component ``i`` is ``values[offsets[i]:offsets[i + 1]]``."""
        return jnp.asarray(self._offsets_leaf).astype(jnp.int32)

    @property
    def batch_size(self) -> int:
        return int(np.shape(self._offsets_leaf)[0]) - 1

    @property
    def inner_shape(self) -> tuple[int, ...]:
        return tuple(self._values.shape[1:])

    @property
    def ndim(self) -> int:
        """Logical rank: 2 + len(inner_shape)."""
        return self._values.ndim + 1

    @property
    def dtype(self):
        return self._values.dtype

    @property
    def shape(self) -> tuple:
        """``(B, None, *inner)``: the ragged length is ``None``."""
        return (self.batch_size, None, *self.inner_shape)

    def lengths(self) -> jax.Array:
        """int32 (B,): the length of each component."""
        return jnp.diff(self.offsets)

    def segment_ids(self) -> jax.Array:
        """int32 (total,): the component each row of ``values`` belongs to (traceable)."""
        return jnp.repeat(
            jnp.arange(self.batch_size, dtype=jnp.int32), self.lengths(), total_repeat_length=self._values.shape[0]
        )

    def host_offsets(self, op: str) -> np.ndarray:
        """The offsets as a NumPy array; ``ValueError`` (naming ``op``) when they are traced."""
        if self._host_offsets is not None:
            return self._host_offsets
        host = concrete_value(self._offsets_leaf)
        if host is not None:
            host = host.astype(np.int64)
            if host[-1] != self._values.shape[0]:
                raise ValueError(
                    f"{op}: the offsets end at {host[-1]}, not at the number of rows ({self._values.shape[0]}); "
                    "a gradient NestedTensor returned from inside jax.jit carries zero offsets: rebuild it with "
                    "nt.with_values(grad.values)"
                )
            self._host_offsets = host
            return host
        raise ValueError(
            f"{op}: needs the lengths on the host, but the offsets are traced (inside jax.jit); "
            "call it outside jit, or pass static sizes where the function takes them"
        )

    def with_values(self, values) -> NestedTensor:
        """The same offsets with new ``values`` (same number of rows), e.g. a tangent for jax.jvp."""
        values = jnp.asarray(values)
        if values.ndim < 1 or values.shape[0] != self._values.shape[0]:
            raise ValueError(
                f"NestedTensor.with_values: values must have {self._values.shape[0]} rows, got shape {values.shape}"
            )
        return NestedTensor._make(values, self._offsets_leaf, self._host_offsets, self.max_seqlen)

    # -- converters -----------------------------------------------------------------------

    def unbind(self) -> list[jax.Array]:
        """The B components (needs concrete offsets)."""
        o = self.host_offsets("unbind")
        return [self._values[o[i] : o[i + 1]] for i in range(self.batch_size)]

    def select(self, i: int) -> jax.Array:
        """Component ``i`` (needs concrete offsets). Its derivative is seed
        ``_nested_select_backward``: zeros with ``g`` copied into component ``i``."""
        if not isinstance(i, numbers.Integral) or not -self.batch_size <= i < self.batch_size:
            raise ValueError(f"NestedTensor.select: index {i!r} is out of range for {self.batch_size} components")
        o = self.host_offsets("select")
        i %= self.batch_size
        return self._values[o[i] : o[i + 1]]

    def max_length(self, op: str = "max_length") -> int:
        """A static upper bound of the lengths: ``max_seqlen`` if set, else the longest
        component (needs concrete offsets)."""
        if self.max_seqlen is not None:
            return self.max_seqlen
        return int(np.diff(self.host_offsets(op)).max(initial=0))

    def to_padded(self, padding_value=0.0, max_len: int | None = None) -> jax.Array:
        """``(B, max_len, *inner)`` with ``padding_value`` after each component's end; ``max_len``
        defaults to :meth:`max_length` (pass it under jit)."""
        length = self.max_length("to_padded") if max_len is None else _positive_int("to_padded", "max_len", max_len, 0)
        pos = jnp.arange(length, dtype=jnp.int32)
        rows = self.offsets[:-1, None] + pos  # (B, L)
        inside = pos < self.lengths()[:, None]
        gathered = self._values[jnp.where(inside, rows, 0)] if self._values.shape[0] else jnp.zeros(
            (self.batch_size, length, *self.inner_shape), self.dtype
        )
        mask = inside.reshape(inside.shape + (1,) * len(self.inner_shape))
        return jnp.where(mask, gathered, jnp.asarray(padding_value, self.dtype))

    def split_with_sizes(self, sizes: Sequence[int], axis: int = -1) -> list[NestedTensor]:
        """Split along an inner ``axis`` (logical axis >= 2) into pieces of ``sizes`` (e.g. a
        fused qkv projection); each piece keeps the offsets."""
        ax = _inner_axis("split_with_sizes", self, axis)
        sizes = [_positive_int("split_with_sizes", "sizes", s, 0) for s in sizes]
        if sum(sizes) != self._values.shape[ax]:
            raise ValueError(
                f"split_with_sizes: sizes {sizes} must sum to the size of axis {axis}, {self._values.shape[ax]}"
            )
        cuts = np.cumsum(sizes)[:-1].tolist()
        return [self.with_values(p) for p in jnp.split(self._values, cuts, axis=ax)]

    # -- display and arithmetic -----------------------------------------------------------

    def __repr__(self) -> str:
        if self._host_offsets is not None or _is_concrete(self._offsets_leaf):
            lengths = np.diff(self.host_offsets("repr")).tolist()
            shown = lengths if len(lengths) <= 8 else [*lengths[:4], "...", *lengths[-2:]]
            lengths_text = f"lengths={shown}".replace("'...'", "...")
        else:
            lengths_text = "lengths=<traced>"
        return (
            f"NestedTensor(batch={self.batch_size}, {lengths_text}, inner_shape={self.inner_shape}, "
            f"dtype={self.dtype})"
        )

    def __neg__(self):
        return self.with_values(-self._values)

    __add__, __radd__ = _operator("add", jnp.add), _operator("add", jnp.add, reflected=True)
    __sub__, __rsub__ = _operator("subtract", jnp.subtract), _operator("subtract", jnp.subtract, reflected=True)
    __mul__, __rmul__ = _operator("multiply", jnp.multiply), _operator("multiply", jnp.multiply, reflected=True)
    __truediv__ = _operator("divide", jnp.divide)
    __rtruediv__ = _operator("divide", jnp.divide, reflected=True)
    __pow__ = _operator("power", jnp.power)


# ----------------------------------------------------------------------------------------------
# Checks shared by the constructors and ops


def _positive_int(op, name, value, minimum=1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{op}: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def logical_axis(op: str, nt: NestedTensor, axis, *, ragged_ok: bool = True) -> int:
    """``axis`` of the logical shape (B, ragged, *inner), normalized; the batch axis 0 runs
    across components of different lengths, so no op is defined over it."""
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    if not -nt.ndim <= axis < nt.ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a NestedTensor of rank {nt.ndim}")
    axis %= nt.ndim
    if axis == 0:
        raise ValueError(f"{op}: axis 0 runs across the components (of different lengths); it is undefined")
    if axis == 1 and not ragged_ok:
        raise ValueError(f"{op}: axis 1 is the ragged axis; an inner axis is needed")
    return axis


def _inner_axis(op: str, nt: NestedTensor, axis) -> int:
    """The ``values`` axis of logical inner ``axis`` (>= 2, or negative)."""
    return logical_axis(op, nt, axis, ragged_ok=False) - 1


def same_offsets(op: str, a: NestedTensor, b: NestedTensor) -> None:
    """``ValueError`` unless ``a`` and ``b`` have the same offsets: on the host when both are
    concrete, else at run time (a host callback, so also under jit) unless they share the very
    offsets array."""
    if a._offsets_leaf is b._offsets_leaf:
        return
    if np.shape(a._offsets_leaf) != np.shape(b._offsets_leaf) or a._values.shape[0] != b._values.shape[0]:
        raise ValueError(
            f"{op}: the NestedTensors have different offsets (batch {a.batch_size} vs {b.batch_size}, "
            f"total {a._values.shape[0]} vs {b._values.shape[0]})"
        )
    ha, hb = (x.host_offsets("same_offsets") if _is_concrete(x._offsets_leaf) else None for x in (a, b))
    if ha is not None and hb is not None:
        if not np.array_equal(ha, hb):
            raise ValueError(f"{op}: the NestedTensors have different offsets: {ha.tolist()} vs {hb.tolist()}")
        return

    runtime_check(jnp.any(a.offsets != b.offsets), f"{op}: the NestedTensors have different offsets")


def dense_operand(op: str, nt: NestedTensor, x) -> jax.Array:
    """A dense operand of a binary op, as an array that broadcasts against ``values``: either
    broadcastable to the inner shape (rank <= len(inner)), or per component, of shape
    (B, 1, *inner) (broadcastable), gathered to the rows."""
    x = jnp.asarray(x)
    if x.ndim <= len(nt.inner_shape):
        try:
            np.broadcast_shapes(x.shape, nt.inner_shape)
        except ValueError:
            raise ValueError(
                f"{op}: a dense operand of shape {x.shape} does not broadcast to the inner shape {nt.inner_shape}"
            ) from None
        return jax.lax.expand_dims(x, tuple(range(1 + len(nt.inner_shape) - x.ndim)))  # the values' rank
    if x.ndim == nt.ndim and x.shape[1] == 1 and x.shape[0] in (1, nt.batch_size):
        try:
            np.broadcast_shapes(x.shape[2:], nt.inner_shape)
        except ValueError:
            pass
        else:
            rows = x[:, 0]
            return take(rows, nt.segment_ids(), axis=0) if x.shape[0] > 1 else rows
    raise ValueError(
        f"{op}: a dense operand must broadcast to the inner shape {nt.inner_shape} or have shape "
        f"(B, 1, *inner) = ({nt.batch_size}, 1, ...), got {x.shape}"
    )


def _binary(op: str, fn, a, b) -> NestedTensor:
    """Elementwise ``fn`` on the values: NestedTensors with the same offsets, or one dense
    operand broadcast to the rows (derivatives: JAX's rules of ``fn`` and of the gather)."""
    nt = a if isinstance(a, NestedTensor) else b
    if isinstance(a, NestedTensor) and isinstance(b, NestedTensor):
        same_offsets(op, a, b)
        return nt.with_values(fn(a._values, b._values))
    if isinstance(a, NestedTensor):
        return nt.with_values(fn(a._values, dense_operand(op, a, b)))
    return nt.with_values(fn(dense_operand(op, b, a), b._values))


# ----------------------------------------------------------------------------------------------
# Constructors


def _check_max_seqlen(max_seqlen):
    return None if max_seqlen is None else _positive_int("NestedTensor", "max_seqlen", max_seqlen, 0)


def from_jagged(values, offsets, *, max_seqlen: int | None = None) -> NestedTensor:
    """A NestedTensor from packed ``values`` ``(total, *inner)`` and ``offsets`` (B + 1 integers,
    0 first, total last, non-decreasing). Concrete offsets are checked (``ValueError``); traced
    ones (inside jit) inside ``jaxrules.checked``, and outside it invalid traced offsets make
    the values NaN (every result computed from them; integer values are kept as given)."""
    values = jnp.asarray(values)
    if values.ndim < 1:
        raise ValueError("from_jagged: values must have shape (total, *inner), got a scalar")
    total = values.shape[0]
    if _is_concrete(offsets) or isinstance(offsets, list | tuple):
        host = _host_array(offsets)
        if host.ndim != 1 or host.size < 1:
            raise ValueError(f"from_jagged: offsets must be a 1-d array of B + 1 integers, got shape {host.shape}")
        if not (np.issubdtype(host.dtype, np.integer) or np.all(np.mod(host, 1) == 0)):
            raise TypeError(f"from_jagged: offsets must be integers, got {host.dtype}")
        host = host.astype(np.int64)
        if host[0] != 0 or host[-1] != total:
            raise ValueError(
                f"from_jagged: offsets must start at 0 and end at the number of rows of values ({total}), "
                f"got {host[0]} ... {host[-1]}"
            )
        if np.any(np.diff(host) < 0):
            bad = int(np.argmax(np.diff(host) < 0))
            raise ValueError(
                "from_jagged: offsets must be non-decreasing (lengths >= 0); "
                f"length {bad} is {host[bad + 1] - host[bad]}"
            )
        leaf = jnp.asarray(host, _offsets_leaf_dtype(total))
    else:
        offsets = jnp.asarray(offsets)
        if offsets.ndim != 1 or offsets.shape[0] < 1:
            raise ValueError(f"from_jagged: offsets must be a 1-d array of B + 1 integers, got shape {offsets.shape}")
        host, leaf = None, offsets.astype(_offsets_leaf_dtype(total))
        values = _guard_traced_offsets("from_jagged", values, offsets)
    return NestedTensor._make(values, leaf, host, _check_max_seqlen(max_seqlen))


def _guard_traced_offsets(op, values, offsets, bad=False):
    """``values``, NaN when the traced ``offsets`` (or ``bad``, a caller's further condition) are
    invalid: not from 0 to ``len(values)``, or decreasing. Inside ``jaxrules.checked`` a run-time
    error instead; outside it no check runs (no host callback in a jitted step), and NaN is what
    the results show, never the finite values of misread components."""

    offsets = jnp.asarray(offsets)
    bad = (bad | (offsets[0] != 0) | (offsets[-1] != values.shape[0])
           | jnp.any(offsets[1:] < offsets[:-1]))
    checked_only(bad, f"{op}: offsets must start at 0, not decrease and end at the number of rows of values "
                 f"({values.shape[0]}) (traced offsets)")
    if not jnp.issubdtype(values.dtype, jnp.inexact):
        return values
    return values * nan_factor(bad, values.real.dtype)


def from_lengths(values, lengths, *, max_seqlen: int | None = None) -> NestedTensor:
    """A NestedTensor from packed ``values`` and the B ``lengths`` (non-negative, summing to
    the number of rows).

    Example:
        >>> import jax.numpy as jnp, jaxrules.nested as nested
        >>> x = nested.from_lengths(jnp.arange(5.0)[:, None], [3, 2])
        >>> print([c.ravel().tolist() for c in x.unbind()])
        [[0.0, 1.0, 2.0], [3.0, 4.0]]
    """
    if _is_concrete(lengths) or isinstance(lengths, list | tuple):
        lengths = _host_array(lengths)
        if lengths.ndim != 1:
            raise ValueError(f"from_lengths: lengths must be a 1-d array, got shape {lengths.shape}")
        if np.any(lengths < 0):
            raise ValueError(f"from_lengths: lengths must be >= 0, got {lengths.tolist()}")
        return from_jagged(values, np.concatenate([[0], np.cumsum(lengths)]), max_seqlen=max_seqlen)
    lengths = jnp.asarray(lengths)
    offsets = jnp.concatenate([jnp.zeros(1, lengths.dtype), jnp.cumsum(lengths)])
    return from_jagged(values, offsets, max_seqlen=max_seqlen)


def nested_tensor(arrays: Sequence, *, max_seqlen: int | None = None) -> NestedTensor:
    """A NestedTensor from a list of arrays of shapes ``(n_i, *inner)`` (same inner shape).

    Example:
        >>> import jax.numpy as jnp, jaxrules.nested as nested
        >>> x = nested.nested_tensor([jnp.ones((3, 2)), jnp.ones((1, 2))])  # lengths 3 and 1
        >>> print(x.values.shape, x.offsets.tolist())
        (4, 2) [0, 3, 4]
    """
    if isinstance(arrays, NestedTensor) or not isinstance(arrays, Sequence) or isinstance(arrays, str):
        raise TypeError(f"nested_tensor: expected a list of arrays, got {type(arrays).__name__}")
    if not arrays:
        raise ValueError("nested_tensor: needs at least one array")
    arrays = [jnp.asarray(a) for a in arrays]
    for k, a in enumerate(arrays):
        if a.ndim < 1 or a.shape[1:] != arrays[0].shape[1:]:
            raise ValueError(
                f"nested_tensor: arrays[{k}] has shape {a.shape}; every array needs shape (n_i, *inner) "
                f"with the inner shape of arrays[0], {arrays[0].shape[1:]}"
            )
    dtype = jnp.result_type(*arrays)
    values = jnp.concatenate([a.astype(dtype) for a in arrays])
    return from_lengths(values, [a.shape[0] for a in arrays], max_seqlen=max_seqlen)


def from_padded(padded, lengths, *, total: int | None = None, max_seqlen: int | None = None) -> NestedTensor:
    """A NestedTensor from ``padded`` ``(B, L, *inner)`` keeping the first ``lengths[i]`` rows of
    each batch entry. ``total`` (the sum of the lengths) is needed when the lengths are traced."""
    padded = jnp.asarray(padded)
    if padded.ndim < 2:
        raise ValueError(f"from_padded: padded must have shape (B, L, *inner), got {padded.shape}")
    b, length = padded.shape[:2]
    if _is_concrete(lengths) or isinstance(lengths, list | tuple):
        host = _host_array(lengths)
        if host.shape != (b,):
            raise ValueError(f"from_padded: lengths must have shape ({b},), got {host.shape}")
        if np.any(host < 0) or np.any(host > length):
            raise ValueError(f"from_padded: lengths must lie in [0, {length}], got {host.tolist()}")
        if total is not None and total != int(host.sum()):
            raise ValueError(f"from_padded: total={total} but the lengths sum to {int(host.sum())}")
        total = int(host.sum())
        lengths = host
    elif total is None:
        raise ValueError("from_padded: the lengths are traced (inside jit); pass total=sum(lengths) (static)")
    lengths_arr = jnp.asarray(lengths, jnp.int32)
    offsets = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(lengths_arr)])
    row = jnp.arange(total, dtype=jnp.int32)
    batch = jnp.repeat(jnp.arange(b, dtype=jnp.int32), lengths_arr, total_repeat_length=total)
    values = padded[batch, row - offsets[batch]]
    if isinstance(lengths, np.ndarray):
        offsets = np.concatenate([[0], np.cumsum(lengths)])
    else:  # traced lengths: each in [0, L], summing to total (else NaN values, or an error inside checked)
        values = _guard_traced_offsets("from_padded", values, offsets,
                                       jnp.any((lengths_arr < 0) | (lengths_arr > length)))
    return from_jagged(values, offsets, max_seqlen=max_seqlen)
