"""Indexing ops with torch's semantics: ``embedding`` and ``embedding_bag`` (``jaxrules.nn``) and
``scatter_reduce`` (``jaxrules.numpy``, torch's argument order). Each op's formulas live beside
it, here (gathered in ``jvp_rules`` / ``vjp_rules``), derivative weights in
``partials.scatter_reduce_weights``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from jaxrules import _validate as V
from jaxrules import partials as P
from jaxrules._namespace import exported_as
from jaxrules.mechanism import concrete_value, define_op, explicit_sharding

# ----------------------------------------------------------------------------------------------
# Ops: embedding

def _lookup(indices, weight, **_):
    """``weight[indices]``, of shape ``indices.shape + weight.shape[1:]`` (through the flat
    indices: jnp.take of empty indices from an empty axis drops their shape)."""
    return jnp.take(weight, indices.reshape(-1), axis=0).reshape(indices.shape + weight.shape[1:])


def embedding_jvp(res, ti, tw, *, padding_idx, scale_grad_by_freq, num):
    """``dW[indices]`` with the ``padding_idx`` rows zero (seed
    ``embedding_dense_double_backward``); with ``scale_grad_by_freq`` each row is divided by
    its index's count (the transpose of torch's scaled backward)."""
    weights = P.embedding_row_weights(res, padding_idx, scale_grad_by_freq, num, tw.real.dtype)
    return jnp.take(tw, res, axis=0) * weights[..., None]


def embedding_vjp(res, ct, *, padding_idx, scale_grad_by_freq, num):
    """Seed ``embedding_backward``: rows of ``ct`` added into their indices' rows, none into
    ``padding_idx``, each divided by its index's count when ``scale_grad_by_freq``; the NaN row of
    an out-of-range index is added into the nearest row (``mode="clip"``), not dropped."""
    indices = res
    rows = ct * P.embedding_row_weights(indices, padding_idx, scale_grad_by_freq, num, ct.real.dtype)[..., None]
    return None, jnp.zeros((num, ct.shape[-1]), ct.dtype).at[indices].add(rows, mode="clip")


embedding_op = define_op(
    "embedding",
    _lookup,
    embedding_jvp,
    embedding_vjp,
    lambda out, indices, weight, **_: indices,
)


# ----------------------------------------------------------------------------------------------
# Ops: embedding_bag: every looked-up entry i has a row ``indices[i]`` and a bag ``bags[i]`` (bags ==
# num_bags: in no bag, e.g. padding_idx); its formulas live here, beside the ops.

def _bag_row_scale(indices, bags, coef, num, num_bags, scale_grad_by_freq):
    """Each entry's factor in the derivative with respect to ``weight``: its coefficient, divided
    by its index's count among the bagged entries when ``scale_grad_by_freq``."""
    if not scale_grad_by_freq:
        return coef
    counts = jnp.zeros(num, coef.dtype).at[indices].add((bags < num_bags).astype(coef.dtype))
    return coef / jnp.maximum(counts[indices], 1)


def _bag_sum_primal(indices, bags, weight, coef, *, num_bags, scale_grad_by_freq):
    rows = jnp.take(weight, indices, axis=0) * coef[:, None]
    return jax.ops.segment_sum(rows, bags, num_segments=num_bags)


def _bag_sum_jvp(res, ti, tb, tw, tc, *, num_bags, scale_grad_by_freq):
    """``dout[b] = sum_{i in b} c_i dW[indices[i]] + dc_i W[indices[i]]`` (with
    ``scale_grad_by_freq``, ``c_i / count(indices[i])`` in the first term: the transpose of
    torch's scaled backward, as ``embedding``'s)."""
    indices, bags, weight, coef = res
    terms = []
    if tw is not None:
        scale = _bag_row_scale(indices, bags, coef, weight.shape[0], num_bags, scale_grad_by_freq)
        terms.append(jnp.take(tw, indices, axis=0) * scale[:, None])
    if tc is not None:
        terms.append(jnp.take(weight, indices, axis=0) * tc[:, None])
    return jax.ops.segment_sum(sum(terms[1:], terms[0]), bags, num_segments=num_bags)


def _bag_sum_vjp(res, ct, *, num_bags, scale_grad_by_freq):
    """Seed ``_embedding_bag_backward`` (sum/mean; ``_embedding_bag_per_sample_weights_backward``):
    each entry's bag cotangent times its coefficient added into its row of ``weight``; the
    coefficient's gradient is ``<ct[bag], W[index]>``."""
    indices, bags, weight, coef = res
    g = jnp.take(ct, bags, axis=0, mode="fill", fill_value=0)  # (n, D), 0 for entries in no bag
    scale = _bag_row_scale(indices, bags, coef, weight.shape[0], num_bags, scale_grad_by_freq)
    g_weight = jnp.zeros(weight.shape, ct.dtype).at[indices].add(g * scale[:, None])
    return None, None, g_weight, jnp.sum(g * jnp.take(weight, indices, axis=0), axis=-1)


embedding_bag_sum_op = define_op("embedding_bag_sum", _bag_sum_primal, _bag_sum_jvp, _bag_sum_vjp,
                                 lambda out, indices, bags, weight, coef, **_: (indices, bags, weight, coef))


def _bag_max_primal(indices, bags, weight, *, num_bags, num):
    """torch's CPU rule: a bag's running maximum starts at its first entry and moves to a later
    one only when strictly greater (the first maximum wins ties; a NaN first entry stays, later
    NaNs are skipped); an empty bag gives 0 and no row (index ``num``)."""
    n = indices.shape[0]
    if n == 0 or num_bags == 0:  # every bag empty, or no bag (jnp.take cannot gather from an empty axis)
        arg = jnp.full((num_bags, weight.shape[1]), num, jnp.int32)
        return jnp.zeros(arg.shape, weight.dtype), arg
    rows = jnp.take(weight, indices, axis=0)  # (n, D)
    pos = jnp.arange(n)
    top = jax.ops.segment_max(jnp.where(jnp.isnan(rows), -jnp.inf, rows), bags, num_segments=num_bags)
    hit = rows == jnp.take(top, bags, axis=0, mode="fill", fill_value=jnp.nan)
    pick = jax.ops.segment_min(jnp.where(hit, pos[:, None], n), bags, num_segments=num_bags)
    first = jax.ops.segment_min(pos, bags, num_segments=num_bags)  # n or more: an empty bag
    first_nan = (first < n)[:, None] & jnp.isnan(jnp.take(rows, first, axis=0, mode="fill", fill_value=0))
    pick = jnp.minimum(jnp.where(first_nan, first[:, None], pick), n)
    arg = jnp.where(pick < n, jnp.take(indices, pick, mode="fill", fill_value=num), num).astype(jnp.int32)
    return _gather_rows(weight, arg), arg


def _gather_rows(w, arg):
    """``w[arg[b, d], d]``, 0 where ``arg`` is out of range (an empty bag)."""
    return jnp.take_along_axis(w, arg, axis=0, mode="fill", fill_value=0)


def _bag_max_jvp(arg, ti, tb, tw, *, num_bags, num):
    """Seed ``_embedding_bag_backward``'s transpose: each bag's maximum moves with its row."""
    return _gather_rows(tw, arg), None


def _bag_max_vjp(arg, ct, *, num_bags, num):
    """Seed ``_embedding_bag_backward`` (max, ``_embedding_bag_dense_backward``): each bag's
    cotangent added into its maximum's row, column by column; none for an empty bag."""
    g = ct[0]
    columns = jnp.arange(arg.shape[-1])
    return None, None, jnp.zeros((num, g.shape[-1]), g.dtype).at[arg, columns].add(g, mode="drop")


embedding_bag_max_op = define_op("embedding_bag_max", _bag_max_primal, _bag_max_jvp, _bag_max_vjp,
                                 lambda out, *_, **__: out[1])


# ----------------------------------------------------------------------------------------------
# Ops: scatter_reduce

_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def _scatter_reduce_primal(x, index, src, *, axis, reduce, include_self):
    coords = P.scatter_coords(index, axis)
    identity = {"sum": 0, "mean": 0, "prod": 1, "amax": -jnp.inf, "amin": jnp.inf}[reduce]
    like_x = {"out_sharding": explicit_sharding(x)}  # an Explicit mesh: the result is sharded as x
    base = x if include_self else x.at[coords].set(identity, **like_x)
    if reduce in ("sum", "mean"):
        total = base.at[coords].add(src, **like_x)
        if reduce == "sum":
            return total
        keeps_x = jnp.ones(x.shape, bool) if include_self else ~P.scattered_mask(x.shape, coords)
        count = keeps_x.astype(x.real.dtype) + P.scatter_add(x.shape, coords, jnp.ones(src.shape, x.real.dtype))
        return total / jnp.maximum(count, 1)
    if reduce == "prod":
        return base.at[coords].multiply(src, **like_x)
    return base.at[coords].max(src, **like_x) if reduce == "amax" else base.at[coords].min(src, **like_x)


def _save_scatter_reduce(out, x, index, src, *, axis, reduce, include_self):
    prod_weights = P.scatter_prod_weights(x, index, src, axis, include_self) if reduce == "prod" else None
    return x, index, src, out, prod_weights


def scatter_reduce_jvp(res, tx, ti, tsrc, *, axis, reduce, include_self):
    """Seed ``scatter_reduce_jvp`` (sum, mean: the scatter of the tangents; amax/amin: ties
    share evenly) and, for prod (which torch leaves undefined), the product rule with zero-safe
    products of the other members."""
    x_weight, src_weight, coords = P.scatter_reduce_weights(res, axis=axis, reduce=reduce, include_self=include_self)
    return P.terms(
        None if tx is None else tx * x_weight,
        None if tsrc is None else P.scatter_add(x_weight.shape, coords, tsrc * src_weight),
    )


def scatter_reduce_vjp(res, ct, *, axis, reduce, include_self):
    """Seed ``scatter_reduce_backward``: ``gx = ct o w_x``, ``gsrc = gather(ct) o w_src`` with the
    per-member weights of ``partials.scatter_reduce_weights`` (1 for sum, 1/count for mean,
    1/ties for amax/amin, the product of the others for prod)."""
    x_weight, src_weight, coords = P.scatter_reduce_weights(res, axis=axis, reduce=reduce, include_self=include_self)
    return ct * x_weight, None, P.gather_at(ct, coords, src_weight) * src_weight


def _scatter_reduce_jvp(res, tx, ti, tsrc, *, axis, reduce, include_self):
    """Seed ``scatter_reduce_jvp`` (``jvp_rules.scatter_reduce_jvp``); amax/amin: NaN at a NaN
    output (the ties mask ``member == out`` is empty there, the seed's ``grad / 0``)."""
    t = scatter_reduce_jvp(res, tx, ti, tsrc, axis=axis, reduce=reduce, include_self=include_self)
    if reduce not in ("amax", "amin") or t is None:
        return t
    return t * P.nan_factor(jnp.isnan(res[3]), t.dtype)


def _scatter_reduce_vjp(res, ct, *, axis, reduce, include_self):
    """Seed ``scatter_reduce_backward`` (``vjp_rules.scatter_reduce_vjp``); amax/amin: NaN for
    every member (x's entry where it takes part, each src entry scattered there) of a NaN
    output, as the seed's ``grad / N_to_distribute`` with no ties."""
    gx, gi, gsrc = scatter_reduce_vjp(res, ct, axis=axis, reduce=reduce, include_self=include_self)
    if reduce not in ("amax", "amin"):
        return gx, gi, gsrc
    x, index, _, out, _ = res
    nan_out, coords = jnp.isnan(out), P.scatter_coords(index, axis)
    nan_x = nan_out if include_self else nan_out & ~P.scattered_mask(x.shape, coords)
    return gx * P.nan_factor(nan_x, gx.dtype), gi, gsrc * P.nan_factor(P.gather_at(nan_out, coords, gsrc), gsrc.dtype)


scatter_reduce_op = define_op(
    "scatter_reduce", _scatter_reduce_primal, _scatter_reduce_jvp, _scatter_reduce_vjp, _save_scatter_reduce
)


# ----------------------------------------------------------------------------------------------
# Public functions: embedding

def _indices(op, name, x):
    """Integer ``x``, widened to 32 bits (``V.wide_indices``: a bound or a position put in its
    place must not overflow its dtype)."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(f"{op}: {name} must be an integer array, got {x.dtype}")
    return V.wide_indices(x)


def _check_rows(op, name, indices, weight):
    """An empty table admits no index (torch: "index_select(): self indexing axis dim should be
    positive", embedding_bag's "Expected idx >= 0 && idx < num_embeddings"); no index: empty output."""
    if weight.shape[0] == 0 and indices.size:
        raise ValueError(f"{op}: weight has no rows (num_embeddings = 0), so no entry of {name} (shape "
                         f"{indices.shape}) is in range")


@exported_as("jaxrules.nn.embedding")
def embedding(indices: ArrayLike, weight: ArrayLike, padding_idx: int | None = None,
              scale_grad_by_freq: bool = False) -> Array:
    """The lookup ``weight[indices]``, with seed ``embedding_backward`` /
    ``embedding_dense_double_backward``: torch's conventions, which are not the derivative of
    the lookup: the ``padding_idx`` row gets no gradient (JAX's ``take`` has no such notion),
    and ``scale_grad_by_freq`` divides each row's gradient by its index's count in
    ``indices``; the JVP is the transpose of that backward. Mirrors
    ``torch.nn.functional.embedding`` (``max_norm``, an in-place renormalization, is not
    offered).

    Args:
        indices: integer indices in ``[0, num_embeddings)``, any shape (not differentiated).
            Out of range (negative ones included, as torch): ``ValueError`` when concrete and
            inside ``jaxrules.checked``; under plain ``jit`` (no check runs) their rows and
            ``weight``'s gradient are NaN.
        weight: the table (num_embeddings, embedding_dim).
        padding_idx: a row, in ``[-num_embeddings, num_embeddings)``, whose gradient is zero;
            None: none.
        scale_grad_by_freq: divide each row's gradient by how often ``indices`` holds it.

    Returns:
        ``weight[indices]``: ``indices.shape + (embedding_dim,)``, in weight's dtype.

    Raises:
        ValueError: weight not 2-d, an empty weight (0 rows) with indices, an index or a
            ``padding_idx`` out of range.
        TypeError: ``indices`` not of an integer dtype.
    """
    indices = _indices("embedding", "indices", indices)
    weight = V.array("embedding", "weight", weight)
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be (num_embeddings, embedding_dim), got {weight.shape}")
    _check_rows("embedding", "indices", indices, weight)
    num = weight.shape[0]
    if num:
        V.index_range("embedding", "indices", indices, num)
        indices = jnp.where(indices < 0, num, indices)  # traced: a negative index reads NaN, no wrap-around
    if padding_idx is not None:
        if not isinstance(padding_idx, int | np.integer) or not -num <= padding_idx < num:
            raise ValueError(f"embedding: padding_idx must be an int in [-{num}, {num}), got {padding_idx!r}")
        padding_idx = int(padding_idx) % num
    return embedding_op(indices, weight, padding_idx=padding_idx, scale_grad_by_freq=bool(scale_grad_by_freq), num=num)


# ----------------------------------------------------------------------------------------------
# Public functions: embedding_bag

_BAG = "embedding_bag"
_BAG_MODES = ("sum", "mean", "max")


def _bag_structure(indices, offsets, include_last_offset, n):
    """``(bags, num_bags)``: each entry's bag (``num_bags``: none) from 2-d ``indices`` (a bag per
    row) or 1-d ``indices`` with ``offsets`` (bag b from ``offsets[b]``)."""
    if indices.ndim == 2:
        if offsets is not None:
            raise ValueError(f"{_BAG}: offsets must be None for a 2-d input (each row is a bag), got {offsets!r}")
        return jnp.repeat(jnp.arange(indices.shape[0]), indices.shape[1]), indices.shape[0]
    if offsets is None:
        raise ValueError(f"{_BAG}: offsets (a 1-d integer array of bag starts) is needed for a 1-d input")
    offsets = _indices(_BAG, "offsets", offsets)
    if offsets.ndim != 1 or offsets.shape[0] == 0:  # empty: torch 2.13 crashes (a segfault); no bags: a (0, N) input
        raise ValueError(f"{_BAG}: offsets must be 1-d and non-empty (for no bags pass a 2-d input of shape (0, N)), "
                         f"got shape {offsets.shape}")
    host = concrete_value(offsets)
    if host is not None and host.size and (host[0] != 0 or np.any(np.diff(host) < 0) or host[-1] > n
                                           or (include_last_offset and host[-1] != n)):
        last = f", ending at len(input) = {n}" if include_last_offset else f", up to len(input) = {n}"
        raise ValueError(f"{_BAG}: offsets must start at 0 and not decrease{last}, got {host.tolist()}")
    num_bags = offsets.shape[0] - int(include_last_offset)
    bags = jnp.searchsorted(offsets[:num_bags], jnp.arange(n), side="right") - 1
    if include_last_offset:
        bags = jnp.where(jnp.arange(n) < offsets[-1], bags, num_bags)
    return bags, num_bags


@exported_as("jaxrules.nn.embedding_bag")
def embedding_bag(input: ArrayLike, weight: ArrayLike, offsets: ArrayLike | None = None, max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False, per_sample_weights: ArrayLike | None = None, include_last_offset: bool = False, padding_idx: int | None = None) -> Array:  # noqa: A002 - torch's name
    """Sums, means or maxima of bags of embedding rows, torch.nn.functional's semantics.

    ``out[b] = reduce_{i in bag b} c_i W[input[i]]`` with ``c_i = per_sample_weights[i]`` (sum),
    ``1 / |bag b|`` (mean, padding not counted) or the maximum per column (max: torch's first
    maximum in bag order wins ties). Empty bags give 0. Derivatives (seed
    ``_embedding_bag_backward``, ``_embedding_bag_per_sample_weights_backward``): each entry's
    bag cotangent times ``c_i`` into its row (max: into the maximum's row, column by column),
    ``<ct[bag], W[index]>`` for ``per_sample_weights``; the JVP is their transpose. Indices and
    offsets are not differentiable. Mirrors ``torch.nn.functional.embedding_bag``.

    Args:
        input: integer indices in ``[0, num_embeddings)``: 2-d ``(B, N)``, a bag per row, or
            1-d with ``offsets`` (checked when concrete and inside ``jaxrules.checked``; under
            plain ``jit`` an out-of-range index reads NaN).
        weight: the table ``(num_embeddings, D)``, real.
        offsets: for a 1-d ``input``, the 1-d integer start of each bag (from 0, not
            decreasing); None for a 2-d ``input``.
        max_norm: must be None (``ValueError`` otherwise: torch renormalizes ``weight`` in place,
            which a functional op cannot do).
        norm_type: the p of ``max_norm``'s norm (unused, as ``max_norm`` must be None).
        scale_grad_by_freq: divide each row's gradient by its index's count in ``input``
            (bagged, non-padding entries); not with mode ``'max'``.
        mode: ``'sum'``, ``'mean'`` or ``'max'``.
        sparse: accepted for torch's signature; no effect (JAX gradients are dense arrays).
        per_sample_weights: a float array shaped like ``input`` weighting each entry (mode
            ``'sum'`` only); differentiable.
        include_last_offset: ``offsets`` has one more entry, ``len(input)`` (the end of the
            last bag; ``ValueError`` otherwise, where torch's float32 and float64 CPU kernels
            disagree; under ``jit`` entries past it are in no bag).
        padding_idx: an index in ``[-num_embeddings, num_embeddings)`` whose entries are left
            out of every bag (and of a mean's count); None: none.

    Returns:
        ``(num_bags, D)`` in ``weight``'s dtype (with ``per_sample_weights``, the result dtype).
    """
    if mode not in _BAG_MODES:
        raise ValueError(f"{_BAG}: mode must be one of {_BAG_MODES}, got {mode!r}")
    if max_norm is not None:
        raise ValueError(f"{_BAG}: max_norm must be None (torch renormalizes weight in place; not supported), "
                         f"got {max_norm!r}")
    V.static_scalar(_BAG, "norm_type", norm_type)
    grad_by_freq = V.flag(_BAG, "scale_grad_by_freq", scale_grad_by_freq)
    V.flag(_BAG, "sparse", sparse)
    last_offset = V.flag(_BAG, "include_last_offset", include_last_offset)
    if grad_by_freq and mode == "max":
        raise ValueError(f"{_BAG}: scale_grad_by_freq is not supported with mode='max' (as torch)")
    indices = _indices(_BAG, "input", input)
    w = V.array(_BAG, "weight", weight)
    if w.ndim != 2 or jnp.iscomplexobj(w):
        raise ValueError(f"{_BAG}: weight must be a real (num_embeddings, embedding_dim) array, got {w.shape} {w.dtype}")
    if indices.ndim not in (1, 2):
        raise ValueError(f"{_BAG}: input must be 1-d (with offsets) or 2-d (a bag per row), got shape {indices.shape}")
    _check_rows(_BAG, "input", indices, w)
    num, n = w.shape[0], indices.size
    host = concrete_value(indices)
    if host is not None and host.size and (host.min() < 0 or host.max() >= num):
        raise ValueError(f"{_BAG}: input indices must be in [0, {num}), got values in [{host.min()}, {host.max()}]")
    if host is None and num:
        V.index_range(_BAG, "input", indices, num)  # traced: inside jaxrules.checked only
    bags, num_bags = _bag_structure(indices, offsets, last_offset, n)
    flat = indices.reshape(-1)
    if padding_idx is not None:
        if isinstance(padding_idx, bool) or not isinstance(padding_idx, int | np.integer) or not -num <= padding_idx < num:
            raise ValueError(f"{_BAG}: padding_idx must be an int in [-{num}, {num}), got {padding_idx!r}")
        bags = jnp.where(flat == int(padding_idx) % num, num_bags, bags)
    if mode == "max":
        if per_sample_weights is not None:
            raise ValueError(f"{_BAG}: per_sample_weights is only supported with mode='sum' (as torch), got mode='max'")
        return embedding_bag_max_op(flat, bags, w, num_bags=num_bags, num=num)[0]
    if per_sample_weights is not None:
        if mode != "sum":
            raise ValueError(f"{_BAG}: per_sample_weights is only supported with mode='sum' (as torch), got mode={mode!r}")
        coef = V.array(_BAG, "per_sample_weights", per_sample_weights)
        if coef.shape != indices.shape or jnp.iscomplexobj(coef):
            raise ValueError(f"{_BAG}: per_sample_weights must be real and shaped like input {indices.shape}, got "
                             f"{coef.shape} {coef.dtype}")
        dtype = jnp.result_type(w, coef)
        w, coef = w.astype(dtype), coef.reshape(-1).astype(dtype)
    elif mode == "mean":
        counts = jax.ops.segment_sum(jnp.ones(n, w.dtype), bags, num_segments=num_bags)
        # (no bag: no count to take, and no entry is summed)
        coef = 1 / jnp.maximum(jnp.take(counts, bags, mode="fill", fill_value=1), 1) if num_bags else jnp.ones(n, w.dtype)
    else:
        coef = jnp.ones(n, w.dtype)
    return embedding_bag_sum_op(flat, bags, w, coef, num_bags=num_bags, scale_grad_by_freq=grad_by_freq)


# ----------------------------------------------------------------------------------------------
# Public functions: scatter_reduce

@exported_as("jaxrules.numpy.scatter_reduce")
def scatter_reduce(x: ArrayLike, axis: int, index: ArrayLike, src: ArrayLike, reduce: str,
                   include_self: bool = True) -> Array:
    """``out[..., index[p], ...] = reduce(x[...], src[p] for every p scattered there)`` along
    ``axis``; ``src`` is cut to ``index``'s shape as torch does. Derivatives (seed
    ``scatter_reduce_backward`` / ``scatter_reduce_jvp``): sum, mean (1/count, self included
    when ``include_self``), amax/amin (ties share evenly, self included; at a NaN output,
    from NaN members, NaN for every member, as torch), prod (product of the
    other members, exact with zeros and duplicate indices, to any order; torch leaves its
    forward derivative undefined and JAX raises). Mirrors torch's ``Tensor.scatter_reduce``
    (``input.scatter_reduce(dim, index, src, reduce, include_self=True)``).

    Args:
        x: the array scattered into.
        axis: the axis along which ``index`` addresses ``x``.
        index: integer array of x's rank, fitting in ``src`` (and, off ``axis``, in ``x``), its
            entries in ``[0, x.shape[axis])`` (as torch: no negative ones). Out of range:
            ``ValueError`` when concrete and inside ``jaxrules.checked``; under plain ``jit`` (no
            check runs) the whole result and its derivatives are NaN.
        src: the values scattered, of x's rank (cut to ``index``'s shape).
        reduce: ``"sum"``, ``"prod"``, ``"mean"``, ``"amax"`` or ``"amin"``.
        include_self: whether x's own entry takes part in the reduction where something is
            scattered (where nothing is, x's entry is kept either way).

    Returns:
        The reduced array, of x's shape and of the result dtype of ``x`` and ``src``.

    Raises:
        ValueError: an unknown ``reduce``, ranks that differ, an ``index`` that does not fit or
            an index out of range.
        TypeError: ``amax``/``amin``/``prod`` of complex input.
    """
    if reduce not in _REDUCES:
        raise ValueError(f"scatter_reduce: reduce must be one of {_REDUCES}, got {reduce!r}")
    x = V.array("scatter_reduce", "x", x)
    src = V.array("scatter_reduce", "src", src)
    index = _indices("scatter_reduce", "index", index)
    x, src = (a.astype(jnp.result_type(x, src)) for a in (x, src))
    if reduce in ("amax", "amin", "prod") and jnp.iscomplexobj(x):
        raise TypeError(f"scatter_reduce: reduce={reduce!r} needs real input, got {x.dtype}")
    if not (x.ndim == index.ndim == src.ndim):
        raise ValueError(f"scatter_reduce: x, index and src must have the same rank, got {x.shape}, {index.shape}, {src.shape}")
    ax = V.single_axis("scatter_reduce", x.ndim, axis, "axis")
    for d, (n, m, k) in enumerate(zip(index.shape, src.shape, x.shape)):
        if n > m or (d != ax and n > k):
            raise ValueError(f"scatter_reduce: index {index.shape} must fit in src {src.shape} and, off axis, in x {x.shape}")
    src = src[tuple(slice(0, n) for n in index.shape)]
    out_of_range = _index_in_range("scatter_reduce", "index", index, x.shape[ax])
    out = scatter_reduce_op(x, index, src, axis=ax, reduce=reduce, include_self=bool(include_self))
    return out if out_of_range is None else out * P.nan_factor(out_of_range, out.dtype)


def _index_in_range(op, name, index, size):
    """torch's rule for a scatter's ``index``: every entry in ``[0, size)`` (negative ones
    included: no wrap-around). Concrete: ``ValueError`` naming ``op``, and None. Traced: a
    run-time check inside ``jaxrules.checked``, and the scalar mask "some entry is out of range",
    which the caller multiplies into its result as NaN (JAX's scatter would drop or wrap the
    entry: a finite wrong value)."""
    V.index_range(op, name, index, size)
    if concrete_value(index) is not None:
        return None
    return jnp.any((index < 0) | (index >= size))


_INDEX_REDUCES = ("prod", "mean", "amax", "amin")


@exported_as("jaxrules.numpy.index_reduce")
def index_reduce(x: ArrayLike, axis: int, index: ArrayLike, source: ArrayLike, reduce: str,
                 include_self: bool = True) -> Array:
    """Slice ``k`` of ``source`` along ``axis`` is reduced into slice ``index[k]`` of ``x``. It
    is ``scatter_reduce`` with the 1-d ``index`` broadcast over the other axes, so its
    derivatives are the same formulas (seed ``index_reduce_backward``). Mirrors torch's
    ``Tensor.index_reduce`` (``x.index_reduce(dim, index, source, reduce, include_self)``).

    Args:
        x: the array reduced into.
        axis: the axis along which ``index`` addresses ``x``.
        index: 1-d integer array, one slice of x per slice of ``source``, its entries in
            ``[0, x.shape[axis])`` (as torch). Out of range: ``ValueError`` when concrete and
            inside ``jaxrules.checked``; under plain ``jit`` the result is NaN.
        source: x's shape with ``axis`` of length ``len(index)``.
        reduce: ``"prod"``, ``"mean"``, ``"amax"`` or ``"amin"`` (torch's choices).
        include_self: whether x's own slice takes part where something is reduced into it.

    Returns:
        The reduced array, of x's shape.

    Raises:
        ValueError: an unknown ``reduce``, an ``index`` that is not 1-d or out of range, or a
            ``source`` of another shape.
        TypeError: ``amax``/``amin``/``prod`` of complex input.
    """
    if reduce not in _INDEX_REDUCES:
        raise ValueError(f"index_reduce: reduce must be one of {_INDEX_REDUCES}, got {reduce!r}")
    x = V.array("index_reduce", "x", x)
    source = V.array("index_reduce", "source", source)
    index = _indices("index_reduce", "index", index)
    ax = V.single_axis("index_reduce", x.ndim, axis, "axis")
    expected = x.shape[:ax] + index.shape + x.shape[ax + 1 :]
    if index.ndim != 1 or source.shape != expected:
        raise ValueError(
            f"index_reduce: index must be 1-d and source of shape {expected} (x's with axis {axis} of length "
            f"len(index)), got index {index.shape} and source {source.shape}"
        )
    _index_in_range("index_reduce", "index", index, x.shape[ax])  # the error names index_reduce
    full = jnp.broadcast_to(index.reshape((1,) * ax + (-1,) + (1,) * (x.ndim - ax - 1)), source.shape)
    return scatter_reduce(x, ax, full, source, reduce, include_self)
