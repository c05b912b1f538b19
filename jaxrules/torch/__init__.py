"""torch's signatures for literal PyTorch ports: ``jaxrules.torch`` (tensor functions such as
``cumsum(input, dim)``, ``std(input, dim, correction=1)``, ``topk``, ``sort``, ``norm``),
``jaxrules.torch.nn.functional`` and ``jaxrules.torch.linalg``.

Every function is a thin adapter over the op of ``jaxrules.numpy`` / ``jaxrules.linalg`` with the
same derivative rules: it translates torch's names (``input``, ``dim``, ``keepdim``, ``other``),
defaults (``std``'s Bessel correction, ``sort``'s ``(values, indices)``) and overloads
(``max(input)``, ``max(input, dim)``, ``max(input, other)``). It computes nothing of its own.
``jaxrules.numpy`` and ``jaxrules.nn`` keep JAX's conventions; ``docs/differences.md``, "Which
namespace to use when", compares them and lists what cannot be mirrored (in-place ops, ``out=``,
``torch.Tensor`` methods).
"""

from __future__ import annotations

import builtins
from collections import namedtuple

import jax.numpy as jnp
import numpy as np

import jaxrules._validate as _V
import jaxrules.linalg as _L
import jaxrules.numpy as _np
from jaxrules.nn import logsumexp as _logsumexp
from jaxrules.torch import linalg, nn

__all__ = [
    "abs", "amax", "amin", "angle", "arctan2", "argsort", "atan2", "cat", "cdist", "cholesky_inverse",
    "cholesky_solve", "clamp", "clip", "concat", "concatenate", "copysign", "cummax", "cummin", "cumprod", "cumsum",
    "deg2rad", "det", "dist", "gather", "index_reduce", "kthvalue", "linalg", "log1p", "log_softmax",
    "logcumsumexp", "logsumexp", "lu_unpack", "masked_fill", "matmul", "matrix_exp", "max", "mean", "median", "min",
    "nanmedian", "nanquantile", "nansum", "nn", "norm", "ormqr", "polar", "pow", "prod", "quantile", "rad2deg",
    "renorm", "repeat_interleave", "scatter_reduce", "sgn", "sign", "sinc", "softmax", "sort", "split", "stack",
    "std", "std_mean", "sum", "take_along_dim", "tensor_split", "tile", "topk", "unbind", "var", "var_mean",
]

# torch's named results: ``torch.sort(x).values``, ``torch.max(x, 0).indices``
SortResult = namedtuple("SortResult", ["values", "indices"])


def _no_out(op, out):
    """JAX arrays are immutable: ``out=`` would leave the caller's array unchanged."""
    if out is not None:
        raise ValueError(f"{op}: out= cannot be mirrored (JAX arrays are immutable); it must be None")


def _dims(dim):
    """torch's ``dim``: None or ``()`` (every dim), an int, or a sequence of ints."""
    if dim is None or (isinstance(dim, tuple | list) and len(dim) == 0):
        return None
    return dim if isinstance(dim, int) else tuple(dim)


def _cast(x, dtype):
    return jnp.asarray(x) if dtype is None else jnp.asarray(x).astype(dtype)


# ---------------------------------------------------------------------------------------------
# Elementwise


abs = _np.abs  # noqa: A001
sign = _np.sign
sgn = _np.sign  # torch.sgn: z / |z| for complex, sign for real (jaxrules.numpy.sign's derivative is sgn's)
log1p = _np.log1p
sinc = _np.sinc
deg2rad = _np.deg2rad
rad2deg = _np.rad2deg
angle = _np.angle
polar = _np.polar


def pow(input, exponent, *, out=None):  # noqa: A001
    """``input ** exponent``; mirrors ``torch.pow`` (``jaxrules.numpy.power``)."""
    _no_out("pow", out)
    return _np.power(input, exponent)


def atan2(input, other, *, out=None):
    """``atan(input / other)`` in the right quadrant; mirrors ``torch.atan2``."""
    _no_out("atan2", out)
    return _np.arctan2(input, other)


arctan2 = atan2


def copysign(input, other, *, out=None):
    """``|input|`` with ``other``'s sign; mirrors ``torch.copysign``."""
    _no_out("copysign", out)
    return _np.copysign(input, other)


def clamp(input, min=None, max=None, *, out=None):  # noqa: A002
    """``min(max(input, min), max)``; mirrors ``torch.clamp`` (torch's gradient at the bounds).
    At least one bound must be given (``ValueError``; torch raises ``RuntimeError``)."""
    _no_out("clamp", out)
    if min is None and max is None:
        raise ValueError("clamp: at least one of 'min' and 'max' must be given (as torch)")
    return _np.clip(input, min, max)


clip = clamp


def matmul(input, other, *, out=None):
    """The matrix product; mirrors ``torch.matmul``."""
    _no_out("matmul", out)
    return _np.matmul(input, other)


def masked_fill(input, mask, value):
    """``value`` where ``mask``, else ``input``, of the shape ``input`` and ``mask`` broadcast to
    (torch's out-of-place ``torch.masked_fill`` broadcasts both; the gradient of ``input`` sums
    over the broadcast axes); mirrors ``torch.masked_fill``."""
    x, m = jnp.asarray(input), jnp.asarray(mask)
    try:
        shape = jnp.broadcast_shapes(x.shape, m.shape)
    except ValueError:
        raise ValueError(f"masked_fill: mask of shape {m.shape} does not broadcast with input's shape "
                         f"{x.shape}") from None
    return _np.masked_fill(jnp.broadcast_to(x, shape), m, value)


# ---------------------------------------------------------------------------------------------
# Reductions and scans


def sum(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A001
    """The sum over ``dim`` (every dim if None); mirrors ``torch.sum``."""
    return _np.sum(input, axis=_dims(dim), keepdims=keepdim, dtype=dtype)


def nansum(input, dim=None, keepdim=False, *, dtype=None):
    """The sum over ``dim`` with NaN as 0; mirrors ``torch.nansum``."""
    return _np.nansum(input, axis=_dims(dim), keepdims=keepdim, dtype=dtype)


def mean(input, dim=None, keepdim=False, *, dtype=None):
    """The mean over ``dim``; mirrors ``torch.mean``."""
    return _np.mean(input, axis=_dims(dim), keepdims=keepdim, dtype=dtype)


def prod(input, dim=None, keepdim=False, *, dtype=None):
    """The product over ``dim``; mirrors ``torch.prod``."""
    return _np.prod(input, axis=dim, keepdims=keepdim, dtype=dtype)


def amax(input, dim=(), keepdim=False):
    """The maximum over ``dim`` (``()``: every dim), ties sharing the gradient; mirrors ``torch.amax``."""
    return _np.amax(input, axis=_dims(dim), keepdims=keepdim)


def amin(input, dim=(), keepdim=False):
    """The minimum over ``dim``; mirrors ``torch.amin``."""
    return _np.amin(input, axis=_dims(dim), keepdims=keepdim)


def _max_min(fn, other_fn, input, dim, keepdim):
    """torch's overloads: no ``dim`` reduces everything, an integer ``dim`` gives
    ``(values, indices)``, anything else is the elementwise ``other``."""
    if dim is None:
        return fn(input)
    if not isinstance(dim, int | np.integer) or isinstance(dim, bool):  # torch.max(input, other)
        return other_fn(input, dim)
    v, i = fn(input, axis=dim, keepdims=keepdim, return_indices=True)
    return SortResult(v, i)


def max(input, dim=None, keepdim=False):  # noqa: A001
    """The maximum, ties sharing the gradient evenly. Mirrors ``torch.max``'s overloads.

    Args:
        input: the array.
        dim: None (every entry), an int (returns ``(values, indices)``, a named tuple), or an
            array ``other`` (the elementwise maximum, JAX's ``maximum``).
        keepdim: keep the reduced dim with size 1.

    Returns:
        The maximum; ``(values, indices)`` for an int ``dim``.
    """
    return _max_min(_np.max, _np.maximum, input, dim, keepdim)


def min(input, dim=None, keepdim=False):  # noqa: A001
    """As ``max``, for the minimum. Mirrors ``torch.min``."""
    return _max_min(_np.min, _np.minimum, input, dim, keepdim)


def median(input, dim=None, keepdim=False):
    """``median(input)``: the median; ``median(input, dim, keepdim)``: ``(values, indices)``.
    Mirrors ``torch.median``, except that an even count gives the mean of the two middle
    values (torch: the lower one; ``docs/differences.md``)."""
    if dim is None:
        return _np.median(input)
    return SortResult(*_np.median(input, axis=dim, keepdims=keepdim, return_indices=True))


def nanmedian(input, dim=None, keepdim=False):
    """``median`` ignoring NaN; mirrors ``torch.nanmedian`` (an even count: the mean of the two
    middle values)."""
    if dim is None:
        return _np.nanmedian(input)
    return SortResult(*_np.nanmedian(input, axis=dim, keepdims=keepdim, return_indices=True))


def _correction(op, dim, unbiased, correction):
    """torch's overloads ``(input, dim, unbiased, keepdim)``, ``(input, unbiased)`` and
    ``(input, dim, *, correction)``: ``unbiased`` is ``correction = 1`` (True) or 0 (False);
    the default is 1."""
    if isinstance(dim, bool):  # torch.std(input, unbiased)
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise TypeError(f"{op}: pass unbiased or correction, not both")
    if unbiased is not None:
        correction = 1 if unbiased else 0
    return _dims(dim), 1 if correction is None else correction


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``sqrt(sum (x - mean)^2 / (N - correction))`` over ``dim``; 0 gradient for a constant
    input (torch's). Mirrors ``torch.std`` and its overloads.

    Args:
        input: the array.
        dim: an int, a sequence of ints, or None/``()`` for every dim; a bool here is torch's
            ``std(input, unbiased)``.
        unbiased: the legacy spelling of ``correction``: True is 1, False is 0.
        keepdim: keep the reduced dims with size 1.
        correction: the subtracted count; 1 (Bessel) when neither it nor ``unbiased`` is given.

    Returns:
        The standard deviation.

    Raises:
        TypeError: when both ``unbiased`` and ``correction`` are given.
    """
    dim, c = _correction("std", dim, unbiased, correction)
    return _np.std(input, axis=dim, keepdims=keepdim, correction=c)


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``sum (x - mean)^2 / (N - correction)`` over ``dim``; mirrors ``torch.var``."""
    dim, c = _correction("var", dim, unbiased, correction)
    return _np.var(input, axis=dim, keepdims=keepdim, correction=c)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(std, mean)`` over ``dim``; mirrors ``torch.std_mean``."""
    dim, c = _correction("std_mean", dim, unbiased, correction)
    return _np.std_mean(input, axis=dim, keepdims=keepdim, correction=c)


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(var, mean)`` over ``dim``; mirrors ``torch.var_mean``."""
    dim, c = _correction("var_mean", dim, unbiased, correction)
    return _np.var_mean(input, axis=dim, keepdims=keepdim, correction=c)


def logsumexp(input, dim, keepdim=False):
    """``log(sum(exp(input), dim))``; mirrors ``torch.logsumexp``."""
    return _logsumexp(input, axis=_dims(dim), keepdims=keepdim)


def softmax(input, dim, dtype=None):
    """``exp(x) / sum(exp(x), dim)``; mirrors ``torch.softmax``."""
    return nn.functional.softmax(input, dim, dtype=dtype)


def log_softmax(input, dim, dtype=None):
    """``x - logsumexp(x, dim)``; mirrors ``torch.log_softmax``."""
    return nn.functional.log_softmax(input, dim, dtype=dtype)


def cumsum(input, dim, *, dtype=None, out=None):
    """The running sum along ``dim``; mirrors ``torch.cumsum``."""
    _no_out("cumsum", out)
    return _np.cumsum(input, axis=dim, dtype=dtype)


def cumprod(input, dim, *, dtype=None, out=None):
    """The running product along ``dim`` (torch's gradient at zeros); mirrors ``torch.cumprod``."""
    _no_out("cumprod", out)
    return _np.cumprod(input, axis=dim, dtype=dtype)


def logcumsumexp(input, dim, *, out=None):
    """``log(cumsum(exp(input), dim))``; mirrors ``torch.logcumsumexp``."""
    _no_out("logcumsumexp", out)
    return _np.logcumsumexp(input, dim)


def cummax(input, dim):
    """``(values, indices)`` of the running maximum along ``dim``; mirrors ``torch.cummax``."""
    return _np.cummax(input, dim)


def cummin(input, dim):
    """``(values, indices)`` of the running minimum along ``dim``; mirrors ``torch.cummin``."""
    return _np.cummin(input, dim)


def kthvalue(input, k, dim=-1, keepdim=False):
    """``(values, indices)`` of the k-th smallest entry (1-based) along ``dim``; mirrors
    ``torch.kthvalue``."""
    return _np.kthvalue(input, k, axis=dim, keepdims=keepdim)


def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    """``(values, indices)`` of the ``k`` largest (or smallest) entries along ``dim``; mirrors
    ``torch.topk``."""
    return _np.topk(input, k, axis=dim, largest=largest, sorted=sorted)


def sort(input, dim=-1, descending=False, stable=False):
    """The entries sorted along ``dim``; the values' gradient is scattered back through the
    indices. Mirrors ``torch.sort``.

    Args:
        input: the array.
        dim: the dim sorted.
        descending: largest first.
        stable: accepted for torch's signature; the sort is always stable (a valid result of
            torch's unstable sort too).

    Returns:
        ``(values, indices)``, a named tuple.
    """
    return SortResult(_np.sort(input, axis=dim, descending=descending),
                      _np.argsort(input, axis=dim, descending=descending))


def argsort(input, dim=-1, descending=False, stable=False):
    """The indices that sort ``input`` along ``dim`` (always stable); mirrors ``torch.argsort``."""
    return _np.argsort(input, axis=dim, descending=descending)


_TORCH_QUANTILE = ("linear", "lower", "higher", "midpoint", "nearest")  # torch.quantile's interpolations


def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """The ``q``-quantiles along ``dim`` (flattened if None); mirrors ``torch.quantile``, whose
    ``interpolation`` is one of its five (not numpy's ``inverted_cdf``)."""
    if interpolation not in _TORCH_QUANTILE:
        raise ValueError(f"quantile: interpolation must be one of {_TORCH_QUANTILE}, got {interpolation!r}")
    return _np.quantile(input, q, axis=dim, keepdims=keepdim, method=interpolation)


def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """``quantile`` of the numbers, NaN ignored (an all-NaN slice: NaN); mirrors
    ``torch.nanquantile``."""
    if interpolation not in _TORCH_QUANTILE:
        raise ValueError(f"nanquantile: interpolation must be one of {_TORCH_QUANTILE}, got {interpolation!r}")
    return _np.nanquantile(input, q, axis=dim, keepdims=keepdim, method=interpolation)


def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    """torch's deprecated ``norm``: ``(sum |x|^p)^(1/p)`` over the entries of ``dim``, 0
    gradient at 0 (torch's subgradient). Mirrors ``torch.norm``.

    Args:
        input: the array.
        p: a number, ``'fro'`` (the 2-norm of the entries, also over two dims) or ``'nuc'``
            (the nuclear norm over two dims, the last two if ``dim`` is None).
        dim: an int, a sequence of ints, or None for every dim.
        keepdim: keep the reduced dims with size 1.
        dtype: when given, ``input`` is cast to it first.

    Returns:
        The norm.
    """
    x = _cast(input, dtype)
    dim = (dim,) if isinstance(dim, int) else _dims(dim)
    if p == "nuc":
        return _np.linalg.norm(x, ord="nuc", axis=(-2, -1) if dim is None else dim, keepdims=keepdim)
    return _L.vector_norm(x, axis=dim, keepdims=keepdim, ord=2 if p == "fro" else p)


# ---------------------------------------------------------------------------------------------
# Joining, splitting, indexing


def cat(tensors, dim=0, *, out=None):
    """The tensors joined along ``dim``; mirrors ``torch.cat``, which skips 1-d tensors of shape
    ``(0,)`` (its legacy empty tensor) whatever the other tensors' shapes and ``dim``; their dtypes
    still take part in the result's (all of them skipped: a ``(0,)`` result)."""
    _no_out("cat", out)
    arrays = [jnp.asarray(t) for t in tensors]
    kept = [a for a in arrays if a.shape != (0,)]
    if len(kept) == len(arrays):
        return _np.concatenate(tensors, axis=dim)
    dtype = jnp.result_type(*arrays)
    if not kept:
        return _np.concatenate(arrays, axis=0).astype(dtype)
    return _np.concatenate(kept, axis=dim).astype(dtype)


concat = concatenate = cat


def stack(tensors, dim=0, *, out=None):
    """The tensors stacked along a new ``dim``; mirrors ``torch.stack``."""
    _no_out("stack", out)
    return _np.stack(tensors, axis=dim)


def split(tensor, split_size_or_sections, dim=0):
    """Pieces of ``tensor`` along ``dim``. Mirrors ``torch.split`` (not ``numpy.split``, whose
    int is a count of pieces).

    Args:
        tensor: the array.
        split_size_or_sections: an int, the size of each piece (the last one shorter), or a
            sequence of sizes summing to the dim's size.
        dim: the dim split.

    Returns:
        A tuple of arrays.

    Raises:
        ValueError: for a non-positive size or sizes that do not sum to the dim's size.
    """
    n = jnp.shape(tensor)[dim]
    if isinstance(split_size_or_sections, int):
        if split_size_or_sections <= 0:
            raise ValueError(f"split: split_size_or_sections must be positive, got {split_size_or_sections}")
        cuts = list(range(split_size_or_sections, n, split_size_or_sections))
    else:
        sizes = list(split_size_or_sections)
        if builtins.sum(sizes) != n:
            raise ValueError(f"split: split_size_or_sections {sizes} must sum to the size {n} of dim {dim}")
        cuts = [builtins.sum(sizes[:k]) for k in range(1, len(sizes))]
    return tuple(_np.split(tensor, cuts, axis=dim))


def tensor_split(input, indices_or_sections, dim=0):
    """``numpy.array_split``'s pieces; mirrors ``torch.tensor_split``: an int or a 0-d integer
    array is the number of sections, a sequence or a 1-d integer array the split indices."""
    if not isinstance(indices_or_sections, int | tuple | list):
        sections = np.asarray(indices_or_sections)
        if sections.ndim > 1 or not np.issubdtype(sections.dtype, np.integer):
            raise TypeError(f"tensor_split: indices_or_sections must be an int, a sequence of ints or a 0-d or 1-d "
                            f"integer array, got {sections.dtype} of shape {sections.shape}")
        indices_or_sections = int(sections) if sections.ndim == 0 else sections.tolist()
    return tuple(_np.array_split(input, indices_or_sections, axis=dim))


def unbind(input, dim=0):
    """The slices along ``dim``; mirrors ``torch.unbind``."""
    return _np.unstack(input, axis=dim)


def tile(input, dims):
    """``input`` repeated ``dims`` times per dim; mirrors ``torch.tile``."""
    return _np.tile(input, dims)


def repeat_interleave(input, repeats, dim=None, *, output_size=None):
    """Each entry repeated ``repeats`` times along ``dim`` (flattened if None); mirrors
    ``torch.repeat_interleave``."""
    return _np.repeat(input, repeats, axis=dim, total_repeat_length=output_size)


def take_along_dim(input, indices, dim=None, *, out=None):
    """``input``'s entries at ``indices`` along ``dim`` (flattened if None); mirrors
    ``torch.take_along_dim``: along ``dim`` an index lies in ``[-n, n)``, a negative one counting
    from the end; of the flattened input (``dim=None``) in ``[0, numel)``. An index outside is a
    ``ValueError`` (concrete indices; traced ones inside ``jaxrules.checked``) and NaN under a
    plain ``jit``, never an entry of another position (torch 2.13 takes an index along ``dim``
    modulo n; docs/differences.md, Errors)."""
    _no_out("take_along_dim", out)
    x, idx = jnp.asarray(input), jnp.asarray(indices)
    integer = jnp.issubdtype(idx.dtype, jnp.integer)
    if dim is None:
        x, idx = jnp.ravel(x), jnp.ravel(idx)
        if integer:
            idx = _in_range_or_past_end("take_along_dim", "indices", idx, x.size)
        return _past_end_is_nan(x, idx, _np.take_along_axis(x, idx, axis=0))
    if integer and isinstance(dim, int | np.integer) and not isinstance(dim, bool) and -x.ndim <= dim < x.ndim \
            and idx.ndim == x.ndim:
        size = x.shape[dim]
        _V.index_range("take_along_dim", "indices", idx, size, low=-size)
        return _past_end_is_nan(x, idx, _np.take_along_axis(x, idx, axis=dim, wrap_negative_indices=True))
    return _np.take_along_axis(input, indices, axis=dim)


def _past_end_is_nan(x, idx, taken):
    """``taken`` (an inexact gather from ``x`` at ``idx``) is NaN where ``x`` has nothing to take
    from along the axis (jax.numpy gives zeros there): every such index is out of range."""
    if x.size == 0 and idx.size != 0 and jnp.issubdtype(taken.dtype, jnp.inexact):
        return jnp.full_like(taken, jnp.nan)
    return taken


def gather(input, dim, index, *, sparse_grad=False, out=None):
    """``input[..., index[i, j], ...]`` along ``dim``; mirrors ``torch.gather``: an index outside
    ``[0, input.shape[dim])`` is a ``ValueError`` (concrete indices; traced ones inside
    ``jaxrules.checked``, NaN under a plain ``jit``). torch counts a 0-d
    tensor's dims as 1 (a 0-d ``input`` or ``index`` acts as a 1-element vector: the result has
    ``index``'s shape) and checks neither the dtype nor the rank of an empty ``index`` (the result:
    empty, of ``index``'s shape; ``dim`` must still be a dim of ``input``)."""
    _no_out("gather", out)
    x, idx = jnp.asarray(input), jnp.asarray(index)
    if idx.size == 0 or (x.ndim <= 1 and idx.ndim <= 1):
        rank = builtins.max(x.ndim, 1)
        if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or not -rank <= dim < rank:
            raise ValueError(f"gather: dim must be an int in [{-rank}, {rank - 1}], got {dim!r}")
        if idx.size == 0:
            return jnp.zeros(idx.shape, x.dtype)
        idx = _in_range_or_past_end("gather", "index", idx, x.size)
        return _np.take_along_axis(x.reshape(-1), idx.reshape(-1), axis=0).reshape(idx.shape)
    if isinstance(dim, int | np.integer) and not isinstance(dim, bool) and -x.ndim <= dim < x.ndim \
            and jnp.issubdtype(idx.dtype, jnp.integer) and idx.ndim == x.ndim:
        dim = int(dim) % x.ndim
        if any(idx.shape[d] > x.shape[d] for d in range(x.ndim) if d != dim):
            raise ValueError(f"gather: index's shape {idx.shape} must not exceed input's {x.shape} outside "
                             f"dim {dim}")
        idx = _in_range_or_past_end("gather", "index", idx, x.shape[dim])
        # torch reads input[..., :index.shape[d], ...] outside dim (no broadcasting)
        x = x[tuple(slice(None) if d == dim else slice(0, idx.shape[d]) for d in range(x.ndim))]
        return _np.take_along_axis(x, idx, axis=dim)
    return _np.take_along_axis(input, index, axis=dim)


def _in_range_or_past_end(op, name, indices, size):
    """torch's index rule for ``indices`` along an axis of ``size``: a ``ValueError`` for an index
    outside ``[0, size)`` (``_validate.index_range``); a traced negative index becomes ``size``,
    past the end, so that the gather fills it with NaN as it does any other index out of range,
    instead of counting it from the end (jax.numpy's rule, which would give a finite wrong value)."""
    _V.index_range(op, name, indices, size)
    wide = _V.wide_indices(indices)
    return jnp.where(wide < 0, size, wide)


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """``input`` with ``src`` reduced into the positions ``index`` along ``dim``; mirrors
    ``torch.scatter_reduce``, which counts a 0-d tensor's dims as 1 (a 0-d ``input``, ``index``
    or ``src`` among ones of rank at most 1 acts as a 1-element vector; the result has
    ``input``'s shape)."""
    x, idx, values = jnp.asarray(input), jnp.asarray(index), jnp.asarray(src)
    if builtins.min(x.ndim, idx.ndim, values.ndim) == 0 and builtins.max(x.ndim, idx.ndim, values.ndim) <= 1:
        if isinstance(dim, bool) or dim not in (0, -1):
            raise ValueError(f"scatter_reduce: dim must be 0 or -1 for arguments of rank 0 or 1, got {dim!r}")
        out = _np.scatter_reduce(x.reshape(-1), 0, idx.reshape(-1), values.reshape(-1), reduce, include_self)
        return out.reshape(x.shape)
    return _np.scatter_reduce(input, dim, index, src, reduce, include_self)


def index_reduce(input, dim, index, source, reduce, *, include_self=True):
    """``input`` with the slices of ``source`` reduced into the slices ``index`` along ``dim``;
    mirrors ``torch.index_reduce`` (a 0-d ``input`` and ``source`` act as 1-element vectors along
    dim 0, as in torch)."""
    x, src = jnp.asarray(input), jnp.asarray(source)
    if x.ndim == 0 and src.ndim == 0 and dim in (0, -1):
        return _np.index_reduce(x[None], 0, index, src[None], reduce, include_self)[0]
    return _np.index_reduce(input, dim, index, source, reduce, include_self)


# ---------------------------------------------------------------------------------------------
# torch's top-level linear algebra


det = linalg.det
matrix_exp = linalg.matrix_exp


def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """The p-norm distances between the rows of ``x1`` and ``x2``; mirrors ``torch.cdist``
    (``compute_mode`` chooses torch's kernel only)."""
    return _L.cdist(x1, x2, p)


def dist(input, other, p=2):
    """``||input - other||_p``; mirrors ``torch.dist``."""
    return _L.dist(input, other, p)


def renorm(input, p, dim, maxnorm):
    """The slices along ``dim`` scaled to p-norm at most ``maxnorm``; mirrors ``torch.renorm``."""
    return _L.renorm(input, p, dim, maxnorm)


def cholesky_solve(B, L, upper=False):
    """``X`` with ``L L^H X = B``; mirrors ``torch.cholesky_solve``."""
    return _L.cholesky_solve(B, L, upper)


def cholesky_inverse(L, upper=False):
    """``(L L^H)^{-1}``; mirrors ``torch.cholesky_inverse``."""
    return _L.cholesky_inverse(L, upper)


def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """``(P, L, U)`` from ``torch.linalg.lu_factor``'s output, torch's 1-based pivots; mirrors
    ``torch.lu_unpack`` (both parts unpacked)."""
    if not (unpack_data and unpack_pivots):
        raise ValueError("lu_unpack: unpack_data and unpack_pivots must be True")
    return _L.lu_unpack(LU_data, jnp.asarray(LU_pivots) - 1)


def ormqr(input, tau, other, left=True, transpose=False):
    """``Q @ other`` (or ``other @ Q``, ``Q^H``) for the Householder ``Q`` of ``(input, tau)``;
    mirrors ``torch.ormqr``."""
    return _L.ormqr(input, tau, other, left, transpose)

