"""Linear recurrences (cumprod, logcumsumexp), mask-based derivatives of max/min/median/norms, norms
and reduction factors. Part of ``jaxrules.partials``."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxrules.mechanism import unsharded_along
from jaxrules.partials.elementwise import expand_reduced, promoted, promoted_dtype, reduced_size, safe_reciprocal, sgn

__all__ = [  # the helpers jaxrules.partials re-exports (formulas write P.<name>)
    "even_weights", "exclusive_cumprod", "half_reciprocal", "linear_recurrence", "linear_recurrence_transpose",
    "logcumsumexp_coefficients", "logsumexp_parts", "logsumexp_weights", "max_or_neg_inf", "median_weights",
    "prod_of_others", "real_inner", "renorm_scale", "var_scale", "vector_norm_direction"
]

# ----------------------------------------------------------------------------------------------
# Linear recurrences h_k = a_k h_{k-1} + b_k (h_{-1} = 0), used by cumprod and logcumsumexp.


def _compose(left, right):
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a2 * b1 + b2


def linear_recurrence(a, b, axis):
    """Solve ``h_k = a_k h_{k-1} + b_k`` along ``axis`` with an associative scan (no division,
    so zeros in ``a`` are exact)."""
    dtype = promoted_dtype(a, b)
    return lax.associative_scan(_compose, (a.astype(dtype), b.astype(dtype)), axis=axis)[1]


def linear_recurrence_transpose(a, ct, axis):
    """Transpose of ``b -> linear_recurrence(a, b)``: ``s_k = ct_k + a_{k+1} s_{k+1}``."""
    n = a.shape[axis]
    shifted = jnp.concatenate(
        [lax.slice_in_dim(a, 1, n, axis=axis), jnp.zeros_like(lax.slice_in_dim(a, 0, 1, axis=axis))],
        axis=axis,
    )
    dtype = promoted_dtype(a, ct)
    return lax.associative_scan(_compose, (shifted.astype(dtype), ct.astype(dtype)), axis=axis, reverse=True)[1]


def exclusive_cumprod(x, axis):
    """``prod_{i<k} x_i`` along ``axis`` (1 for k = 0), without division; an associative scan
    (``jnp.cumprod`` is quadratic on GPU for long axes: 110x slower at 4096)."""
    n = x.shape[axis]
    ones = jnp.ones_like(lax.slice_in_dim(x, 0, 1, axis=axis))
    shifted = jnp.concatenate([ones, lax.slice_in_dim(x, 0, n - 1, axis=axis)], axis=axis)
    return lax.associative_scan(lax.mul, shifted, axis=axis % x.ndim)


def prod_of_others(x, axis):
    """``prod_{j != i} x_j`` over the reduced ``axis`` (a tuple), zero-safe and branch-free
    (seed ``prod_safe_zeros_backward``, which branches on the zero count with ``.item()``).

    A product tree: the up-sweep multiplies neighbours pairwise (padding with ones to a power of
    two), the down-sweep hands each node the product of everything outside it times its
    sibling. O(n) multiplications and no division, so zeros are exact (JAX's own rule for prod
    is the same tree; two associative scans measured 2x slower on the H100)."""
    if not axis:
        return jnp.ones_like(x)
    x = unsharded_along(x, tuple(a % x.ndim for a in axis))  # the tree pairs entries along the axis
    moved = jnp.moveaxis(x, axis, tuple(range(x.ndim - len(axis), x.ndim)))
    batch = moved.shape[: x.ndim - len(axis)]
    flat = moved.reshape(batch + (-1,))
    n = flat.shape[-1]
    width = 1 << max(n - 1, 0).bit_length()
    levels = [jnp.concatenate([flat, jnp.ones(batch + (width - n,), flat.dtype)], -1) if width > n else flat]
    while levels[-1].shape[-1] > 1:
        pairs = levels[-1].reshape(batch + (-1, 2))
        levels.append(pairs[..., 0] * pairs[..., 1])
    outside = jnp.ones(batch + (1,), flat.dtype)
    for level in reversed(levels[:-1]):
        pairs = level.reshape(batch + (-1, 2))
        outside = (outside[..., None] * pairs[..., ::-1]).reshape(level.shape)
    others = outside[..., :n].reshape(moved.shape)
    return jnp.moveaxis(others, tuple(range(x.ndim - len(axis), x.ndim)), axis)


# ----------------------------------------------------------------------------------------------
# Mask-based (evenly distributed) derivatives: max/min/median/inf-norm/logsumexp at infinity.


def even_weights(x, value, axis, keepdims):
    """``mask / count`` with ``mask = (x == value) | (isnan(x) & isnan(value))``: the derivative
    of a selection that spreads evenly over ties (seed ``evenly_distribute_backward`` and
    ``scale_grad_by_count``; NaN counts as the selected value, as the seed's VJP does)."""
    # The mask compares x with its own maximum (minimum, ...): both must be the very same
    # materialized values, not recomputations that XLA may fuse (and round) differently.
    x, value = lax.optimization_barrier((x, value))
    v = expand_reduced(value, x.shape, axis, keepdims)
    mask = (x == v) | (jnp.isnan(x) & jnp.isnan(v))
    count = jnp.sum(mask, axis=axis, keepdims=True)
    # bool over int to float by jax.numpy's standard promotion, whatever the user's setting: the
    # same program as under the default (vector_norm's ord=inf second derivatives at ties depend on it)
    with jax.numpy_dtype_promotion("standard"):
        return mask / jnp.where(count == 0, 1, count)


def max_or_neg_inf(x, axis):
    """``max x`` over ``axis`` (kept); -inf over an empty axis (the empty sum of exponentials
    is 0, so logsumexp is -inf there, as in torch and JAX)."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    empty = any(x.shape[a] == 0 for a in axes)
    return jnp.max(x, axis=axis, keepdims=True, initial=-jnp.inf if empty else None)


def logsumexp_parts(x, axis):
    """``(m, e, s)`` with ``m = max(x)`` (real part), ``e = exp(x - m)`` and ``s = sum(e)`` (kept
    axes), so that ``logsumexp = m + log(s)`` and its derivative is ``e / s``. Where ``m`` is
    infinite, ``e`` is 1 on the entries equal to ``m`` and 0 elsewhere: ``e / s`` is then the
    softmax's limit (even weights over the -inf entries when all are -inf, over the +inf entries
    when one is; torch and JAX give NaN) and ``m + log(s) = m``. One exponential, no branch."""
    m = lax.stop_gradient(max_or_neg_inf(x.real if jnp.iscomplexobj(x) else x, axis))
    finite = jnp.isfinite(m)
    at_limit = jnp.where((x.real if jnp.iscomplexobj(x) else x) == m, 0, -jnp.inf)
    e = jnp.exp(jnp.where(finite, x - jnp.where(finite, m, 0).astype(x.dtype), at_limit))
    return m, e, jnp.sum(e, axis=axis, keepdims=True)


def logsumexp_weights(x, axis):
    """``d logsumexp / dx = exp(x - logsumexp(x))``, with its limits at infinite results (see
    ``logsumexp_parts``)."""
    _, e, total = logsumexp_parts(x, axis)
    return e / total


def median_weights(x, axis, keepdims):
    """``d median / dx`` for numpy's median (mean of the two middle values when the count is
    even): each middle value's weight 1/2 (1 when odd) spread evenly over its ties."""
    n = reduced_size(x.shape, axis)
    x = unsharded_along(x, tuple(a % x.ndim for a in axis))  # an Explicit mesh: sorted along the axes
    moved = jnp.moveaxis(x, axis, tuple(range(x.ndim - len(axis), x.ndim)))
    flat = moved.reshape(moved.shape[: x.ndim - len(axis)] + (n,))
    ordered = jnp.sort(flat, axis=-1)  # NaNs sort last
    has_nan = jnp.isnan(flat).any(-1)
    lower = jnp.where(has_nan, jnp.nan, ordered[..., (n - 1) // 2])
    upper = jnp.where(has_nan, jnp.nan, ordered[..., n // 2])
    weights = 0.5 * (even_weights(flat, lower, (-1,), False) + even_weights(flat, upper, (-1,), False))
    weights = jnp.moveaxis(weights.reshape(moved.shape), tuple(range(x.ndim - len(axis), x.ndim)), axis)
    return weights


# ----------------------------------------------------------------------------------------------
# Norms (seed ``norm_backward`` / ``norm_jvp``).


def vector_norm_direction(x, norm, ord, axis, keepdims):
    """``w`` with ``d norm = Re sum(conj(w) dx)`` (torch's gradient of the p-norm).

    ord 0: 0. ord 1: sgn(x). ord 2: x/norm. ord +-inf: sgn(x)*mask/count over the entries of
    largest (smallest) magnitude, NaN counting as selected. Other p:
    sgn(x)|x|^(p-1) / norm^(p-1). Every case is 0 where x == 0 (where norm == 0 for ord 2) —
    the zero subgradient — and stays finite under another derivative.
    """
    n = expand_reduced(norm, x.shape, axis, keepdims)
    if ord == 0:
        return jnp.zeros_like(x)
    if ord == 1:
        return sgn(x)
    if ord == 2:
        return x * safe_reciprocal(n, n == 0).astype(x.dtype)
    mag = jnp.abs(x)
    if ord in (math.inf, -math.inf):
        sign, weights = promoted(sgn(x), even_weights(mag, norm, axis, keepdims))
        return sign * weights
    zero = mag == 0
    safe_mag = jnp.where(zero, 1, mag)
    safe_n = jnp.where(n == 0, 1, n)
    scale = jnp.where(zero | (n == 0), 0, (safe_mag / safe_n) ** (ord - 1))
    return jnp.multiply(*promoted(sgn(x), scale))


def real_inner(w, t, axis, keepdims):
    """``Re sum(conj(w) t)`` over ``axis``."""
    prod = jnp.conj(w) * t if jnp.iscomplexobj(w) else w * t
    return jnp.sum(prod.real if jnp.iscomplexobj(prod) else prod, axis=axis, keepdims=keepdims)


# ----------------------------------------------------------------------------------------------
# Reduction factors.


def var_scale(centered, axis, correction):
    """``2 / (N - c)``; ``N - c <= 0`` gives inf (torch's ``var_backward`` gives
    ``where(x == mean, NaN, inf)``, which the product with ``x - mean`` reproduces)."""
    dof = reduced_size(centered.shape, axis) - correction
    return 2.0 / dof if dof > 0 else math.inf


def half_reciprocal(std):
    """``1/(2 std)``, 0 where std = 0 (seed ``std_backward``'s masked_fill)."""
    return 0.5 * safe_reciprocal(std, std == 0)


def logcumsumexp_coefficients(x, y, axis):
    """Coefficients of ``dy_k = a_k dy_{k-1} + b_k t_k``: ``a_k = exp(y_{k-1} - y_k)``,
    ``b_k = exp(x_k - y_k)``, both in [0, 1]. Where ``y_k`` is infinite (all entries so far are
    -inf, or one is +inf) the softmax's limit: even weights over the entries equal to ``y_k``,
    so ``a_k = c_{k-1}/c_k`` and ``b_k = [x_k = y_k]/c_k`` with ``c`` the running count.
    Complex input: the same with complex exponentials (holomorphic, so the coefficients are the
    derivative itself, JAX's convention); finiteness and the limits read the real parts."""
    n = x.shape[axis]
    first = lax.slice_in_dim(y, 0, 1, axis=axis)
    y_prev = jnp.concatenate([jnp.full_like(first, -jnp.inf), lax.slice_in_dim(y, 0, n - 1, axis=axis)], axis)
    re = (lambda v: v.real) if jnp.iscomplexobj(y) else (lambda v: v)  # noqa: E731
    finite = jnp.logical_not(jnp.isinf(re(y)))  # NaN takes the exponentials: NaN in, NaN out
    y_safe = jnp.where(finite, y, 0)
    a_soft = jnp.exp(jnp.where(finite, y_prev - y_safe, -jnp.inf))
    b_soft = jnp.exp(jnp.where(finite, x - y_safe, -jnp.inf))
    hits = re(x) == jnp.where(re(y) > 0, jnp.inf, -jnp.inf)
    count = jnp.cumsum(hits, axis=axis)
    count_prev = count - hits.astype(count.dtype)
    safe_count = jnp.where(count == 0, 1, count)
    a_inf = jnp.where(re(y_prev) == re(y), count_prev / safe_count, 0).astype(x.dtype)
    b_inf = (hits.astype(safe_count.dtype) / safe_count).astype(x.dtype)
    return jnp.where(finite, a_soft, a_inf), jnp.where(finite, b_soft, b_inf)


def renorm_scale(norm, maxnorm):
    """``(s, ds/dnorm, norm > maxnorm)`` with ``s = maxnorm / (norm + 1e-7)`` (seed
    ``renorm_backward``)."""
    inv = 1 / (norm + 1e-7)
    return maxnorm * inv, -maxnorm * inv * inv, norm > maxnorm
