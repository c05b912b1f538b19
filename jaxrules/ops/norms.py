"""Norms and distances: ``vector_norm`` and ``renorm`` carry formulas; ``norm``, ``dist`` and
``cdist`` are compositions whose derivatives come from ``vector_norm``'s (and the other ops')
rules. Public through ``jaxrules.numpy.linalg`` and ``jaxrules.linalg``."""

from __future__ import annotations

import math
import numbers
import operator

import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from jaxrules import _validate as V
from jaxrules import partials as P
from jaxrules._namespace import exported_as
from jaxrules.mechanism import define_op, unsharded_along
from jaxrules.ops import elementwise, linalg, reductions
from jaxrules.ops.elementwise import clip
from jaxrules.partials import expand_reduced, real_inner

# ----------------------------------------------------------------------------------------------
# Ops

def _vector_norm_primal(x, *, ord, axis, keepdims):
    return jnp.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)


def vector_norm_jvp(res, t, *, ord, axis, keepdims, **_):
    """``Re sum(conj(w) t)`` with ``w`` the norm's direction (seed ``norm_jvp``)."""
    x, norm = res
    w = P.vector_norm_direction(x, norm, ord, axis, keepdims)
    return real_inner(w, t, axis, keepdims)


def vector_norm_vjp(res, ct, *, ord, axis, keepdims, **_):
    """``conj(w) expand(ct)`` with ``w`` the norm's direction (seed ``norm_backward``)."""
    x, norm = res
    w = P.vector_norm_direction(x, norm, ord, axis, keepdims)
    return (jnp.multiply(*P.promoted(jnp.conj(w), expand_reduced(ct, x.shape, axis, keepdims))),)


vector_norm_op = define_op(
    "vector_norm", _vector_norm_primal, vector_norm_jvp, vector_norm_vjp, lambda out, x, **_: (x, out)
)


def _renorm_primal(x, *, p, axis, maxnorm):
    norm = vector_norm_op(x, ord=p, axis=axis, keepdims=True)
    return jnp.where(norm > maxnorm, x * (maxnorm / (norm + 1e-7)).astype(x.dtype), x)


def renorm_jvp(res, t, *, p, axis, maxnorm, **_):
    """Seed ``renorm_jvp``: ``where(norm > maxnorm, s t - x maxnorm/(norm+1e-7)^2 dnorm, t)``
    with ``s = maxnorm/(norm + 1e-7)``."""
    x, norm = res
    w = P.vector_norm_direction(x, norm, p, axis, True)
    scale, dscale, over = P.renorm_scale(norm, maxnorm)
    dnorm = real_inner(w, t, axis, True)
    step = jnp.multiply(*P.promoted(scale, t)) + jnp.multiply(*P.promoted(x, dscale * dnorm))
    return jnp.where(over, step, t)


def renorm_vjp(res, ct, *, p, axis, maxnorm, **_):
    """Seed ``renorm_backward``: ``where(norm > maxnorm, s ct + conj(w) ds Re sum(x ct), ct)``."""
    x, norm = res
    w = P.vector_norm_direction(x, norm, p, axis, True)
    scale, dscale, over = P.renorm_scale(norm, maxnorm)
    inner = jnp.sum(x * ct, axis=axis, keepdims=True)
    inner = inner.real if jnp.iscomplexobj(inner) else inner
    step = jnp.multiply(*P.promoted(scale, ct)) + jnp.multiply(*P.promoted(jnp.conj(w), dscale * inner))
    return (jnp.where(over, step, ct),)


renorm_op = define_op(
    "renorm", _renorm_primal, renorm_jvp, renorm_vjp,
    lambda out, x, *, p, axis, **_: (x, vector_norm_op(x, ord=p, axis=axis, keepdims=True)),
)


# ----------------------------------------------------------------------------------------------
# Public functions

def _check_ord(op, ord, name="ord"):
    if isinstance(ord, bool) or not isinstance(ord, numbers.Real) or math.isnan(ord):
        raise ValueError(f"{op}: {name} must be a real number (or +-inf), got {ord!r}")
    return float(ord) if not float(ord).is_integer() or math.isinf(ord) else int(ord)


@exported_as("jaxrules.numpy.linalg.vector_norm", "jaxrules.linalg.vector_norm")
def vector_norm(x: ArrayLike, /, *, axis: int | tuple[int, ...] | list[int] | None = None, keepdims: bool = False, ord: float | None = 2) -> Array:
    """The ``ord``-norm over ``axis`` (all axes by default). Derivatives of seed
    ``norm_backward`` / ``norm_jvp`` for every ord (0, 1, 2, +-inf, fractional, > 2): a zero
    vector (and, for ord != 2, a zero entry) has the zero subgradient at first and second order;
    ties of the inf-norm share the gradient; JAX gives NaN/inf there. Mirrors
    ``torch.linalg.vector_norm``.

    Args:
        x: the array, real or complex (integer and boolean input is promoted to float).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes, the
            flattened array's norm).
        keepdims: keep the reduced axes with length 1.
        ord: the order, a Python or NumPy real number: 0 (the count of non-zeros), +-inf, or
            any other real (``sum(|x|^ord)^(1/ord)``); None is 2 (as jax.numpy); not NaN or a
            bool (``ValueError``).

    Returns:
        The norm (real), with the reduced axes removed (length 1 with ``keepdims``).

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.numpy as rnp
        >>> print(rnp.linalg.vector_norm(jnp.array([[3.0, 4.0], [0.0, 0.0]]), axis=1))
        [5. 0.]
        >>> print(jax.grad(lambda x: rnp.linalg.vector_norm(x, ord=1))(jnp.array([-2.0, 0.0, 2.0])))
        [-1.  0.  1.]
    """
    ord = _check_ord("vector_norm", 2 if ord is None else ord)
    x = V.array("vector_norm", "x", x)
    axes = V.axes("vector_norm", x.ndim, axis)
    if ord == -np.inf and any(x.shape[d] == 0 for d in axes):
        raise ValueError(f"vector_norm: the -inf norm (a minimum) of an empty axis has no value; axes {axis!r} of shape "
                         f"{x.shape} (as torch refuses)")
    return vector_norm_op(x, ord=ord, axis=axes, keepdims=bool(keepdims))


@exported_as("jaxrules.numpy.linalg.norm")
def norm(x: ArrayLike, ord: int | float | str | None = None, axis: int | tuple[int, ...] | list[int] | None = None, keepdims: bool = False) -> Array:
    """``jax.numpy.linalg.norm``: vector norms (through ``vector_norm``) and the matrix norms
    'fro', 1, -1, inf, -inf (compositions of ``vector_norm``, ``abs``, ``sum``, ``amax``/``amin``),
    2, -2 and 'nuc' (``svdvals`` then ``amax``/``amin``/``sum``: ties of the spectral norm share
    the gradient). Mirrors ``torch.linalg.norm``.

    Args:
        x: the array, real or complex (integer and boolean input is promoted to float).
        ord: for a vector norm (one axis) a real number as in ``vector_norm`` (None: 2); for a
            matrix norm (two axes) None or ``"fro"``/``"f"`` (Frobenius), 1, -1, inf, -inf,
            2, -2 or ``"nuc"`` (``ValueError`` otherwise). Of an empty matrix, 1, inf and 2 give
            0 and -1, -inf, -2 (a minimum over no entries) ``ValueError``, as torch.
        axis: one axis (a vector norm) or two (a matrix norm), as an int or a tuple or list of
            ints. None: with ``ord`` None the 2-norm of the flattened ``x`` of any rank (0-d
            included, as ``jax.numpy``); with an ``ord``, every axis of a 1-d or 2-d ``x`` (the
            vector or the matrix norm), ``ValueError`` for other ranks.
        keepdims: keep the reduced axes with length 1.

    Returns:
        The norm (real), with the reduced axes removed (length 1 with ``keepdims``).

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.numpy as rnp
        >>> print(rnp.linalg.norm(jnp.array([3.0, 4.0])))
        5.0
        >>> print(jax.grad(rnp.linalg.norm)(jnp.zeros(3)))  # torch's subgradient; jax.numpy's: nan
        [0. 0. 0.]
    """
    x = V.array("norm", "x", x)
    if axis is None and ord is None:  # jax.numpy: the 2-norm of the flattened array, any rank
        return vector_norm(x, axis=None, keepdims=keepdims, ord=2)
    if axis is None:
        if x.ndim not in (1, 2):
            raise ValueError(f"norm: ord={ord!r} without axis needs a 1-d or 2-d x (as jax.numpy), got rank {x.ndim}")
        axis = 0 if x.ndim == 1 else (0, 1)
    axes = V.axes("norm", x.ndim, axis)
    if len(axes) == 1:
        return vector_norm(x, axis=axes, keepdims=keepdims, ord=2 if ord is None else ord)
    if len(axes) != 2:
        raise ValueError(f"norm: axis must name 1 or 2 axes, got {axis!r}")
    if ord in (None, "fro", "f"):
        return vector_norm(x, axis=axes, keepdims=keepdims, ord=2)
    # (row axis, column axis) in the order given: axis=(1, 0) is the matrix's transpose, whose
    # 1-norm is the given matrix's inf-norm (numpy, jax.numpy, torch.linalg.matrix_norm)
    rows, cols = (operator.index(a) % x.ndim for a in axis)
    if ord in (1, -1, math.inf, -math.inf, 2, -2):
        # the maximum (minimum) over an empty axis: of column/row sums (1, inf) or of min(m, n)
        # singular values (2): 0, the least norm, for ord > 0 and refused for ord < 0, as torch
        if ord in (2, -2):
            picked = min(x.shape[a] for a in axes)
        else:
            picked = x.shape[cols if ord in (1, -1) else rows]
        if picked == 0 and ord < 0:
            raise ValueError(f"norm: ord={ord!r} of an empty matrix (axes {axes} of shape {x.shape}) is a minimum "
                             "over no entries (torch refuses it too)")
        if picked == 0:
            shape = tuple(1 if k in axes else n for k, n in enumerate(x.shape) if keepdims or k not in axes)
            return jnp.zeros(shape, jnp.finfo(x.dtype).dtype)
    if ord in (1, -1, math.inf, -math.inf):
        summed_axis, pick_axis = (rows, cols) if ord in (1, -1) else (cols, rows)
        sums = reductions.sum(elementwise.abs(x), axis=summed_axis, keepdims=True)
        pick = reductions.amax if ord > 0 else reductions.amin
        out = pick(sums, axis=pick_axis, keepdims=True)
        return out if keepdims else jnp.squeeze(out, axes)
    if ord in (2, -2, "nuc"):
        moved = jnp.moveaxis(x, axes, (-2, -1))
        values = linalg.svdvals(moved)
        out = reductions.sum(values, axis=-1) if ord == "nuc" else (reductions.amax if ord == 2 else reductions.amin)(values, axis=-1)
        return jnp.expand_dims(out, axes) if keepdims else out
    raise ValueError(f"norm: invalid ord {ord!r} for a matrix norm")


@exported_as("jaxrules.linalg.renorm")
def renorm(input: ArrayLike, p: float, dim: int, maxnorm: float) -> Array:  # noqa: A002 - torch's argument name
    """torch.renorm: each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` is scaled to
    ``maxnorm`` (by ``maxnorm/(norm + 1e-7)``). Seed ``renorm_backward`` / ``renorm_jvp``; an
    all-zero slice has gradient 1 (a naive jnp version gives NaN). Mirrors ``torch.renorm``.

    Args:
        input: the array, rank >= 1 (integer and boolean input is promoted to float).
        p: the norm's order, a positive Python or NumPy real number (+inf included).
        dim: the axis whose slices (``input[..., i, ...]`` over every other axis) are
            renormalized, an int.
        maxnorm: the largest norm kept, a non-negative Python or NumPy real number (static;
            NaN raises ``ValueError``, as torch).

    Returns:
        ``input`` with each slice whose ``p``-norm exceeds ``maxnorm`` rescaled, of its shape.
    """
    x = V.array("renorm", "input", input)
    p = _check_ord("renorm", p, "p")
    if p <= 0:
        raise ValueError(f"renorm: p must be positive, got {p!r}")
    if isinstance(maxnorm, bool) or not isinstance(maxnorm, numbers.Real) or not maxnorm >= 0:  # NaN too
        raise ValueError(f"renorm: maxnorm must be a non-negative number, got {maxnorm!r}")
    d = V.single_axis("renorm", x.ndim, dim, "dim")
    others = tuple(a for a in range(x.ndim) if a != d)
    return renorm_op(x, p=p, axis=others, maxnorm=float(maxnorm))


@exported_as("jaxrules.linalg.dist")
def dist(input: ArrayLike, other: ArrayLike, p: float = 2) -> Array:  # noqa: A002 - torch's argument name
    """torch.dist: the ``p``-norm of ``input - other`` (broadcast); derivatives from
    ``vector_norm``'s rule (zero distance: zero gradient). Mirrors ``torch.dist``.

    Args:
        input: the first array (integer and boolean input is promoted to float).
        other: the second array, broadcastable with ``input``.
        p: the norm's order, a real number as ``vector_norm``'s ``ord``.

    Returns:
        A 0-d array: the ``p``-norm of the flattened broadcast difference.
    """
    x, y = V.array("dist", "input", input), V.array("dist", "other", other)
    V.broadcast("dist", input=x, other=y)
    return vector_norm(x - y, ord=_check_ord("dist", p, "p"))


@exported_as("jaxrules.linalg.cdist")
def cdist(x1: ArrayLike, x2: ArrayLike, p: float = 2.0) -> Array:
    """torch.cdist: ``out[..., i, j] = ||x1[..., i, :] - x2[..., j, :]||_p`` over leading batch
    dims; derivatives from ``vector_norm``'s rule, so coincident points get the zero gradient
    (torch's CPU kernel gives 0 too; a jnp formula gives NaN). Mirrors ``torch.cdist`` (without
    its ``compute_mode``).

    Args:
        x1: points ``(..., P, M)``, rank >= 2 (integer and boolean input is promoted to float).
        x2: points ``(..., R, M)``, rank >= 2, the same ``M``; the batch dims broadcast with
            ``x1``'s.
        p: the norm's order, a non-negative real number (+inf included) as ``vector_norm``'s
            ``ord``; negative raises ``ValueError`` (torch refuses it too).

    Returns:
        The distances, ``(..., P, R)`` over the broadcast batch dims.

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.linalg as rlinalg
        >>> x1, x2 = jnp.array([[0.0, 0.0]]), jnp.array([[3.0, 4.0], [0.0, 0.0]])
        >>> print(rlinalg.cdist(x1, x2), jax.grad(lambda x: rlinalg.cdist(x, x2)[0, 1])(x1))  # 0 at a zero distance
        [[5. 0.]] [[0. 0.]]
    """
    x1, x2 = V.array("cdist", "x1", x1), V.array("cdist", "x2", x2)
    if x1.ndim < 2 or x2.ndim < 2:
        raise ValueError(f"cdist: x1 and x2 must have rank >= 2, got {x1.shape} and {x2.shape}")
    if x1.shape[-1] != x2.shape[-1]:
        raise ValueError(f"cdist: x1 and x2 must have the same last dimension, got {x1.shape} and {x2.shape}")
    V.broadcast("cdist", x1=np.empty(x1.shape[:-2] + (1, 1), bool), x2=np.empty(x2.shape[:-2] + (1, 1), bool))
    p = _check_ord("cdist", p, "p")
    if p < 0:
        raise ValueError(f"cdist: p must be non-negative (as torch.cdist), got {p!r}")
    return vector_norm(x1[..., :, None, :] - x2[..., None, :, :], axis=-1, ord=p)


def _eps(op, eps):
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps):
        raise TypeError(f"{op}: eps must be a finite real number, got {eps!r}")
    return float(eps)


@exported_as("jaxrules.nn.normalize")
def normalize(x: ArrayLike, p: float = 2.0, axis: int = 1, eps: float = 1e-12) -> Array:
    """torch.nn.functional.normalize: ``x / max(||x||_p, eps)`` over ``axis`` (torch's ``dim``).
    A composition of ``vector_norm`` (zero subgradient at a zero vector) and ``clip`` (torch's
    ``clamp_min`` derivative): at a zero vector the derivative is ``I / eps``, finite at first
    and second order (a jnp formula gives NaN). Mirrors ``torch.nn.functional.normalize``.

    Args:
        x: the array (integer and boolean input is promoted to float).
        p: the norm's order, a real number as ``vector_norm``'s ``ord``.
        axis: the axis along which to normalize, an int (torch's ``dim``).
        eps: the floor of the norm, a finite Python or NumPy real number (static; ``TypeError``
            otherwise).

    Returns:
        ``x`` divided by its clamped norm along ``axis``, of ``x``'s shape.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nn as nn
        >>> print(nn.normalize(jnp.array([[3.0, 4.0], [0.0, 0.0]])))  # a zero row stays 0 (eps)
        [[0.6 0.8]
         [0.  0. ]]
    """

    x = V.array("normalize", "x", x)
    axis = V.single_axis("normalize", max(x.ndim, 1), axis)
    norm = vector_norm(x, axis=axis, keepdims=True, ord=_check_ord("normalize", p, "p"))
    return x / clip(norm, _eps("normalize", eps), None).astype(x.dtype)


@exported_as("jaxrules.nn.pairwise_distance")
def pairwise_distance(x1: ArrayLike, x2: ArrayLike, p: float = 2.0, eps: float = 1e-6, keepdims: bool = False) -> Array:
    """torch.nn.functional.pairwise_distance: ``||x1 - x2 + eps||_p`` over the last axis
    (``keepdims`` is torch's ``keepdim``); derivatives from ``vector_norm``'s rule, so equal
    points (with ``eps=0``) get the zero subgradient. Mirrors
    ``torch.nn.functional.pairwise_distance``.

    Args:
        x1: the first points, ``(..., M)`` (integer and boolean input is promoted to float).
        x2: the second points, broadcastable with ``x1``.
        p: the norm's order, a real number as ``vector_norm``'s ``ord``.
        eps: added to the difference, a finite Python or NumPy real number (static;
            ``TypeError`` otherwise).
        keepdims: keep the last axis with length 1 (torch's ``keepdim``).

    Returns:
        The distances over the last axis of the broadcast shape.
    """
    x1, x2 = V.array("pairwise_distance", "x1", x1), V.array("pairwise_distance", "x2", x2)
    V.broadcast("pairwise_distance", x1=x1, x2=x2)
    diff = x1 - x2 + _eps("pairwise_distance", eps)
    return vector_norm(diff, axis=-1, keepdims=bool(keepdims), ord=_check_ord("pairwise_distance", p, "p"))


@exported_as("jaxrules.nn.cosine_similarity")
def cosine_similarity(x1: ArrayLike, x2: ArrayLike, axis: int = 1, eps: float = 1e-8) -> Array:
    """torch.nn.functional.cosine_similarity: ``sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps))``
    over ``axis`` (torch's ``dim``) of the broadcast inputs. A composition of ``vector_norm`` (zero
    subgradient at a zero vector), ``clip`` (torch's ``clamp_min`` derivative) and ``sum``: below
    ``eps`` the output is linear in that input, and its derivative is that of the forward, finite
    at first and second order at a zero vector (torch: the same first derivative there, NaN at
    second order). Where ``0 < ||x1|| < eps`` torch's clamp (in place under ``no_grad``) still
    passes the norm's gradient; here it does not (the forward does not depend on the norm).
    Mirrors ``torch.nn.functional.cosine_similarity``.

    Args:
        x1: the first array (integer and boolean input is promoted to float).
        x2: the second array, broadcastable with ``x1``.
        axis: the axis of the vectors (of the broadcast shape), an int (torch's ``dim``).
        eps: the floor of each norm, a finite Python or NumPy real number (static;
            ``TypeError`` otherwise).

    Returns:
        The cosine similarities: the broadcast shape without ``axis``.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nn as nn
        >>> print(nn.cosine_similarity(jnp.array([[1.0, 0.0]]), jnp.array([[1.0, 1.0]])).round(4))
        [0.7071]
    """

    op = "cosine_similarity"
    x1, x2 = V.array(op, "x1", x1), V.array(op, "x2", x2)
    shape = V.broadcast(op, x1=x1, x2=x2)
    axis = V.single_axis(op, len(shape), axis)
    eps = _eps(op, eps)
    dtype = jnp.result_type(x1, x2)
    x1, x2 = jnp.broadcast_to(x1.astype(dtype), shape), jnp.broadcast_to(x2.astype(dtype), shape)
    floor = jnp.asarray(eps, dtype)
    n1 = clip(vector_norm(x1, axis=axis, keepdims=True), floor, None)
    n2 = clip(vector_norm(x2, axis=axis, keepdims=True), floor, None)
    return reductions.sum((x1 / n1) * (x2 / n2), axis=axis)


@exported_as("jaxrules.nn.pdist")
def pdist(x: ArrayLike, p: float = 2.0) -> Array:
    """torch.nn.functional.pdist: the ``p``-norm distances ``||x[i] - x[j]||_p`` of the rows of an
    (N, M) ``x`` for ``i < j`` in row-major order (N (N - 1) / 2 of them). Derivatives from
    ``vector_norm``'s rule: coincident rows get the zero subgradient at first and second order
    (torch: the same first derivative, and no second derivative: ``_pdist_backward`` is not
    differentiable). Mirrors ``torch.nn.functional.pdist``.

    Args:
        x: the rows, a 2-d ``(N, M)`` array (``ValueError`` otherwise; integer and boolean
            input is promoted to float).
        p: the norm's order, a non-negative real number (``ValueError`` if negative).

    Returns:
        The ``N (N - 1) / 2`` distances, 1-d.
    """
    x = V.array("pdist", "x", x)
    if x.ndim != 2:
        raise ValueError(f"pdist: x must be 2-d (N, M), got shape {x.shape}")
    p = _check_ord("pdist", p, "p")
    if p < 0:
        raise ValueError(f"pdist: p must be non-negative, got {p!r}")
    i, j = np.triu_indices(x.shape[0], 1)
    x = unsharded_along(x, (0,))  # an Explicit mesh: the pairs of rows are read whole
    return vector_norm(x[i] - x[j], axis=-1, ord=p)
