"""Reductions and scans: primal, residuals, JVP and VJP formulas of each, side by side
(gathered in ``jvp_rules`` and ``vjp_rules``). Public through ``jaxrules.numpy``, ``jaxrules.nn`` and
``jaxrules.scipy.special``."""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.special as jax_special
import numpy as np
from jax import Array, lax
from jax.typing import ArrayLike, DTypeLike

from jaxrules import _validate as V
from jaxrules import partials as P
from jaxrules._namespace import exported_as
from jaxrules.mechanism import define_op, unsharded_along
from jaxrules.partials import expand_reduced, real_inner, reduced_size

# ----------------------------------------------------------------------------------------------
# Ops

def _save_nothing(out, x, **_):
    return ()


def _save_x_and_out(out, x, **_):
    return x, out


def _save_centered(out, x, *, axis, **_):
    """``x - mean`` (what ``var_backward`` reads) and the first output (var or std)."""
    first = out[0] if isinstance(out, tuple) else out
    return x - jnp.mean(x, axis=axis, keepdims=True), first


def _moments(x, axis, keepdims, correction):
    """``(sum |x - mean|^2 / (N - c), mean)``; the variance is NaN where ``N - c <= 0``, as in
    jax.numpy (never negative; torch: inf). That NaN is computed from ``x`` (the sum times NaN),
    so the output depends on ``x`` and its derivative is the formulas' (NaN, as torch's), not a
    zero tangent for an output computed without the argument (``jax_custom_jvp3``)."""
    mean = jnp.mean(x, axis=axis, keepdims=True)
    centered = x - mean
    sq = (centered * jnp.conj(centered)).real if jnp.iscomplexobj(x) else centered * centered
    total = jnp.sum(sq, axis=axis, keepdims=keepdims)
    dof = math.prod(x.shape[a] for a in axis) - correction
    var = total / dof if dof > 0 else total * jnp.nan
    return var, mean if keepdims else jnp.squeeze(mean, axis)


def sum_jvp(res, t, *, axis, keepdims, **_):
    """``sum(t)`` (seed ``sum_backward``'s forward counterpart)."""
    return jnp.sum(t, axis=axis, keepdims=keepdims)


def sum_vjp(res, ct, *, axis, keepdims, shape, **_):
    """Unsqueeze the reduced axes and expand (seed ``sum_backward``)."""
    return (expand_reduced(ct, shape, axis, keepdims),)


sum_op = define_op("sum", lambda x, *, axis, keepdims, shape: jnp.sum(x, axis, keepdims=keepdims), sum_jvp, sum_vjp, _save_nothing)


def mean_jvp(res, t, *, axis, keepdims, **_):
    """``mean(t)`` (seed ``mean_backward``)."""
    return jnp.mean(t, axis=axis, keepdims=keepdims)


def mean_vjp(res, ct, *, axis, keepdims, shape, **_):
    """``expand(ct) / N`` (seed ``mean_backward``)."""
    return (expand_reduced(ct, shape, axis, keepdims) / reduced_size(shape, axis),)


mean_op = define_op("mean", lambda x, *, axis, keepdims, shape: jnp.mean(x, axis, keepdims=keepdims), mean_jvp, mean_vjp, _save_nothing)


def nansum_jvp(x, t, *, axis, keepdims, **_):
    """``sum(t where x is not NaN)`` (seed ``nansum_backward``)."""
    return jnp.sum(jnp.where(jnp.isnan(x), 0, t), axis=axis, keepdims=keepdims)


def nansum_vjp(x, ct, *, axis, keepdims, **_):
    """``expand(ct) * (x is not NaN)`` (seed ``nansum_backward``)."""
    return (jnp.where(jnp.isnan(x), 0, expand_reduced(ct, x.shape, axis, keepdims)),)


nansum_op = define_op("nansum", lambda x, *, axis, keepdims: jnp.nansum(x, axis, keepdims=keepdims), nansum_jvp, nansum_vjp)


def prod_jvp(x, t, *, axis, keepdims, **_):
    """``sum(prod_{j != i} x_j t_i)``, zero-safe (seed ``prod_safe_zeros_backward``)."""
    return jnp.sum(P.prod_of_others(x, axis) * t, axis=axis, keepdims=keepdims)


def prod_vjp(x, ct, *, axis, keepdims, **_):
    """``expand(ct) prod_{j != i} x_j``: seed ``prod_safe_zeros_backward``, always (the seed
    branches on the number of zeros with ``.item()``; this is branch-free)."""
    return (expand_reduced(ct, x.shape, axis, keepdims) * P.prod_of_others(x, axis),)


prod_op = define_op("prod", lambda x, *, axis, keepdims: jnp.prod(x, axis, keepdims=keepdims), prod_jvp, prod_vjp)


def cumsum_jvp(res, t, *, axis, **_):
    """``cumsum(t)`` (seed ``cumsum_backward``)."""
    return jnp.cumsum(t, axis=axis)


def cumsum_vjp(res, ct, *, axis, **_):
    """``flip(cumsum(flip(ct)))`` (seed ``cumsum_backward``), as one reversed cumsum."""
    return (lax.cumsum(ct, axis=axis, reverse=True),)


cumsum_op = define_op("cumsum", lambda x, *, axis: jnp.cumsum(x, axis), cumsum_jvp, cumsum_vjp, lambda out, x, **_: ())


def cumprod_jvp(x, t, *, axis, **_):
    """``h_k = x_k h_{k-1} + (prod_{i<k} x_i) t_k``: a linear recurrence, no division, so
    zeros are exact (torch's ``cumprod_backward`` divides and special-cases the first zero)."""
    return P.linear_recurrence(x, P.exclusive_cumprod(x, axis) * t, axis)


def cumprod_vjp(x, ct, *, axis, **_):
    """``(prod_{i<k} x_i) s_k`` with ``s_k = ct_k + x_{k+1} s_{k+1}``: the transpose of
    ``jvp_rules.cumprod_jvp``'s recurrence; exact with zeros and branch-free."""
    s = P.linear_recurrence_transpose(x, ct, axis)
    return (P.exclusive_cumprod(x, axis) * s,)


cumprod_op = define_op("cumprod", lambda x, *, axis: jnp.cumprod(x, axis), cumprod_jvp, cumprod_vjp)


def var_jvp(res, t, *, axis, keepdims, correction, **_):
    """``2/(N - c) Re sum(conj(x - mean) t)`` (seed ``var_backward``'s forward counterpart)."""
    centered, _ = res
    scale = P.var_scale(centered, axis, correction)
    return scale * real_inner(centered, t, axis, keepdims)


def var_vjp(res, ct, *, axis, keepdims, correction, **_):
    """``2/(N - c) ct (x - mean)`` (seed ``var_backward``; conj(x - mean) in JAX's complex
    convention)."""
    centered, _ = res
    scale = P.var_scale(centered, axis, correction)
    return (jnp.multiply(*P.promoted(scale * expand_reduced(ct, centered.shape, axis, keepdims), jnp.conj(centered))),)


var_op = define_op("var", lambda x, *, axis, keepdims, correction: _moments(x, axis, keepdims, correction)[0], var_jvp, var_vjp, _save_centered)


def std_jvp(res, t, *, axis, keepdims, correction, **_):
    """``var_jvp / (2 std)``, 0 where std = 0 (seed ``std_backward``)."""
    centered, std = res
    scale = P.var_scale(centered, axis, correction)
    return scale * real_inner(centered, t, axis, keepdims) * P.half_reciprocal(std)


def std_vjp(res, ct, *, axis, keepdims, correction, **_):
    """``var_vjp(ct / (2 std))``, 0 where std = 0 (seed ``std_backward``)."""
    centered, std = res
    return var_vjp(res, ct * P.half_reciprocal(std), axis=axis, keepdims=keepdims, correction=correction)


std_op = define_op("std", lambda x, *, axis, keepdims, correction: jnp.sqrt(_moments(x, axis, keepdims, correction)[0]), std_jvp, std_vjp, _save_centered)


def _with_mean_jvp(first_jvp, res, t, axis, keepdims, correction):
    """``(first_jvp, mean_jvp)``: the JVP of ``(var or std, mean)``."""
    return (first_jvp(res, t, axis=axis, keepdims=keepdims, correction=correction),
            jnp.mean(t, axis=axis, keepdims=keepdims))


def _with_mean_vjp(first_vjp, res, ct, axis, keepdims, correction):
    """``first_vjp(ct_first) + mean_vjp(ct_mean)``: the VJP of ``(var or std, mean)``."""
    ct_first, ct_mean = ct
    (g_first,) = first_vjp(res, ct_first, axis=axis, keepdims=keepdims, correction=correction)
    (g_mean,) = mean_vjp(None, ct_mean, axis=axis, keepdims=keepdims, shape=res[0].shape)
    return (g_first + g_mean,)


def var_mean_jvp(res, t, *, axis, keepdims, correction, **_):
    """``(var_jvp, mean_jvp)`` (seed ``var_mean_backward``)."""
    return _with_mean_jvp(var_jvp, res, t, axis, keepdims, correction)


def var_mean_vjp(res, ct, *, axis, keepdims, correction, **_):
    """``var_vjp(ct_var) + mean_vjp(ct_mean)`` (seed ``var_mean_backward``)."""
    return _with_mean_vjp(var_vjp, res, ct, axis, keepdims, correction)


var_mean_op = define_op("var_mean", lambda x, *, axis, keepdims, correction: _moments(x, axis, keepdims, correction), var_mean_jvp, var_mean_vjp, _save_centered)


def std_mean_jvp(res, t, *, axis, keepdims, correction, **_):
    """``(std_jvp, mean_jvp)`` (seed ``std_mean_backward``)."""
    return _with_mean_jvp(std_jvp, res, t, axis, keepdims, correction)


def std_mean_vjp(res, ct, *, axis, keepdims, correction, **_):
    """``std_vjp(ct_std) + mean_vjp(ct_mean)`` (seed ``std_mean_backward``)."""
    return _with_mean_vjp(std_vjp, res, ct, axis, keepdims, correction)


std_mean_op = define_op("std_mean", lambda x, *, axis, keepdims, correction: (
        lambda var, mean: (jnp.sqrt(var), mean)
    )(*_moments(x, axis, keepdims, correction)), std_mean_jvp, std_mean_vjp, _save_centered)


def selection_jvp(res, t, *, axis, keepdims, **_):
    """``sum(mask t) / count`` over the selected entries (seed ``evenly_read_jvp``, with the NaN
    handling of ``evenly_distribute_backward`` that the seed's JVP lacks). amax and amin."""
    x, out = res
    weights, t = P.promoted(P.even_weights(x, out, axis, keepdims), t)
    return jnp.sum(weights * t, axis=axis, keepdims=keepdims)


def selection_vjp(res, ct, *, axis, keepdims, **_):
    """``expand(ct) mask / count``: ties share evenly, NaN counts as selected (seed
    ``evenly_distribute_backward`` / ``scale_grad_by_count``). amax and amin."""
    x, out = res
    ct, weights = P.promoted(expand_reduced(ct, x.shape, axis, keepdims), P.even_weights(x, out, axis, keepdims))
    return (ct * weights,)


amax_op = define_op("amax", lambda x, *, axis, keepdims: jnp.max(x, axis, keepdims=keepdims), selection_jvp, selection_vjp, _save_x_and_out)
amin_op = define_op("amin", lambda x, *, axis, keepdims: jnp.min(x, axis, keepdims=keepdims), selection_jvp, selection_vjp, _save_x_and_out)
def _selected_index(x, *, kind, k, axis, **_):
    """torch's index (keepdims shape): the first maximum/minimum (NaN counts as the maximum and
    the minimum, as in torch), or the ``k``-th smallest in a stable sort (median: the lower middle
    one; the first NaN where there is one, as torch's ``median(dim)``; ``kthvalue`` sorts NaN
    last), so among equal values the earlier position comes first."""
    if kind == "max":
        idx = jnp.argmax(jnp.where(jnp.isnan(x), jnp.inf, x), axis=axis)
        idx = jnp.where(jnp.any(jnp.isnan(x), axis), jnp.argmax(jnp.isnan(x), axis), idx)
    elif kind == "min":
        idx = jnp.argmin(jnp.where(jnp.isnan(x), -jnp.inf, x), axis=axis)
        idx = jnp.where(jnp.any(jnp.isnan(x), axis), jnp.argmax(jnp.isnan(x), axis), idx)
    else:
        idx = jnp.take(P.sort_permutation(x, axis), k, axis=axis)
        if kind == "median":
            idx = jnp.where(jnp.any(jnp.isnan(x), axis), jnp.argmax(jnp.isnan(x), axis), idx)
    return jnp.expand_dims(idx, axis)


def _value_selection_primal(x, *, kind, k, axis, keepdims, shape):
    idx = _selected_index(x, kind=kind, k=k, axis=axis)
    values = jnp.take_along_axis(x, idx, axis=axis)
    return (values, idx) if keepdims else (jnp.squeeze(values, axis), jnp.squeeze(idx, axis))


def value_selection_jvp(idx, tx, *, axis, keepdims, **_):
    """The tangent read at the selected index (seed ``value_selecting_reduction_jvp``); the
    indices have no tangent."""
    picked = jnp.take_along_axis(tx, idx, axis=axis)
    return (picked if keepdims else jnp.squeeze(picked, axis)), None


def value_selection_vjp(idx, ct, *, axis, keepdims, shape, **_):
    """Seed ``value_selecting_reduction_backward``: the cotangent goes to the returned index
    only (ties do not share it)."""
    g, _ = ct
    g = g if keepdims else jnp.expand_dims(g, axis)
    return (P.scatter_add(shape, P.scatter_coords(idx, axis), g),)


value_selection_op = define_op(
    "value_selection", _value_selection_primal, value_selection_jvp, value_selection_vjp,
    lambda out, x, **static: _selected_index(x, **static),
)


def median_jvp(x, t, *, axis, keepdims, **_):
    """``sum(w t)`` with ``w`` the even split over the middle value(s) (seed
    ``evenly_read_jvp``)."""
    weights, t = P.promoted(P.median_weights(x, axis, keepdims), t)
    return jnp.sum(weights * t, axis=axis, keepdims=keepdims)


def median_vjp(x, ct, *, axis, keepdims, **_):
    """``expand(ct) w``, ``w`` the even split over the middle value(s) (seed
    ``evenly_distribute_backward``)."""
    ct, weights = P.promoted(expand_reduced(ct, x.shape, axis, keepdims), P.median_weights(x, axis, keepdims))
    return (ct * weights,)


median_op = define_op("median", lambda x, *, axis, keepdims: jnp.median(unsharded_along(x, axis), axis, keepdims=keepdims),
                      median_jvp, median_vjp)
def _save_softmax(out, x, *, axis, keepdims):
    """``exp(x - out)`` (with its limits at infinite ``out``): what both formulas multiply by,
    the same bytes as ``x``, so the backward is one product instead of an exp (under jit the
    exponential is shared with the primal)."""
    return P.logsumexp_weights(x, axis)


def _logsumexp_primal(x, *, axis, keepdims):
    m, _, total = P.logsumexp_parts(x, axis)
    out = jnp.add(*P.promoted(m, jnp.log(total)))
    return out if keepdims else jnp.squeeze(out, axis)


def logsumexp_jvp(weights, t, *, axis, keepdims, **_):
    """``sum(exp(x - out) t)`` with the saved weights ``exp(x - out)`` (the softmax's limit at
    infinite ``out``; see ``partials.logsumexp_weights``)."""
    return jnp.sum(weights * t, axis=axis, keepdims=keepdims)


def logsumexp_vjp(weights, ct, *, axis, keepdims, **_):
    """``expand(ct) exp(x - out)`` with the saved weights (seed ``logsumexp_backward``;
    holomorphic, so no conjugate in JAX's convention — torch 2.13 conjugates, the seed forgot
    to)."""
    return (expand_reduced(ct, weights.shape, axis, keepdims) * weights,)


logsumexp_op = define_op("logsumexp", _logsumexp_primal, logsumexp_jvp, logsumexp_vjp, _save_softmax)
def _log_add_exp_complex(a, b):
    """``log(exp(a) + exp(b))`` of complex ``a``, ``b``, shifted by the one with the larger real
    part; a term whose real part is -inf is exp(-inf) = 0 exactly, so the other is returned as is
    (two such: -inf + 0j, torch's), never the NaN of (-inf) - (-inf)."""
    big = jnp.where(a.real >= b.real, a, b)
    small = jnp.where(a.real >= b.real, b, a)
    empty = jnp.isneginf(small.real)
    total = big + jnp.log1p(jnp.exp(jnp.where(empty, 0, small - big)))
    total = jnp.where(empty, big, total)
    return jnp.where(jnp.isneginf(total.real), jnp.array(-jnp.inf, total.dtype), total)


def _shifted(v, fill, axis):
    """``v`` moved one step along ``axis``: ``fill`` first, then ``v[:-1]``."""
    first = lax.slice_in_dim(v, 0, 1, axis=axis)
    return jnp.concatenate([jnp.full_like(first, fill), lax.slice_in_dim(v, 0, v.shape[axis] - 1, axis=axis)], axis)


def _torch_branch(x, out, axis):
    """``out`` (a running ``log(sum(exp(x)))``, right modulo 2 pi i) on torch's branch: torch's
    CPU loop ``y_k = m + log1p(exp(s - m))`` takes ``m``, the term of larger real part (the new
    ``x_k`` on a tie), as is, so ``Im y_k = Im m + w`` with ``w`` in (-pi, pi]. Where ``m = x_k``
    that fixes ``Im y_k``; where ``m = y_{k-1}``, ``Im y_k = Im y_{k-1} + wrap(Im out_k - Im
    out_{k-1})``: a sum restarted at each new maximum, one associative scan. Entries with a
    non-finite real part keep ``out``."""

    def wrap(v):  # into [-pi, pi]
        return v - 2 * jnp.pi * jnp.round(v / (2 * jnp.pi))

    re, im = out.real, out.imag
    new_max = jnp.logical_not(x.real < _shifted(re, -jnp.inf, axis))
    step = jnp.where(new_max, x.imag + wrap(im - x.imag), wrap(im - _shifted(im, 0, axis)))

    def restart(a, b):
        return a[0] | b[0], jnp.where(b[0], b[1], a[1] + b[1])

    _, imag = lax.associative_scan(restart, (new_max, step), axis=axis)
    return jnp.where(jnp.isfinite(re), lax.complex(re, imag), out)


def _logcumsumexp_primal(x, *, axis):
    """``log(cumsum(exp(x)))``: JAX's ``cumlogsumexp`` for real ``x``; for complex ``x`` an
    associative scan of ``_log_add_exp_complex`` (JAX's gives NaN after a term of real part -inf;
    torch: exp(-inf) = 0), its imaginary part on torch's branch (``_torch_branch``)."""
    if not jnp.iscomplexobj(x) or x.shape[axis] == 0:
        return lax.cumlogsumexp(x, axis) if x.size else x
    out = lax.associative_scan(_log_add_exp_complex, jnp.where(jnp.isneginf(x.real), -jnp.inf, x), axis=axis)
    return _torch_branch(x, out, axis)


def logcumsumexp_jvp(res, t, *, axis, **_):
    """``dy_k = exp(y_{k-1} - y_k) dy_{k-1} + exp(x_k - y_k) t_k``: coefficients in [0, 1], so
    exact where the seed's ``logcumsumexp_jvp`` (global max + 1e-13) loses precision, and finite
    after leading -inf (see ``partials.logcumsumexp_coefficients``)."""
    a, b = P.logcumsumexp_coefficients(*res, axis)
    return P.linear_recurrence(a, b * t, axis)


def logcumsumexp_vjp(res, ct, *, axis, **_):
    """``b_k s_k`` with ``s_k = ct_k + a_{k+1} s_{k+1}``: the transpose of
    ``jvp_rules.logcumsumexp_jvp`` (replaces the seed's log-space ``logcumsumexp_backward``,
    which is NaN at a leading -inf)."""
    a, b = P.logcumsumexp_coefficients(*res, axis)
    return (b * P.linear_recurrence_transpose(a, ct, axis),)


logcumsumexp_op = define_op("logcumsumexp", _logcumsumexp_primal, logcumsumexp_jvp, logcumsumexp_vjp, _save_x_and_out)


# ----------------------------------------------------------------------------------------------
# Public functions

def _real(op, x, name="a"):
    """``x`` as an array (integer and boolean kept); ``TypeError`` naming ``op`` if complex."""
    x = V.array(op, name, x, inexact=False)
    if jnp.iscomplexobj(x):
        raise TypeError(f"{op}: argument {name!r} must be real (complex numbers have no order), got {x.dtype}")
    return x


def _prepare(op, a, axis, dtype=None, out=None, **unsupported):
    """Validate a reduction's arguments: (array, normalized axes)."""
    V.unsupported(op, out=out, **unsupported)
    x = V.array(op, "a", a, inexact=False)
    if dtype is not None:
        x = x.astype(dtype)
    return x, V.axes(op, x.ndim, axis)


def _where_mask(op, where):
    """``where`` as a boolean array; another dtype is a ``ValueError`` naming ``op``, jax.numpy's
    error type."""
    mask = V.array(op, "where", where, inexact=False)
    if not jnp.issubdtype(mask.dtype, jnp.bool_):
        raise ValueError(f"{op}: where must be None or a boolean array, got dtype {mask.dtype}")
    return mask


def _masked(op, x, where, fill):
    """``x`` where ``where`` (broadcast against x) is true, ``fill`` elsewhere: jax.numpy's
    ``where=`` of a reduction (None: x itself)."""
    if where is None:
        return x
    mask = _where_mask(op, where)
    try:
        mask = jnp.broadcast_to(mask, x.shape)
    except ValueError:
        raise ValueError(f"{op}: where of shape {mask.shape} does not broadcast to a's shape {x.shape}") from None
    return jnp.where(mask, x, jnp.asarray(fill, x.dtype))


def _scalar_initial(op, initial):
    """``initial`` must be a scalar (``ValueError``, as jax.numpy's reductions), or None."""
    if initial is not None and np.ndim(initial) != 0:
        raise ValueError(f"{op}: initial must be a scalar, got an array of shape {np.shape(initial)}")


def _is_exact(x) -> bool:
    return not jnp.issubdtype(x.dtype, jnp.inexact)


@exported_as("jaxrules.numpy.sum")
def sum(a: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, dtype: DTypeLike | None = None, out: None = None, keepdims: bool = False, initial: ArrayLike | None = None, where: ArrayLike | None = None, promote_integers: bool = True) -> Array:  # noqa: A001
    """Sum over ``axis``; VJP expands the cotangent (seed ``sum_backward``). Mirrors
    ``torch.sum``.

    Args:
        a: the array. Integer and boolean input is summed by ``jax.numpy.sum`` (no rule).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes).
        dtype: cast ``a`` to this dtype before summing; None keeps its dtype.
        out: not supported: must be None (``TypeError`` otherwise).
        keepdims: keep the reduced axes with length 1.
        initial: added to the sum, as ``jax.numpy.sum``; None adds nothing.
        where: a boolean mask broadcasting against ``a``: only its true entries are summed
            (the others get no derivative).
        promote_integers: for integer and boolean input, sum in the default integer width
            (as ``jax.numpy.sum``); unused for inexact input.

    Returns:
        The sum, with the reduced axes removed (length 1 with ``keepdims``).
    """
    x, ax = _prepare("sum", a, axis, dtype, out)
    _scalar_initial("sum", initial)
    if _is_exact(x):
        return jnp.sum(x, ax, dtype=dtype, keepdims=keepdims, initial=initial, where=where,
                       promote_integers=promote_integers)
    x = _masked("sum", x, where, 0)
    total = sum_op(x, axis=ax, keepdims=bool(keepdims), shape=x.shape)
    return total if initial is None else total + initial


@exported_as("jaxrules.numpy.mean")
def mean(a: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, dtype: DTypeLike | None = None, out: None = None, keepdims: bool = False, *, where: ArrayLike | None = None) -> Array:
    """Mean over ``axis``; VJP ``expand(ct)/N`` (seed ``mean_backward``). Mirrors
    ``torch.mean``.

    Args:
        a: the array (integer and boolean input is promoted to float).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes).
        dtype: cast ``a`` to this dtype first; None keeps its dtype.
        out: not supported: must be None (``TypeError`` otherwise).
        keepdims: keep the reduced axes with length 1.
        where: a boolean mask broadcasting against ``a``: the mean of its true entries (sum
            over count; NaN where none is true, as ``jax.numpy.mean``).

    Returns:
        The mean, with the reduced axes removed (length 1 with ``keepdims``).
    """
    x, ax = _prepare("mean", a, axis, dtype, out)
    if dtype is not None and _is_exact(x):  # an integer mean: jax.numpy's (integer division; no rule)
        return jnp.mean(x, ax, dtype=dtype, keepdims=keepdims, where=where)
    x = V.array("mean", "a", x)
    if where is None:
        return mean_op(x, axis=ax, keepdims=bool(keepdims), shape=x.shape)
    masked = _masked("mean", x, where, 0)
    count = jnp.sum(jnp.broadcast_to(jnp.asarray(where), x.shape), axis=ax, keepdims=bool(keepdims))
    return sum_op(masked, axis=ax, keepdims=bool(keepdims), shape=x.shape) / count.astype(x.dtype)


@exported_as("jaxrules.numpy.nansum")
def nansum(a: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, dtype: DTypeLike | None = None, out: None = None, keepdims: bool = False, initial: ArrayLike | None = None, where: ArrayLike | None = None) -> Array:
    """Sum ignoring NaNs; VJP zero at the NaNs (seed ``nansum_backward``). Mirrors
    ``torch.nansum``.

    Args:
        a: the array. Integer and boolean input is summed by ``jax.numpy.sum`` (no rule).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes).
        dtype: cast ``a`` to this dtype first; None keeps its dtype.
        out: not supported: must be None (``TypeError`` otherwise).
        keepdims: keep the reduced axes with length 1.
        initial: added to the sum; None adds nothing.
        where: a boolean mask broadcasting against ``a``: only its true entries count.

    Returns:
        The sum of the non-NaN entries (0 where all are NaN).
    """
    x, ax = _prepare("nansum", a, axis, dtype, out)
    _scalar_initial("nansum", initial)
    if _is_exact(x):
        return jnp.sum(x, ax, dtype=dtype, keepdims=keepdims, initial=initial, where=where)
    total = nansum_op(_masked("nansum", x, where, 0), axis=ax, keepdims=bool(keepdims))
    return total if initial is None else total + initial


@exported_as("jaxrules.numpy.prod")
def prod(a: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, dtype: DTypeLike | None = None, out: None = None, keepdims: bool = False, initial: ArrayLike | None = None, where: ArrayLike | None = None, promote_integers: bool = True) -> Array:
    """Product over ``axis``; derivative the product of the other entries, exact with zeros and
    branch-free (seed ``prod_backward`` / ``prod_safe_zeros_backward``). Mirrors ``torch.prod``.

    Args:
        a: the array, real or complex. Integer and boolean input goes to ``jax.numpy.prod``
            (no rule).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes).
        dtype: cast ``a`` to this dtype first; None keeps its dtype.
        out: not supported: must be None (``TypeError`` otherwise).
        keepdims: keep the reduced axes with length 1.
        initial: multiplies the product, as ``jax.numpy.prod``; None: 1.
        where: a boolean mask broadcasting against ``a``: only its true entries are
            multiplied (the others get no derivative).
        promote_integers: for integer and boolean input, as ``jax.numpy.prod``; unused for
            inexact input.

    Returns:
        The product, with the reduced axes removed (length 1 with ``keepdims``).
    """
    x, ax = _prepare("prod", a, axis, dtype, out)
    _scalar_initial("prod", initial)
    if _is_exact(x):
        return jnp.prod(x, ax, dtype=dtype, keepdims=keepdims, initial=initial, where=where,
                        promote_integers=promote_integers)
    product = prod_op(_masked("prod", x, where, 1), axis=ax, keepdims=bool(keepdims))
    return product if initial is None else product * initial


def _scan(op, x, axis, apply):
    """``apply(x, axis)`` with ``axis`` normalized; a 0-d ``x`` takes axis 0 or -1 and gives a
    0-d result (its one-element scan), as torch."""
    if x.ndim == 0:
        if axis is None or isinstance(axis, tuple | list):
            raise TypeError(f"{op}: axis must be a single int, got {axis!r}")
        V.axes(op, 0, axis)
        return apply(x.reshape(1), 0).reshape(())
    return apply(x, V.single_axis(op, x.ndim, axis))


def _scan_input(op, a, axis, dtype, out, exact_fn, scan_op):
    """cumsum/cumprod: ``a`` (cast to ``dtype``) scanned along ``axis`` (None: flattened) by
    ``exact_fn`` for integer/boolean input, else by ``scan_op``."""
    V.unsupported(op, out=out)
    x = V.array(op, "a", a, inexact=False)
    if dtype is not None:
        x = x.astype(dtype)
    if axis is None:
        x, axis = x.ravel(), 0
    return _scan(op, x, axis, lambda x, ax: exact_fn(x, ax, dtype=dtype) if _is_exact(x) else scan_op(x, axis=ax))


@exported_as("jaxrules.numpy.cumsum")
def cumsum(a: ArrayLike, axis: int | None = None, dtype: DTypeLike | None = None, out: None = None) -> Array:
    """Cumulative sum (flattened when ``axis`` is None); VJP the reversed cumsum (seed
    ``cumsum_backward``). Mirrors ``torch.cumsum``.

    Args:
        a: the array. Integer and boolean input goes to ``jax.numpy.cumsum`` (no rule; a
            boolean ``dtype`` gives its boolean running "or", as jax.numpy's).
        axis: one axis (an int; 0 or -1 for a 0-d ``a``, as torch); None: over the flattened
            array.
        dtype: cast ``a`` to this dtype first; None keeps its dtype.
        out: not supported: must be None (``TypeError`` otherwise).

    Returns:
        The running sums, of ``a``'s shape (1-d when ``axis`` is None).
    """
    return _scan_input("cumsum", a, axis, dtype, out, jnp.cumsum, cumsum_op)


@exported_as("jaxrules.numpy.cumprod")
def cumprod(a: ArrayLike, axis: int | None = None, dtype: DTypeLike | None = None, out: None = None) -> Array:
    """Cumulative product; both derivatives are linear recurrences solved by associative scans,
    exact with zeros and branch-free (torch's ``cumprod_backward`` divides by the input and
    special-cases the first zero with data-dependent branches). Mirrors ``torch.cumprod``.

    Args:
        a: the array. Integer and boolean input goes to ``jax.numpy.cumprod`` (no rule).
        axis: one axis (an int; 0 or -1 for a 0-d ``a``, as torch); None: over the flattened
            array.
        dtype: cast ``a`` to this dtype first; None keeps its dtype.
        out: not supported: must be None (``TypeError`` otherwise).

    Returns:
        The running products, of ``a``'s shape (1-d when ``axis`` is None).
    """
    return _scan_input("cumprod", a, axis, dtype, out, jnp.cumprod, cumprod_op)


def _correction(op, ddof, correction):
    if correction is None:
        correction = ddof
    elif ddof != 0:
        raise ValueError(f"{op}: give 'ddof' or 'correction', not both")
    if not isinstance(correction, numbers.Real):
        raise TypeError(f"{op}: correction must be a number, got {correction!r}")
    return correction


@exported_as("jaxrules.numpy.var")
def var(a: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, dtype: DTypeLike | None = None, out: None = None, ddof: float = 0, keepdims: bool = False, *, where: ArrayLike | None = None, mean: ArrayLike | None = None, correction: float | None = None) -> Array:
    """Variance with ``N - correction`` degrees of freedom; VJP ``2/(N-c) ct (x - mean)``
    (seed ``var_backward``). Mirrors ``torch.var``.

    Args:
        a: the array, real or complex (integer and boolean input is promoted to float).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes).
        dtype: cast ``a`` to this dtype first; None keeps its dtype.
        out: not supported: must be None (``TypeError`` otherwise).
        ddof: the correction (``N - ddof`` degrees of freedom), a Python or NumPy number.
        keepdims: keep the reduced axes with length 1.
        where: a boolean mask broadcasting against ``a``: the statistic of its true entries
            (``N`` counts them), composed of ``mean`` and ``sum`` (their rules).
        mean: a precomputed mean broadcasting against ``a`` (as ``jax.numpy``'s), used
            instead of ``a``'s own.
        correction: the array-API spelling of ``ddof`` (a number); give one of the two
            (``ValueError`` when both are, with ``ddof != 0``).

    Returns:
        The variance (real); NaN where ``N - correction <= 0``.

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.numpy as rnp
        >>> x = jnp.array([1.0, 2.0, 3.0, 4.0])
        >>> print(rnp.var(x), rnp.var(x, ddof=1).round(4))
        1.25 1.6667
        >>> print(jax.grad(rnp.var)(jnp.array([1.0, 3.0])))  # 2 (x - mean) / n
        [-1.  1.]
    """
    x, ax = _prepare("var", _statistic_input("var", a, dtype), axis, dtype, out)
    c = _correction("var", ddof, correction)
    if dtype is not None and _is_exact(x):  # an integer dtype: jax.numpy's var (no rule)
        return jnp.var(x, ax, dtype=dtype, keepdims=keepdims, where=where, mean=mean, correction=c)
    x = V.array("var", "a", x)
    if where is not None:
        _where_mask("var", where)
    if where is None and mean is None:
        return _in_dtype(var_op(x, axis=ax, keepdims=bool(keepdims), correction=c), dtype)
    return _in_dtype(_masked_var(x, ax, keepdims, c, where, mean), dtype)


def _statistic_input(op, a, dtype):
    """``a`` for var/std with a ``dtype``, checked as jax.numpy does: complex input needs a
    complex dtype, std an inexact one (``ValueError``)."""
    if dtype is None:
        return a
    x = V.array(op, "a", a, inexact=False)
    if op == "std" and not jnp.issubdtype(dtype, jnp.inexact):
        raise ValueError(f"std: dtype must be inexact, got {jnp.dtype(dtype)}")
    if jnp.iscomplexobj(x) and not jnp.issubdtype(dtype, jnp.complexfloating):
        raise ValueError(f"{op}: a real dtype ({jnp.dtype(dtype)}) for complex input")
    return x


def _in_dtype(result, dtype):
    """A statistic in the given ``dtype`` (jax.numpy's: complex for a complex dtype, though the
    statistic is real)."""
    return result if dtype is None else result.astype(dtype)


def _masked_var(x, ax, keepdims, correction, where, given_mean):
    """jax.numpy's ``var`` with ``where`` and/or a given ``mean``, composed of jaxrules' ``mean``
    and ``sum`` (their rules) and elementwise arithmetic: ``sum(|x - mean|^2, where) / (count -
    correction)``, NaN where that is not positive."""
    center = mean(x, axis=ax, keepdims=True, where=where) if given_mean is None else jnp.asarray(given_mean, x.dtype)
    d = x - center
    squares = jnp.real(d * jnp.conj(d)) if jnp.iscomplexobj(d) else d * d
    total = sum(squares, axis=ax, keepdims=keepdims, where=where)
    mask = jnp.ones(x.shape, bool) if where is None else jnp.broadcast_to(jnp.asarray(where), x.shape)
    dof = jnp.sum(mask, axis=ax, keepdims=bool(keepdims)) - correction
    return jnp.where(dof > 0, total / jnp.where(dof > 0, dof, 1).astype(total.dtype), jnp.nan)


@exported_as("jaxrules.numpy.std")
def std(a: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, dtype: DTypeLike | None = None, out: None = None, ddof: float = 0, keepdims: bool = False, *, where: ArrayLike | None = None, mean: ArrayLike | None = None, correction: float | None = None) -> Array:
    """Standard deviation; VJP ``var_backward(ct/(2 std))`` with 0 where std = 0, so a constant
    input has gradient 0 at first and second order (seed ``std_backward``; JAX gives NaN).
    Mirrors ``torch.std``.

    Args:
        a: the array, real or complex (integer and boolean input is promoted to float).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes).
        dtype: cast ``a`` to this dtype first; None keeps its dtype.
        out: not supported: must be None (``TypeError`` otherwise).
        ddof: the correction (``N - ddof`` degrees of freedom), a Python or NumPy number.
        keepdims: keep the reduced axes with length 1.
        where: a boolean mask broadcasting against ``a``: the statistic of its true entries
            (``N`` counts them), composed of ``mean`` and ``sum`` (their rules).
        mean: a precomputed mean broadcasting against ``a`` (as ``jax.numpy``'s), used
            instead of ``a``'s own.
        correction: the array-API spelling of ``ddof`` (a number); give one of the two
            (``ValueError`` when both are, with ``ddof != 0``).

    Returns:
        The standard deviation (real); NaN where ``N - correction <= 0``.

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.numpy as rnp
        >>> print(rnp.std(jnp.array([1.0, 3.0])))
        1.0
        >>> print(jax.grad(rnp.std)(jnp.ones(4)))  # a constant: torch's 0; jax.numpy's: nan
        [0. 0. 0. 0.]
    """
    x, ax = _prepare("std", _statistic_input("std", a, dtype), axis, dtype, out)
    x, c = V.array("std", "a", x), _correction("std", ddof, correction)
    if where is not None:
        _where_mask("std", where)
    if where is None and mean is None:
        return _in_dtype(std_op(x, axis=ax, keepdims=bool(keepdims), correction=c), dtype)
    v = _masked_var(x, ax, keepdims, c, where, mean)
    positive = v > 0  # 0 at a constant input with a zero derivative, as std_op (NaN stays NaN)
    return _in_dtype(jnp.where(positive, jnp.sqrt(jnp.where(positive, v, 1)), v), dtype)


@exported_as("jaxrules.numpy.var_mean")
def var_mean(x: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, *, correction: float | None = 1, keepdims: bool = False) -> tuple[Array, Array]:
    """``(var, mean)`` in one pass, torch.var_mean's defaults (``correction=1``); VJP seed
    ``var_mean_backward``. Mirrors ``torch.var_mean``.

    Args:
        x: the array, real or complex (integer and boolean input is promoted to float).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes).
        correction: ``N - correction`` degrees of freedom (a number; None means 1, as torch).
        keepdims: keep the reduced axes with length 1.

    Returns:
        ``(var, mean)``: a tuple of the variance (real) and the mean, both reduced over ``axis``.
    """
    x, ax = _prepare("var_mean", x, axis)
    return var_mean_op(V.array("var_mean", "x", x), axis=ax, keepdims=bool(keepdims), correction=_correction("var_mean", 0, 1 if correction is None else correction))


@exported_as("jaxrules.numpy.std_mean")
def std_mean(x: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, *, correction: float | None = 1, keepdims: bool = False) -> tuple[Array, Array]:
    """``(std, mean)`` in one pass, torch.std_mean's defaults; VJP seed ``std_mean_backward``.
    Mirrors ``torch.std_mean``.

    Args:
        x: the array, real or complex (integer and boolean input is promoted to float).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes).
        correction: ``N - correction`` degrees of freedom (a number; None means 1, as torch).
        keepdims: keep the reduced axes with length 1.

    Returns:
        ``(std, mean)``: a tuple of the standard deviation (real) and the mean, both reduced
        over ``axis``.
    """
    x, ax = _prepare("std_mean", x, axis)
    return std_mean_op(V.array("std_mean", "x", x), axis=ax, keepdims=bool(keepdims), correction=_correction("std_mean", 0, 1 if correction is None else correction))


def _selection(op_name, op, fallback, a, axis, out, keepdims, initial, where):
    """amax/amin with jax.numpy's ``initial`` (combined with the result by maximum/minimum) and
    ``where`` (which needs ``initial``: the masked-out entries become it)."""
    _scalar_initial(op_name, initial)
    x, ax = _prepare(op_name, a, axis, None, out)
    if _is_exact(x):
        return fallback(x, ax, keepdims=keepdims, initial=initial, where=where)
    if where is not None and initial is None:
        raise ValueError(f"{op_name}: where needs initial (a maximum/minimum has no identity to fill with)")
    if initial is None and any(x.shape[a] == 0 for a in ax):
        raise ValueError(f"{op_name}: zero-size reduction (no identity) over axis={axis!r} of shape {x.shape}")
    if initial is None:
        return op(x, axis=ax, keepdims=bool(keepdims))
    initial = jnp.asarray(initial, x.dtype)
    combine = jnp.maximum if op_name == "amax" else jnp.minimum
    if any(x.shape[a] == 0 for a in ax):
        shape = tuple(1 if a in ax else d for a, d in enumerate(x.shape)) if keepdims else \
            tuple(d for a, d in enumerate(x.shape) if a not in ax)
        return jnp.broadcast_to(initial, shape)
    return combine(op(_masked(op_name, x, where, initial), axis=ax, keepdims=bool(keepdims)), initial)


@exported_as("jaxrules.numpy.amax")
def amax(a: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, out: None = None, keepdims: bool = False, initial: ArrayLike | None = None, where: ArrayLike | None = None) -> Array:
    """Maximum; the derivative spreads evenly over ties and NaN counts as the maximum (seed
    ``evenly_distribute_backward``, ``scale_grad_by_count``, ``evenly_read_jvp``). Mirrors
    ``torch.amax`` (and ``torch.max()`` without ``dim``).

    Args:
        a: the array. Integer and boolean input goes to ``jax.numpy.max`` (no rule).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes). A
            zero-size reduction raises ``ValueError``.
        out: not supported: must be None (``TypeError`` otherwise).
        keepdims: keep the reduced axes with length 1.
        initial: the result is at least this (``maximum(max(a), initial)``); it makes a
            zero-size reduction valid. Needed with ``where``.
        where: a boolean mask broadcasting against ``a``: only its true entries compete
            (needs ``initial``, as ``jax.numpy.max``).

    Returns:
        The maximum (NaN where the reduced entries hold a NaN).
    """
    return _selection("amax", amax_op, jnp.max, a, axis, out, keepdims, initial, where)


@exported_as("jaxrules.numpy.amin")
def amin(a: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, out: None = None, keepdims: bool = False, initial: ArrayLike | None = None, where: ArrayLike | None = None) -> Array:
    """Minimum; ties share the derivative evenly, NaN counts as the minimum. Mirrors
    ``torch.amin`` (and ``torch.min()`` without ``dim``).

    Args:
        a: the array. Integer and boolean input goes to ``jax.numpy.min`` (no rule).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes). A
            zero-size reduction raises ``ValueError``.
        out: not supported: must be None (``TypeError`` otherwise).
        keepdims: keep the reduced axes with length 1.
        initial: the result is at most this (``minimum(min(a), initial)``); it makes a
            zero-size reduction valid. Needed with ``where``.
        where: a boolean mask broadcasting against ``a``: only its true entries compete
            (needs ``initial``, as ``jax.numpy.min``).

    Returns:
        The minimum (NaN where the reduced entries hold a NaN).
    """
    return _selection("amin", amin_op, jnp.min, a, axis, out, keepdims, initial, where)


class ValuesIndices(NamedTuple):
    """torch's ``(values, indices)`` return type."""

    values: jax.Array
    indices: jax.Array


def _value_selection(op, kind, a, axis, keepdims, k=0):
    """torch's ``max``/``min``/``median``/``kthvalue`` along one ``axis``: values and indices;
    the derivative goes to the returned index only (seed ``value_selecting_reduction_backward``)."""
    x = V.array(op, "a", _real(op, a))
    ax = V.single_axis(op, x.ndim or 1, axis)
    scalar = x.ndim == 0  # torch: a 0-d input's axis 0 has length 1, and the result stays 0-d
    x = x.reshape(1) if scalar else x
    if x.shape[ax] == 0:
        raise ValueError(f"{op}: axis {axis} has length 0")
    if kind == "median":
        k = (x.shape[ax] - 1) // 2
    values, indices = value_selection_op(x, kind=kind, k=k, axis=ax, keepdims=bool(keepdims) and not scalar,
                                         shape=x.shape)
    return ValuesIndices(values, indices)


@exported_as("jaxrules.numpy.max")
def max(a: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, out: None = None, keepdims: bool = False, initial: ArrayLike | None = None, where: ArrayLike | None = None, *, return_indices: bool = False) -> Array | ValuesIndices:  # noqa: A001
    """``jax.numpy.max`` (ties share the derivative evenly, as ``amax``); with
    ``return_indices=True``, torch's ``max(dim)``: ``(values, indices)`` along one ``axis``, the
    first maximum's index, the derivative to that index only. Mirrors ``torch.max``.

    Args:
        a: the array (as ``amax``; with ``return_indices``, real: complex raises ``TypeError``).
        axis: as ``amax``; with ``return_indices``, one axis (an int).
        out: not supported: must be None (``TypeError`` otherwise; ``ValueError`` with
            ``return_indices``).
        keepdims: keep the reduced axes with length 1.
        initial: as ``amax``'s; None with ``return_indices``.
        where: as ``amax``'s; None with ``return_indices``.
        return_indices: return torch's ``(values, indices)`` along ``axis``.

    Returns:
        The maximum (see ``amax``), or with ``return_indices`` a ``ValuesIndices`` named tuple
        ``(values, indices)`` (integer indices).
    """
    if return_indices:
        _no_extras("max", out=out, initial=initial, where=where)
        return _value_selection("max", "max", a, axis, keepdims)
    return amax(a, axis, out, keepdims, initial, where)


@exported_as("jaxrules.numpy.min")
def min(a: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, out: None = None, keepdims: bool = False, initial: ArrayLike | None = None, where: ArrayLike | None = None, *, return_indices: bool = False) -> Array | ValuesIndices:  # noqa: A001
    """``jax.numpy.min``; with ``return_indices=True``, torch's ``min(dim)`` (see ``max``).
    Mirrors ``torch.min``.

    Args:
        a: the array (as ``amin``; with ``return_indices``, real: complex raises ``TypeError``).
        axis: as ``amin``; with ``return_indices``, one axis (an int).
        out: not supported: must be None (``TypeError`` otherwise; ``ValueError`` with
            ``return_indices``).
        keepdims: keep the reduced axes with length 1.
        initial: as ``amin``'s; None with ``return_indices``.
        where: as ``amin``'s; None with ``return_indices``.
        return_indices: return torch's ``(values, indices)`` along ``axis``.

    Returns:
        The minimum (see ``amin``), or with ``return_indices`` a ``ValuesIndices`` named tuple
        ``(values, indices)`` (the first minimum's index).
    """
    if return_indices:
        _no_extras("min", out=out, initial=initial, where=where)
        return _value_selection("min", "min", a, axis, keepdims)
    return amin(a, axis, out, keepdims, initial, where)


@exported_as("jaxrules.numpy.kthvalue")
def kthvalue(a: ArrayLike, k: int, axis: int = -1, keepdims: bool = False) -> ValuesIndices:
    """torch's ``kthvalue``: the ``k``-th smallest (1-based) along ``axis`` and its index (equal
    values ordered by position); the derivative goes to that index only. Mirrors
    ``torch.kthvalue``.

    Args:
        a: the array, real (integer and boolean input is promoted to float).
        k: which order statistic, a Python int in ``[1, a.shape[axis]]`` (``ValueError``
            otherwise).
        axis: one axis (an int).
        keepdims: keep ``axis`` with length 1.

    Returns:
        A ``ValuesIndices`` named tuple ``(values, indices)`` (integer indices), reduced over
        ``axis``.
    """
    n = np.shape(a)[V.axes("kthvalue", np.ndim(a), axis)[0]] if np.ndim(a) else 1
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= n:
        raise ValueError(f"kthvalue: k must be an integer in [1, {n}], got {k!r}")
    return _value_selection("kthvalue", "kthvalue", a, axis, keepdims, int(k) - 1)


def _no_extras(op, **extras):
    for name, value in extras.items():
        if value is not None:
            raise ValueError(f"{op}: {name} is not supported with return_indices=True")


@exported_as("jaxrules.numpy.median")
def median(a: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, out: None = None, overwrite_input: bool = False, keepdims: bool = False, *, return_indices: bool = False) -> Array | ValuesIndices:
    """numpy's median (mean of the two middle values for an even count); each middle value's
    derivative spreads evenly over its ties (seed ``evenly_distribute_backward``). With
    ``return_indices=True``, torch's ``median(dim)``: the lower middle value and its index, the
    derivative to that index only. Mirrors ``torch.median`` (numpy's even-count convention
    without ``return_indices``).

    Args:
        a: the array, real (complex raises ``TypeError``; integer and boolean input is
            promoted to float); zero-size: NaN (torch and numpy), except with ``return_indices``.
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes); with
            ``return_indices``, one axis (an int).
        out: not supported: must be None (``TypeError`` otherwise; ``ValueError`` with
            ``return_indices``).
        overwrite_input: accepted for NumPy compatibility and ignored.
        keepdims: keep the reduced axes with length 1.
        return_indices: return torch's ``(values, indices)`` along ``axis``.

    Returns:
        The median, or with ``return_indices`` a ``ValuesIndices`` named tuple
        ``(values, indices)``.
    """
    if return_indices:
        _no_extras("median", out=out)
        return _value_selection("median", "median", a, axis, keepdims)
    x, ax = _prepare("median", _real("median", a), axis, None, out)
    x = V.array("median", "a", x)
    if x.size == 0:
        return nan_of_empty(x, ax, keepdims)
    if x.ndim == 0:  # as torch: a 0-d input's axis 0 has length 1, and the result stays 0-d
        return median_op(x.reshape(1), axis=(0,), keepdims=False)
    return median_op(x, axis=ax, keepdims=bool(keepdims))


def nan_of_empty(x, axes, keepdims) -> Array:
    """The median of a zero-size ``x`` over ``axes``: NaN (of no elements, as torch and numpy), in
    the reduction's shape (empty where another axis is); a constant, so its derivative is 0."""
    shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape) if keepdims or d not in axes)
    return jnp.full(shape, jnp.nan, jnp.result_type(x, 1.0))


@exported_as("jaxrules.nn.logsumexp", "jaxrules.scipy.special.logsumexp")
def logsumexp(a: ArrayLike, axis: int | tuple[int, ...] | list[int] | None = None, b: ArrayLike | None = None, keepdims: bool = False, return_sign: bool = False, where: ArrayLike | None = None) -> Array | tuple[Array, Array]:
    """``log(sum(exp(a)))``; derivative ``exp(a - out)`` (seed ``logsumexp_backward``, in JAX's
    complex convention), with the softmax's limit where the result is infinite: even weights
    over the -inf entries when all are -inf, over the +inf entries when one is (torch and JAX:
    NaN). Mirrors ``torch.logsumexp``; the same function is ``jaxrules.nn.logsumexp`` and
    ``jaxrules.scipy.special.logsumexp``.

    Args:
        a: the array, real or complex (integer and boolean input is promoted to float).
        axis: the axes to reduce: an int, a tuple or list of ints, or None (all axes).
        b: weights broadcasting against ``a``: ``log|sum(b exp(a))|`` (as
            ``jax.scipy.special.logsumexp``; real input: composed of ``sum``, exp and log;
            complex ``a`` or ``b``: ``jax.scipy.special.logsumexp`` itself).
        keepdims: keep the reduced axes with length 1.
        return_sign: also return the sum's sign (``log|sum|``, then ``sign(sum)``, of unit
            modulus for a complex sum, as JAX's).
        where: a boolean mask broadcasting against ``a``: its false entries count as -inf.

    Returns:
        ``log(sum(exp(a)))`` over ``axis``; with ``return_sign`` the tuple ``(log|sum|,
        sign)``.

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.nn as nn
        >>> print(nn.logsumexp(jnp.array([0.0, 0.0])).round(4))  # log 2
        0.6931
        >>> print(jax.grad(nn.logsumexp)(jnp.array([-jnp.inf, -jnp.inf])))  # the softmax's limit; torch: nan
        [0.5 0.5]
    """
    x, ax = _prepare("logsumexp", a, axis)
    x = _masked("logsumexp", V.array("logsumexp", "a", x), where, -jnp.inf)
    if b is None and not return_sign:
        return logsumexp_op(x, axis=ax, keepdims=bool(keepdims))
    return _weighted_logsumexp(x, b, ax, bool(keepdims), bool(return_sign))


def _weighted_logsumexp(x, b, ax, keepdims, return_sign):
    """``log|sum(b exp(x))|`` (and its sign), as ``jax.scipy.special.logsumexp``'s ``b`` and
    ``return_sign``: ``log|s| + m`` with ``s = sum(b exp(x - m))``, ``m`` the (constant) maximum
    of the entries of nonzero weight (an entry of weight 0 counts as -inf, as JAX's), composed
    of jaxrules' ``sum`` and JAX's exp/log. Without ``return_sign`` a negative sum gives NaN (as
    JAX). Complex ``x`` or ``b``: ``jax.scipy.special.logsumexp`` itself (its complex sign,
    values and derivatives; torch has neither ``b`` nor ``return_sign``)."""
    if jnp.iscomplexobj(x) or (b is not None and jnp.iscomplexobj(jnp.asarray(b))):
        return jax_special.logsumexp(x, axis=ax, b=b, keepdims=keepdims, return_sign=return_sign)
    b = jnp.ones((), x.dtype) if b is None else V.array("logsumexp", "b", b).astype(x.dtype)
    try:
        x, b = jnp.broadcast_arrays(x, b)
    except ValueError:
        raise ValueError(f"logsumexp: b of shape {b.shape} does not broadcast against a's shape {x.shape}") from None
    x = jnp.where(b != 0, x, -jnp.inf)  # a zero weight drops its entry, from the maximum too (as JAX)
    top = lax.stop_gradient(jnp.max(x, axis=ax, keepdims=True)) if x.size else jnp.zeros((), x.dtype)
    top = jnp.where(jnp.isfinite(top), top, 0)
    total = sum(b * jnp.exp(x - top), axis=ax, keepdims=True)
    out = (jnp.log(jnp.abs(total)) if return_sign else jnp.log(total)) + top
    sign = jnp.sign(total)
    if not keepdims:
        out, sign = jnp.squeeze(out, ax), jnp.squeeze(sign, ax)
    return (out, sign) if return_sign else out


@exported_as("jaxrules.numpy.logcumsumexp")
def logcumsumexp(x: ArrayLike, axis: int) -> Array:
    """torch.logcumsumexp: ``log(cumsum(exp(x)))`` along ``axis``. Both derivatives solve the
    recurrence ``dy_k = exp(y_{k-1} - y_k) dy_{k-1} + exp(x_k - y_k) t_k``: exact where the
    seed's ``logcumsumexp_jvp`` loses precision, finite after leading -inf (seed and JAX: NaN).
    Complex input: torch's branch of the log (each step keeps the imaginary part of its term of
    larger real part, adding one in (-pi, pi]: not the principal branch), holomorphic
    derivative in JAX's convention (torch's gradient conjugated). Mirrors ``torch.logcumsumexp``.

    Args:
        x: the array, real or complex (integer and boolean input is promoted to float).
        axis: one axis (an int; required; 0 or -1 for a 0-d ``x``, as torch).

    Returns:
        The running ``log(sum(exp(x)))`` along ``axis``, of ``x``'s shape.
    """
    x = V.array("logcumsumexp", "x", x)
    return _scan("logcumsumexp", x, axis, lambda x, ax: logcumsumexp_op(x, axis=ax))
