"""VJP formulas (reverse mode), one per op, mirroring FunctionsManual.cpp.

Signature: ``name_vjp(residuals, cotangent, **static) -> tuple`` with one cotangent (or
``None`` for zero) per array argument. Complex formulas are in JAX's convention, the conjugate
of torch's (``../shared/DESIGN.md`` §2): each is the transpose of the JVP formula in
``jvp_rules``, and both apply the same factor from ``partials``. Broadcast arguments get
cotangents of the broadcast shape; the mechanism sums them back to the argument's shape.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from jaxrules import partials as P
from jaxrules.partials import expand_reduced, reduced_size

# ----------------------------------------------------------------------------------------------
# Elementwise


def abs_vjp(sign, ct, **_):
    """``conj(sgn x) ct`` (seed ``abs_backward``; JAX convention). ``sign`` is the saved
    ``sgn(x)`` (int8 for real x: a quarter of the memory of x)."""
    return (jnp.conj(sign.astype(jnp.result_type(sign, ct))) * ct,)


def sign_vjp(x, ct, **_):
    """Real: 0. Complex: ``(ct - conj(sgn(x)^2 ct)) / (2|x|)``, 0 at x = 0 (transpose of seed
    ``sgn_backward``)."""
    if not jnp.iscomplexobj(x):
        return (None,)
    s, inv = P.sgn_parts(x)
    return ((ct - jnp.conj(s * s * ct)) * inv,)


def angle_vjp(x, ct, **_):
    """Real: 0. Complex: ``-i conj(x) ct / |x|^2``, 0 at x = 0 (seed ``angle_backward``,
    conjugated)."""
    if not jnp.iscomplexobj(x):
        return (None,)
    return (-1j * jnp.conj(x) * ct * P.abs2_reciprocal(x),)


def arctan2_vjp(res, ct, **_):
    """``(x ct, -y ct) / (x^2 + y^2)``, 0 at (0, 0) (seed ``atan2_backward``)."""
    dy_factor, dx_factor = P.arctan2_factors(*res)
    return dy_factor * ct, dx_factor * ct


def power_scalar_exponent_vjp(x, ct, *, exponent, **_):
    """``e x^(e-1) ct``, 0 when e = 0 (seed ``pow_backward``)."""
    return (P.pow_scalar_exponent_factor(x, exponent) * ct,)


def power_vjp(res, ct, **_):
    """``(y x^(y-1) ct, x^y log(x) ct)`` with the zero cases of seed ``pow_backward_self`` and
    ``pow_backward_exponent``."""
    x, y, out = res
    return P.pow_base_factor(x, y) * ct, P.pow_exponent_factor(x, y, out) * ct


def power_scalar_base_vjp(res, ct, *, base, **_):
    """``b^y log(b) ct``, 0 where b = 0 and y >= 0 (seed ``pow_backward_exponent``)."""
    y, out = res
    return (P.pow_exponent_factor(jnp.asarray(base, out.dtype), y, out) * ct,)


def copysign_vjp(res, ct, **_):
    """``((result / x) ct, 0)``, 0 at x = 0 (seed ``copysign_tensor_self_backward``)."""
    return P.copysign_factor(*res) * ct, None


def sinc_vjp(x, ct, **_):
    """``sinc'(x) ct`` (series near 0)."""
    return (P.sinc_derivative(x) * ct,)


def log1p_vjp(x, ct, **_):
    """``ct / (1 + x)`` (seed ``log1p_backward``; holomorphic, so no conjugate in JAX's
    convention)."""
    return (ct / (1 + x),)


def deg2rad_vjp(res, ct, **_):
    """``ct pi / 180`` (seed ``deg2rad_backward``)."""
    return (ct * (math.pi / 180),)


def rad2deg_vjp(res, ct, **_):
    """``ct 180 / pi`` (seed ``rad2deg_backward``)."""
    return (ct * (180 / math.pi),)


def clip_vjp(res, ct, **_):
    """The transpose of seed ``clamp_jvp``: the cotangent goes to whichever of x, lo, hi the
    output follows (seed ``clamp_backward`` / ``clamp_backward_min_max``, except at lo == hi
    with x < lo, where torch's backward drops the gradient and its JVP gives it to lo)."""
    pick_x, pick_lo, pick_hi = P.clip_masks(*res)
    return jnp.where(pick_x, ct, 0), jnp.where(pick_lo, ct, 0), jnp.where(pick_hi, ct, 0)


def logit_vjp(x, ct, *, eps, **_):
    """``ct / (x (1 - x))`` in the eps-window (seed ``infinitely_differentiable_logit_backward``)."""
    return (P.logit_factor(x, eps) * ct,)


def i1_vjp(res, ct, **_):
    """``(i0(x) - i1(x)/x) ct`` (torch ``i1_backward``)."""
    return (P.i1_factor(*res) * ct,)


def i1e_vjp(res, ct, **_):
    """``(i0e(x) - i1e(x)(sign x + 1/x)) ct`` (torch ``i1e_backward``)."""
    return (P.i1e_factor(*res) * ct,)


def multigammaln_vjp(a, ct, *, d, **_):
    """``sum_{i<d} digamma(a - i/2) ct`` (seed ``mvlgamma_backward``)."""
    return (P.multigammaln_factor(a, d) * ct,)


def xlogy_vjp(res, ct, **_):
    """``(xlogy(x != 0, y) ct, (x/y) ct)``, 0 where x = 0."""
    dx_factor, dy_factor = P.xlogy_factors(*res)
    return dx_factor * ct, dy_factor * ct


# ----------------------------------------------------------------------------------------------
# Reductions


def sum_vjp(res, ct, *, axis, keepdims, shape, **_):
    """Unsqueeze the reduced axes and expand (seed ``sum_backward``)."""
    return (expand_reduced(ct, shape, axis, keepdims),)


def mean_vjp(res, ct, *, axis, keepdims, shape, **_):
    """``expand(ct) / N`` (seed ``mean_backward``)."""
    return (expand_reduced(ct, shape, axis, keepdims) / reduced_size(shape, axis),)


def nansum_vjp(x, ct, *, axis, keepdims, **_):
    """``expand(ct) * (x is not NaN)`` (seed ``nansum_backward``)."""
    return (jnp.where(jnp.isnan(x), 0, expand_reduced(ct, x.shape, axis, keepdims)),)


def prod_vjp(x, ct, *, axis, keepdims, **_):
    """``expand(ct) prod_{j != i} x_j``: seed ``prod_safe_zeros_backward``, always (the seed
    branches on the number of zeros with ``.item()``; this is branch-free)."""
    return (expand_reduced(ct, x.shape, axis, keepdims) * P.prod_of_others(x, axis),)


def cumsum_vjp(res, ct, *, axis, **_):
    """``flip(cumsum(flip(ct)))`` (seed ``cumsum_backward``), as one reversed cumsum."""
    return (lax.cumsum(ct, axis=axis, reverse=True),)


def cumprod_vjp(x, ct, *, axis, **_):
    """``(prod_{i<k} x_i) s_k`` with ``s_k = ct_k + x_{k+1} s_{k+1}``: the transpose of
    ``jvp_rules.cumprod_jvp``'s recurrence; exact with zeros and branch-free."""
    s = P.linear_recurrence_transpose(x, ct, axis)
    return (P.exclusive_cumprod(x, axis) * s,)


def var_vjp(res, ct, *, axis, keepdims, correction, **_):
    """``2/(N - c) ct (x - mean)`` (seed ``var_backward``; conj(x - mean) in JAX's complex
    convention)."""
    centered, _ = res
    scale = P.var_scale(centered, axis, correction)
    return (scale * expand_reduced(ct, centered.shape, axis, keepdims) * jnp.conj(centered),)


def std_vjp(res, ct, *, axis, keepdims, correction, **_):
    """``var_vjp(ct / (2 std))``, 0 where std = 0 (seed ``std_backward``)."""
    centered, std = res
    return var_vjp(res, ct * P.half_reciprocal(std), axis=axis, keepdims=keepdims, correction=correction)


def var_mean_vjp(res, ct, *, axis, keepdims, correction, **_):
    """``var_vjp(ct_var) + mean_vjp(ct_mean)`` (seed ``var_mean_backward``)."""
    ct_var, ct_mean = ct
    (g_var,) = var_vjp(res, ct_var, axis=axis, keepdims=keepdims, correction=correction)
    (g_mean,) = mean_vjp(None, ct_mean, axis=axis, keepdims=keepdims, shape=res[0].shape)
    return (g_var + g_mean,)


def std_mean_vjp(res, ct, *, axis, keepdims, correction, **_):
    """``std_vjp(ct_std) + mean_vjp(ct_mean)`` (seed ``std_mean_backward``)."""
    ct_std, ct_mean = ct
    (g_std,) = std_vjp(res, ct_std, axis=axis, keepdims=keepdims, correction=correction)
    (g_mean,) = mean_vjp(None, ct_mean, axis=axis, keepdims=keepdims, shape=res[0].shape)
    return (g_std + g_mean,)


def selection_vjp(res, ct, *, axis, keepdims, **_):
    """``expand(ct) mask / count``: ties share evenly, NaN counts as selected (seed
    ``evenly_distribute_backward`` / ``scale_grad_by_count``). amax and amin."""
    x, out = res
    return (expand_reduced(ct, x.shape, axis, keepdims) * P.even_weights(x, out, axis, keepdims),)


def median_vjp(x, ct, *, axis, keepdims, **_):
    """``expand(ct) w``, ``w`` the even split over the middle value(s) (seed
    ``evenly_distribute_backward``)."""
    return (expand_reduced(ct, x.shape, axis, keepdims) * P.median_weights(x, axis, keepdims),)


def logsumexp_vjp(weights, ct, *, axis, keepdims, **_):
    """``expand(ct) exp(x - out)`` with the saved weights (seed ``logsumexp_backward``;
    holomorphic, so no conjugate in JAX's convention — torch 2.13 conjugates, the seed forgot
    to)."""
    return (expand_reduced(ct, weights.shape, axis, keepdims) * weights,)


def logcumsumexp_vjp(res, ct, *, axis, **_):
    """``b_k s_k`` with ``s_k = ct_k + a_{k+1} s_{k+1}``: the transpose of
    ``jvp_rules.logcumsumexp_jvp`` (replaces the seed's log-space ``logcumsumexp_backward``,
    which is NaN at a leading -inf)."""
    a, b = P.logcumsumexp_coefficients(*res, axis)
    return (b * P.linear_recurrence_transpose(a, ct, axis),)


def vector_norm_vjp(res, ct, *, ord, axis, keepdims, **_):
    """``conj(w) expand(ct)`` with ``w`` the norm's direction (seed ``norm_backward``)."""
    x, norm = res
    w = P.vector_norm_direction(x, norm, ord, axis, keepdims)
    return (jnp.conj(w) * expand_reduced(ct, x.shape, axis, keepdims),)


def renorm_vjp(res, ct, *, p, axis, maxnorm, **_):
    """Seed ``renorm_backward``: ``where(norm > maxnorm, s ct + conj(w) ds Re sum(x ct), ct)``."""
    x, norm = res
    w = P.vector_norm_direction(x, norm, p, axis, True)
    scale, dscale, over = P.renorm_scale(norm, maxnorm)
    inner = jnp.sum(x * ct, axis=axis, keepdims=True)
    inner = inner.real if jnp.iscomplexobj(inner) else inner
    return (jnp.where(over, scale * ct + jnp.conj(w) * (dscale * inner), ct),)


# ----------------------------------------------------------------------------------------------
# Normalization


def normalize_vjp(res, ct, *, axes, eps, axis_name):
    """The native backward without weight: ``rstd (g - mean(g) - x_hat mean(g x_hat))`` (seed
    ``native_layer_norm_backward`` / ``batch_norm_backward`` / ``native_group_norm_backward``'s
    grad_input). Computed by the ``normalize_backward`` op, so that its own VJP — the seed's
    double backward — runs under a second reverse pass."""
    from jaxrules.ops.normalization import normalize_backward

    x, _, _ = res
    return (normalize_backward(x, ct, axes=axes, eps=eps, axis_name=axis_name),)


def normalize_backward_vjp(res, ct, *, axes, eps, axis_name):
    """The seed's double backward (``layer_norm_double_backward`` / ``batchnorm_double_backward``
    with weight 1; the weight's terms come from the product rule outside the kernel), given
    ``h = ggI``: ``g_x = -rstd (x_hat E[h gx] + E[g x_hat] B(h) + E[h x_hat] gx)`` and
    ``g_gO = B(h)``."""
    x, g = res
    mean, rstd = P.norm_stats(x, axes, eps, axis_name)
    h = ct.astype(rstd.dtype)
    gx = P.norm_projection(x, mean, rstd, g, axes, axis_name)
    bh = P.norm_projection(x, mean, rstd, h, axes, axis_name)
    xhat = (x.astype(rstd.dtype) - mean) * rstd
    mean_ = lambda v: P.group_mean(v, axes, axis_name)  # noqa: E731
    g_x = -rstd * (xhat * mean_(h * gx) + mean_(g.astype(rstd.dtype) * xhat) * bh + mean_(h * xhat) * gx)
    return g_x, bh


# ----------------------------------------------------------------------------------------------
# Pointwise ops whose derivative is one factor per input (activations, losses).


def pointwise_vjp(res, ct, *, derivative, **params):
    """``(d f / d x_i) ct`` for each input (broadcast inputs are summed back by the mechanism)."""
    inputs = res if isinstance(res, tuple) else (res,)
    factors = derivative(*inputs, **params)
    factors = factors if isinstance(factors, tuple) else (factors,)
    return tuple(f * ct for f in factors)


def softmax_vjp(y, ct, *, axis, **_):
    """``y (ct - sum(ct y))`` (torch ``_softmax_backward_data``; its double backward, seed
    ``softmax_double_backward``, is the derivative of this through the saved output)."""
    return (y * (ct - jnp.sum(ct * y, axis=axis, keepdims=True)),)


def log_softmax_vjp(out, ct, *, axis, **_):
    """``ct - softmax sum(ct)`` (torch ``_log_softmax_backward_data``)."""
    return (ct - jnp.exp(out) * jnp.sum(ct, axis=axis, keepdims=True),)


def glu_vjp(x, ct, *, axis, **_):
    """torch ``glu_backward``: ``(sigmoid(b) ct, a sigmoid(b)(1 - sigmoid(b)) ct)`` concatenated."""
    import jax

    a, b = jnp.split(x, 2, axis=axis)
    s = jax.nn.sigmoid(b)
    return (jnp.concatenate([s * ct, a * s * (1 - s) * ct], axis=axis),)


def dropout_vjp(mask, ct, *, scale, **_):
    """``ct mask scale``; the mask gets nothing (seed ``infinitely_differentiable_native_dropout_backward``)."""
    return ct * mask * scale, None
