"""Indexing ops with torch's semantics: ``embedding`` (``jaxrules.nn``) and ``scatter_reduce``
(``jaxrules.numpy``, torch's argument order). Formulas in ``jvp_rules`` / ``vjp_rules``
(section "Indexing"), derivative weights in ``partials.scatter_reduce_weights``."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxrules import _validate as V
from jaxrules import jvp_rules as J
from jaxrules import partials as P
from jaxrules import vjp_rules as R
from jaxrules.mechanism import define_op
from jaxrules.ops._sampling import distinct, normal
from jaxrules.registry import OpRecord, Sample, SingularPoint, register

# ----------------------------------------------------------------------------------------------
# embedding

embedding_op = define_op(
    "embedding",
    lambda indices, weight, **_: jnp.take(weight, indices, axis=0),
    J.embedding_jvp,
    R.embedding_vjp,
    lambda out, indices, weight, **_: indices,
)


def _indices(op, name, x):
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(f"{op}: {name} must be an integer array, got {x.dtype}")
    return x


def embedding(indices, weight, padding_idx=None, scale_grad_by_freq=False):
    """torch.nn.functional.embedding: ``weight[indices]`` with seed ``embedding_backward`` /
    ``embedding_dense_double_backward``. torch's conventions, which are not the derivative of the
    lookup: the ``padding_idx`` row gets no gradient (JAX's ``take`` has no such notion), and
    ``scale_grad_by_freq`` divides each row's gradient by its index's count in ``indices``; the
    JVP is the transpose of that backward."""
    indices = _indices("embedding", "indices", indices)
    weight = V.array("embedding", "weight", weight)
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be (num_embeddings, embedding_dim), got {weight.shape}")
    num = weight.shape[0]
    if padding_idx is not None:
        if not isinstance(padding_idx, int | np.integer) or not -num <= padding_idx < num:
            raise ValueError(f"embedding: padding_idx must be an int in [-{num}, {num}), got {padding_idx!r}")
        padding_idx = int(padding_idx) % num
    return embedding_op(indices, weight, padding_idx=padding_idx, scale_grad_by_freq=bool(scale_grad_by_freq), num=num)


# ----------------------------------------------------------------------------------------------
# scatter_reduce

_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def _scatter_reduce_primal(x, index, src, *, axis, reduce, include_self):
    coords = P.scatter_coords(index, axis)
    identity = {"sum": 0, "mean": 0, "prod": 1, "amax": -jnp.inf, "amin": jnp.inf}[reduce]
    base = x if include_self else x.at[coords].set(identity)
    if reduce in ("sum", "mean"):
        total = base.at[coords].add(src)
        if reduce == "sum":
            return total
        keeps_x = jnp.ones(x.shape, bool) if include_self else ~P.scattered_mask(x.shape, coords)
        count = keeps_x.astype(x.real.dtype) + P.scatter_add(x.shape, coords, jnp.ones(src.shape, x.real.dtype))
        return total / jnp.maximum(count, 1)
    if reduce == "prod":
        return base.at[coords].multiply(src)
    return base.at[coords].max(src) if reduce == "amax" else base.at[coords].min(src)


def _save_scatter_reduce(out, x, index, src, *, axis, reduce, include_self):
    prod_weights = P.scatter_prod_weights(x, index, src, axis, include_self) if reduce == "prod" else None
    return x, index, src, out, prod_weights


scatter_reduce_op = define_op(
    "scatter_reduce", _scatter_reduce_primal, J.scatter_reduce_jvp, R.scatter_reduce_vjp, _save_scatter_reduce
)


def scatter_reduce(x, axis, index, src, reduce, include_self=True):
    """torch.scatter_reduce (``input.scatter_reduce(dim, index, src, reduce, include_self)``):
    ``out[..., index[p], ...] = reduce(x[...], src[p] for every p scattered there)`` along
    ``axis``; ``src`` is cut to ``index``'s shape as torch does. Derivatives (seed
    ``scatter_reduce_backward`` / ``scatter_reduce_jvp``): sum, mean (1/count, self included
    when ``include_self``), amax/amin (ties share evenly, self included), prod (product of the
    other members, exact with zeros and duplicate indices, to any order; torch leaves its
    forward derivative undefined and JAX raises)."""
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
    return scatter_reduce_op(x, index, src, axis=ax, reduce=reduce, include_self=bool(include_self))


_INDEX_REDUCES = ("prod", "mean", "amax", "amin")


def index_reduce(x, axis, index, source, reduce, include_self=True):
    """torch's ``index_reduce`` (``x.index_reduce(dim, index, source, reduce, include_self)``):
    slice ``k`` of ``source`` along ``axis`` is reduced into slice ``index[k]`` of ``x``. It is
    ``scatter_reduce`` with the 1-d ``index`` broadcast over the other axes, so its derivatives
    are the same formulas (seed ``index_reduce_backward``)."""
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
    full = jnp.broadcast_to(index.reshape((1,) * ax + (-1,) + (1,) * (x.ndim - ax - 1)), source.shape)
    return scatter_reduce(x, ax, full, source, reduce, include_self)


# ----------------------------------------------------------------------------------------------
# Records


def _torch_embedding(torch, indices, weight, padding_idx=None, scale_grad_by_freq=False):
    return torch.nn.functional.embedding(indices, weight, padding_idx, scale_grad_by_freq=scale_grad_by_freq)


register(OpRecord(
    "embedding", embedding, ("jaxrules.nn.embedding",), ("embedding",),
    ("embedding_backward", "embedding_dense_double_backward"),
    lambda rng, dt: [
        Sample((np.array([[0, 2, 4], [2, 2, 1]]), normal(rng, dt, 5, 3))),
        Sample((np.array([3, 0, 3]), normal(rng, dt, 4, 2)), {"padding_idx": 1}),  # padding row unused
    ],
    _torch_embedding, "torch.nn.functional.embedding",
    deviations="torch's conventions (not the lookup's derivative): no gradient into padding_idx, and "
    "scale_grad_by_freq divides by the index counts; pinned against torch in tests/test_indexing.py.",
))


def _scatter_samples(reduce):
    def samples(rng, dt):
        index = np.array([[0, 2, 0], [3, 3, 3], [1, 0, 1]])  # duplicates in every row
        out = []
        for include_self in (True, False):
            x, src = distinct(rng, dt, 3, 4), distinct(rng, dt, 3, 3)  # torch's backward rejects a larger src
            out.append(Sample((x, 1, index, src, reduce), {"include_self": include_self}))
        out.append(Sample((distinct(rng, dt, 4, 2), 0, np.array([[1, 0], [1, 3]]), distinct(rng, dt, 2, 2), reduce)))
        return out

    return samples


def _torch_scatter_reduce(torch, x, axis, index, src, reduce, include_self=True):
    return torch.scatter_reduce(x, axis, index, src, reduce, include_self=include_self)


_PROD_ZEROS = (
    SingularPoint("one zero in a slot", (np.array([[1.0, 2.0]]), 1, np.array([[0, 0, 1]]), np.array([[0.0, 3.0, 4.0]]), "prod")),
    SingularPoint("two zeros in a slot", (np.array([[0.0, 2.0]]), 1, np.array([[0, 0, 1]]), np.array([[0.0, 3.0, 4.0]]), "prod")),
)
_TIES = (
    SingularPoint("ties with self", (np.array([[3.0, 2.0]]), 1, np.array([[0, 0, 1]]), np.array([[3.0, 3.0, 1.0]]), "amax")),
)

for _reduce in _REDUCES:
    register(OpRecord(
        f"scatter_reduce_{_reduce}", scatter_reduce, ("jaxrules.numpy.scatter_reduce",), ("scatter_reduce",),
        ("scatter_reduce_backward", "scatter_reduce_jvp"), _scatter_samples(_reduce), _torch_scatter_reduce,
        "torch.scatter_reduce",  # complex sum/mean work, but torch cannot differentiate them to compare
        torch_jvp_differs="torch's forward AD of scatter_reduce(prod) gives a wrong tangent (the seed's "
        "scatter_reduce_jvp leaves prod undefined)" if _reduce == "prod" else "",
        singular={"prod": _PROD_ZEROS, "amax": _TIES}.get(_reduce, ()),
        deviations="prod: forward-mode and higher derivatives are defined (torch: not implemented / "
        "DelayedError with two zeros)." if _reduce == "prod" else "",
        double_backward="JAX's derivative of the saved products of the others (segmented scans)"
        if _reduce == "prod" else "JAX's derivative of the VJP formula",
    ))


def _index_reduce_samples(rng, dt):
    index = np.array([2, 0, 2, 2])
    return [
        # prod and mean here; amax/amin are scatter_reduce's records and tests/test_indexing.py's (CI time)
        Sample((distinct(rng, dt, 3, 2), 0, index, distinct(rng, dt, 4, 2), reduce), {"include_self": k % 2 == 0})
        for k, reduce in enumerate(("prod", "mean"))
    ]


def _torch_index_reduce(torch, x, axis, index, source, reduce, include_self=True):
    return x.index_reduce(axis, index, source, reduce, include_self=include_self)


register(OpRecord(
    "index_reduce", index_reduce, ("jaxrules.numpy.index_reduce",),
    ("scatter_reduce",), ("index_reduce_backward",), _index_reduce_samples,
    _torch_index_reduce, "torch.Tensor.index_reduce",
    torch_jvp_differs="torch's forward AD of index_reduce(prod) is not the derivative (as scatter_reduce's)",
    singular=(SingularPoint("prod with a zero in a slot", (np.array([[1.0, 2.0], [3.0, 4.0]]), 0, np.array([0, 0]),
                                                          np.array([[0.0, 2.0], [5.0, 0.5]]), "prod")),),
    deviations="prod: forward-mode and higher derivatives are defined (as scatter_reduce's).",
))
