"""VJP formulas (reverse mode), one per op, mirroring FunctionsManual.cpp.

Signature: ``name_vjp(residuals, cotangent, **static) -> tuple`` with one cotangent (or
``None`` for zero) per array argument. Complex formulas are in JAX's convention, the conjugate
of torch's (``docs/design.md`` §2): each is the transpose of the JVP formula in
``jvp_rules``, and both apply the same factor from ``partials``. Broadcast arguments get
cotangents of the broadcast shape; the mechanism sums them back to the argument's shape.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxrules import jvp_rules as J
from jaxrules import partials as P
from jaxrules.mechanism import define_op, differentiated_as, explicit_sharding
from jaxrules.partials import expand_reduced, reduced_size

# ----------------------------------------------------------------------------------------------
# Elementwise


def abs_vjp(sign, ct, **_):
    """``conj(sgn x) ct`` (seed ``abs_backward``; JAX convention). ``sign`` is the saved
    ``sgn(x)`` (int8 for real x: a quarter of the memory of x)."""
    dtype = P.promoted_dtype(sign, ct)
    return (jnp.conj(sign.astype(dtype)) * ct.astype(dtype),)


def sign_vjp(x, ct, **_):
    """Real: 0. Complex: ``(ct - conj(sgn(x)^2 ct)) / (2|x|)``, 0 at x = 0 (transpose of seed
    ``sgn_backward``)."""
    if not jnp.iscomplexobj(x):
        return (None,)
    s, inv = P.sgn_parts(x)
    return ((ct - jnp.conj(s * s * ct)) * inv.astype(s.dtype),)


def angle_vjp(x, ct, **_):
    """Real: 0. Complex: ``-i conj(x) ct / |x|^2``, 0 at x = 0 (seed ``angle_backward``,
    conjugated)."""
    if not jnp.iscomplexobj(x):
        return (None,)
    return (-1j * jnp.conj(x) * ct.astype(x.dtype) * P.abs2_reciprocal(x).astype(x.dtype),)


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
    """``(log(y) ct, (x/y) ct)`` (seed ``xlogy.Tensor``): ``log y`` 0 where x = 0 and y <= 0
    (torch's mask), ``x / y`` 0 where x = 0 and y is not NaN."""
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
    return (jnp.multiply(*P.promoted(scale * expand_reduced(ct, centered.shape, axis, keepdims), jnp.conj(centered))),)


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
    ct, weights = P.promoted(expand_reduced(ct, x.shape, axis, keepdims), P.even_weights(x, out, axis, keepdims))
    return (ct * weights,)


def median_vjp(x, ct, *, axis, keepdims, **_):
    """``expand(ct) w``, ``w`` the even split over the middle value(s) (seed
    ``evenly_distribute_backward``)."""
    ct, weights = P.promoted(expand_reduced(ct, x.shape, axis, keepdims), P.median_weights(x, axis, keepdims))
    return (ct * weights,)


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
    return (jnp.multiply(*P.promoted(jnp.conj(w), expand_reduced(ct, x.shape, axis, keepdims))),)


def renorm_vjp(res, ct, *, p, axis, maxnorm, **_):
    """Seed ``renorm_backward``: ``where(norm > maxnorm, s ct + conj(w) ds Re sum(x ct), ct)``."""
    x, norm = res
    w = P.vector_norm_direction(x, norm, p, axis, True)
    scale, dscale, over = P.renorm_scale(norm, maxnorm)
    inner = jnp.sum(x * ct, axis=axis, keepdims=True)
    inner = inner.real if jnp.iscomplexobj(inner) else inner
    step = jnp.multiply(*P.promoted(scale, ct)) + jnp.multiply(*P.promoted(jnp.conj(w), dscale * inner))
    return (jnp.where(over, step, ct),)


# ----------------------------------------------------------------------------------------------
# Normalization


def affine_normalize_vjp(res, ct, *, axes, eps, axis_name):
    """The native backward with weight (seed ``native_layer_norm_backward`` /
    ``batch_norm_backward`` / ``native_group_norm_backward``): ``dx = B(g w)`` with ``B(v) = rstd
    (v - E[v] - x_hat E[v x_hat])`` (``w B(g)`` where w is one number per group, batch and instance
    norm, as torch: an infinite weight then gives +-inf, not inf - inf) computed by the
    ``normalize_backward`` op (so its own VJP, the
    seed's double backward, runs under a second reverse pass), plus the statistics outputs'
    terms ``(g_mean - g_rstd rstd^2 x_hat) / count`` when they are used (the op passes ``None``
    for a symbolic zero cotangent); ``dw = sum g x_hat``, ``db = sum g`` over the axes where the
    weight broadcasts. Where those are the normalized axes (batch norm) they are ``count rstd
    E[g (x - mean)]`` and ``count E[g]``, the means ``B(g)`` takes (``P.projection_means``, the same
    expressions), with rstd outside the sum: on a batch sharded over devices no all-reduce then
    waits for the variance's (``sum g x_hat`` did: one more collective in the chain)."""
    x, w, mean, rstd = res
    g, g_mean, g_rstd = ct
    stat = rstd.dtype
    xhat = (x.astype(stat) - mean) * rstd
    g = jnp.zeros(x.shape, stat) if g is None else g.astype(stat)
    ws = P.with_rank(w.astype(stat), x.ndim)
    if all(w.shape[a] == 1 for a in axes):  # one weight per group (batch, instance norm): B(g w) = w B(g)
        dx = ws * normalize_backward(x, mean, rstd, g, axes=axes, eps=eps, axis_name=axis_name)
    else:
        dx = normalize_backward(x, mean, rstd, g * ws, axes=axes, eps=eps, axis_name=axis_name)
    count = math.prod(x.shape[a] for a in axes)  # this device's
    if g_mean is not None or g_rstd is not None:  # None: unused statistics (the usual case)
        total = count * (1 if axis_name is None else lax.psum(1, axis_name))
        g_mean = 0 if g_mean is None else g_mean
        g_rstd = 0 if g_rstd is None else g_rstd
        dx = dx + (g_mean - g_rstd * rstd * rstd * xhat) / total
    spread = tuple(a for a in range(x.ndim) if w.shape[a] == 1)
    if set(spread) == {a % x.ndim for a in axes} and axis_name is None and count:  # batch norm: B(g)'s means
        mean_g, centered = P.projection_means(x, mean, g, axes, None)
        return dx, count * rstd * centered, count * mean_g
    return dx, (g * xhat).sum(spread, keepdims=True), g.sum(spread, keepdims=True)


def normalize_backward_vjp(res, ct, *, axes, eps, axis_name):
    """The seed's double backward (``layer_norm_double_backward`` / ``batchnorm_double_backward``
    with weight 1; the weight's terms come from the product rule outside the kernel), given
    ``h = ggI``: ``g_x = -rstd (x_hat E[h gx] + E[g x_hat] B(h) + E[h x_hat] gx)`` and
    ``g_gO = B(h)``. The statistics are recomputed from x; their arguments get no cotangent
    (see ``normalize_backward``)."""
    x, _, _, g = res
    mean, rstd = P.norm_stats(x, axes, eps, axis_name)
    h = ct.astype(rstd.dtype)
    gx = P.norm_projection(x, mean, rstd, g, axes, axis_name)
    bh = P.norm_projection(x, mean, rstd, h, axes, axis_name)
    xhat = (x.astype(rstd.dtype) - mean) * rstd
    mean_ = lambda v: P.group_mean(v, axes, axis_name)  # noqa: E731
    g_x = -rstd * (xhat * mean_(h * gx) + mean_(g.astype(rstd.dtype) * xhat) * bh + mean_(h * xhat) * gx)
    return g_x, None, None, bh


def affine_normalize_eps_vjp(res, ct, *, axes, axis_name):
    """``affine_normalize_vjp`` with ``eps`` an array argument (its ``normalize_backward`` then
    takes eps as an argument too), plus eps's cotangent: ``sum((g w (x - mean) + g_rstd)
    (-rstd^3 / 2))`` (``rstd = rsqrt(var + eps)``; the mean does not depend on eps)."""
    x, w, mean, rstd, eps = res
    dx, dw, db = affine_normalize_vjp((x, w, mean, rstd), ct, axes=axes, eps=eps, axis_name=axis_name)
    g, _, g_rstd = ct
    stat = rstd.dtype
    per_group = 0 if g_rstd is None else g_rstd.astype(stat)
    if g is not None:
        ws = P.with_rank(w.astype(stat), x.ndim)
        per_group = per_group + jnp.sum(g.astype(stat) * ws * (x.astype(stat) - mean), axis=axes,
                                        keepdims=True)
    return dx, dw, db, jnp.sum(-0.5 * rstd * rstd * rstd * per_group)


def normalize_backward_eps_vjp(res, ct, *, axes, axis_name):
    """``normalize_backward_vjp`` with ``eps`` an array argument, plus eps's cotangent ``sum(h
    dB/deps)``, ``dB/deps = ((g - E[g]) - 3 rstd^2 (x - mean) E[g (x - mean)]) (-rstd^3 / 2)``."""
    x, _, _, g, eps = res
    g_x, _, _, bh = normalize_backward_vjp(res[:4], ct, axes=axes, eps=eps, axis_name=axis_name)
    partial = P.norm_projection_eps_partial(x, g, eps, axes, axis_name)
    return g_x, None, None, bh, jnp.sum(ct.astype(partial.dtype) * partial)


def rms_norm_vjp(res, ct, *, axes, eps):
    """Seed ``_fused_rms_norm_backward`` (with the rstd output's cotangent as in
    ``infinitely_differentiable_native_rms_norm_backward``): ``dx = B(g w)`` with ``B(v) = rstd
    (v - x_hat E[v x_hat])`` computed by the ``rms_norm_backward`` op (so its own VJP runs under
    a second reverse pass), plus the rstd output's term ``-g_rstd rstd^2 x_hat / count`` when it
    is used (``None``: unused); ``dw = g x_hat`` (summed to the weight's shape by the mechanism)."""
    x, w, rstd = res
    g, g_rstd = ct
    stat = rstd.dtype
    xhat = x.astype(stat) * rstd
    g = jnp.zeros(x.shape, stat) if g is None else g.astype(stat)
    dx = rms_norm_backward(x, rstd, g * P.with_rank(w.astype(stat), g.ndim), axes=axes, eps=eps)
    if g_rstd is not None:
        count = math.prod(x.shape[a] for a in axes)
        dx = dx - g_rstd * rstd * rstd * xhat / count
    return dx, g * xhat


def rms_norm_backward_vjp(res, ct, *, axes, eps):
    """Given ``h``: ``g_x = -rstd (x_hat E[h gx] + E[v x_hat] B(h) + E[h x_hat] gx)`` with ``gx =
    B(v)``, and ``g_v = B(h)`` (B is symmetric): ``normalize_backward_vjp`` without the mean
    terms. ``rstd`` is recomputed from x; its argument gets no cotangent."""
    x, _, v = res
    rstd = P.rms_rstd(x, axes, eps)
    stat = rstd.dtype
    h, v = ct.astype(stat), v.astype(stat)
    gx = P.rms_projection(x, rstd, v, axes)
    bh = P.rms_projection(x, rstd, h, axes)
    xhat = x.astype(stat) * rstd
    mean_ = lambda u: jnp.mean(u, axis=axes, keepdims=True)  # noqa: E731
    g_x = -rstd * (xhat * mean_(h * gx) + mean_(v * xhat) * bh + mean_(h * xhat) * gx)
    return g_x, None, bh


def rms_norm_eps_vjp(res, ct, *, axes):
    """``rms_norm_vjp`` with ``eps`` an array argument (its ``rms_norm_backward`` then takes eps
    as an argument too), plus eps's cotangent ``sum((g w x + g_rstd) (-rstd^3 / 2))``."""
    x, w, rstd, eps = res
    dx, dw = rms_norm_vjp((x, w, rstd), ct, axes=axes, eps=eps)
    g, g_rstd = ct
    stat = rstd.dtype
    per_row = 0 if g_rstd is None else g_rstd.astype(stat)
    if g is not None:
        ws = P.with_rank(w.astype(stat), x.ndim)
        per_row = per_row + jnp.sum(g.astype(stat) * ws * x.astype(stat), axis=axes, keepdims=True)
    return dx, dw, jnp.sum(-0.5 * rstd * rstd * rstd * per_row)


def rms_norm_backward_eps_vjp(res, ct, *, axes):
    """``rms_norm_backward_vjp`` with ``eps`` an array argument, plus eps's cotangent ``sum(h
    dB/deps)``, ``dB/deps = (v - 3 rstd^2 x E[v x]) (-rstd^3 / 2)``."""
    x, _, v, eps = res
    g_x, _, bh = rms_norm_backward_vjp(res[:3], ct, axes=axes, eps=eps)
    partial = P.rms_projection_eps_partial(x, v, eps, axes)
    return g_x, None, bh, jnp.sum(ct.astype(partial.dtype) * partial)


# ----------------------------------------------------------------------------------------------
# Pointwise ops whose derivative is one factor per input (activations, losses).


def pointwise_vjp(res, ct, *, derivative, **params):
    """``(d f / d x_i) ct`` for each input (broadcast inputs are summed back by the mechanism)."""
    inputs = res if isinstance(res, tuple) else (res,)
    factors = derivative(*inputs, **params)
    factors = factors if isinstance(factors, tuple) else (factors,)
    return tuple(f * ct for f in factors)


def softmax_vjp(x, ct, *, axis, **_):
    """``y (ct - sum(ct y))`` (torch ``_softmax_backward_data``; its double backward, seed
    ``softmax_double_backward``, is the derivative of this formula), from the saved input as
    ``(ct / s - sum(ct e) / s^2) e`` with ``e = exp(x - max x)``, ``s = sum e``: the same product
    without the elementwise division that forms y (that division made the op 0.90x of JAX's
    autodiff on an H100; this form, JAX's own, runs at its speed)."""
    e, s = P.softmax_parts(x, axis)
    return ((ct / s - jnp.sum(ct * e, axis=axis, keepdims=True) / (s * s)) * e,)


def log_softmax_vjp(res, ct, *, axis, **_):
    """``ct - softmax sum(ct)`` (torch ``_log_softmax_backward_data``, which takes the softmax as
    ``exp(output)``). Here ``softmax = e / s`` from the forward's own exponentials
    ``e = exp(x - max x)`` and row sums ``s`` (saved): no exponential and no elementwise
    division in the backward (CPU: 0.65-0.78x of JAX's autodiff with ``exp(output)``)."""
    e, s = res
    return (ct - e * (jnp.sum(ct, axis=axis, keepdims=True) / s),)


def masked_softmax_vjp(res, ct, *, axis, **_):
    """The masked softmax (``where=``): ``_softmax_backward_data`` over the included entries,
    ``(ct / s - sum(ct e) / s^2) e`` with ``e`` 0 off the mask (no cotangent there); the mask
    gets none."""
    x, mask = res
    e, s = P.masked_softmax_parts(x, mask, axis)
    return (ct / s - jnp.sum(ct * e, axis=axis, keepdims=True) / (s * s)) * e, None


def masked_log_softmax_vjp(res, ct, *, axis, **_):
    """The masked log-softmax (``where=``): ``_log_softmax_backward_data`` over the included
    entries, ``ct - softmax sum(ct)`` with the cotangents of the masked (constant -inf) outputs
    dropped: 0 off the mask."""
    e, s, mask = res
    cm = jnp.where(mask, ct, 0)
    return jnp.where(mask, cm - e * (jnp.sum(cm, axis=axis, keepdims=True) / s), 0), None


def glu_vjp(x, ct, *, axis, **_):
    """torch ``glu_backward``: ``(sigmoid(b) ct, a sigmoid(b)(1 - sigmoid(b)) ct)`` concatenated."""
    a, b = jnp.split(x, 2, axis=axis)
    s = jax.nn.sigmoid(b)
    return (jnp.concatenate([s * ct, a * s * (1 - s) * ct], axis=axis),)


def dropout_vjp(res, ct, **_):
    """``ct mask scale``; the mask gets nothing (seed ``infinitely_differentiable_native_dropout_backward``),
    nor does ``scale = 1/(1 - p)`` (``dropout`` stops it)."""
    mask, scale = res
    ct, mask, scale = P.promoted(ct, mask, scale)
    return ct * mask * scale, None, None


# ----------------------------------------------------------------------------------------------
# Linear algebra. Holomorphic maps are transposed directly (JAX's convention); the formulas with
# real parts, conjugates or Hermitian projections are written as torch writes them (the Hermitian
# adjoint) and wrapped by ``_torch_convention`` (conjugate in, conjugate out).

_mT, _mH, _herm, _diag, _embed = P.mT, P.mH, P.herm, P.diagonal, P.diag_embed


def _torch_convention(backward):
    """JAX's VJP from a torch backward formula: ``conj(backward(conj(ct)))``."""

    @functools.wraps(backward)
    def vjp(res, ct, **static):
        cts = backward(res, jax.tree.map(jnp.conj, ct), **static)
        return tuple(None if c is None else jnp.conj(c) for c in cts)

    return vjp


def matmul_vjp(res, ct, **_):
    """``(ct B^T, A^T ct)`` (seed ``mm_mat1_backward`` / ``mm_mat2_backward``, JAX convention),
    each summed over the leading batch dims its operand lacks inside its product
    (``partials.matmul_cotangents``); batch dims of size 1 are summed by the mechanism."""
    a, b = res
    # b's gradient sums over a's rows, which may be sharded: it is sharded as b (Explicit mesh)
    out = explicit_sharding(b, a, ct) if a.ndim >= b.ndim else None
    return P.matmul_cotangents(a, b, ct, out_sharding=out)


def linear_vjp(res, ct, **_):
    """``gx = ct W``, ``gW = ct^T x`` (summed over leading dims), ``gb = ct`` (summed by the
    mechanism). Its derivative (bilinear in ct and the inputs) is seed
    ``linear_double_backward``."""
    x, w = res
    # Contracting a batch-sharded axis: the sum is sharded like w (an Explicit mesh wants it said).
    gw = jnp.einsum("...o,...i->oi", ct, x, out_sharding=explicit_sharding(w, x, ct))
    return jnp.einsum("...o,oi->...i", ct, w), gw, ct


def inv_vjp(x, ct, **_):
    """``-X^T ct X^T`` (X = A^{-1})."""
    return (-(_mT(x) @ ct @ _mT(x)),)


@_torch_convention
def adjugate_vjp(res, g, **_):
    """Adjoint of ``jvp_rules.adjugate_jvp``: ``U M(conj(c) V^H G U) V^H`` (``M`` is
    self-adjoint)."""
    u, s, vh, c = res
    e = jnp.conj(c)[..., None, None] * (vh @ g @ u)
    q = P.pair_products(s).astype(e.dtype)
    m = _embed(jnp.einsum("...ik,...k->...i", q, _diag(e))) - q * e
    return (u @ m @ vh,)


def det_vjp(adj, ct, **_):
    """``ct adj(A)^T`` (seed ``linalg_det_backward``): the adjugate, exact at singular A where
    torch's default (no create_graph) path returns 0."""
    return (ct[..., None, None] * _mT(adj),)


def slogdet_vjp(res, ct, **_):
    """``(g_logabs + i Im(g_sign sign)) A^{-T}`` (seed ``slogdet_backward``, JAX convention);
    real A: ``g_logabs A^{-T}``."""
    ainv, sign = res
    g_sign, g_logabs = ct
    scale = g_logabs.astype(ainv.dtype)
    if jnp.iscomplexobj(ainv):
        scale = scale + 1j * (g_sign * sign).imag.astype(scale.dtype)
    return (scale[..., None, None] * _mT(ainv),)


def solve_vjp(res, ct, *, left, **_):
    """Left: ``gB = A^{-T} ct``, ``gA = -gB X^T``; right: ``gB = ct A^{-T}``, ``gA = -X^T gB``
    (seed ``linalg_solve_backward``, JAX convention; the LU factors are reused)."""
    lu, piv, x = res
    if left:
        gb = P.lu_solve(lu, piv, ct, trans=1)
        return -(gb @ _mT(x)), gb
    gb = _mT(P.lu_solve(lu, piv, _mT(ct), trans=0))
    return -(_mT(x) @ gb), gb


def solve_triangular_vjp(res, ct, *, lower, unit, transpose, conjugate, left):
    """``gB = M^{-T} ct`` (left) or ``ct M^{-T}``, ``gM = -gB X^T`` or ``-X^T gB``, and
    ``gA = P(op(gM))`` (seed ``linalg_solve_triangular_backward``; the transpose of a
    conjugation is a conjugation in JAX's convention)."""
    a, x = res
    gb = P.tri_solve(a, ct, lower=lower, left=left, transpose=not transpose, conjugate=conjugate, unit=unit)
    gm = -(gb @ _mT(x) if left else _mT(x) @ gb)
    gm = _mT(gm) if transpose else gm
    gm = jnp.conj(gm) if conjugate else gm
    return P.band(gm, lower, unit), gb


@_torch_convention
def cholesky_vjp(factor, g, **_):
    """``gA = herm(L^{-H} Phi(L^H gL) L^{-1})``, ``Phi(X) = tril(X) - diag(X)/2`` (seed
    ``cholesky_backward``)."""
    y = _mH(factor) @ g
    y = P.half_diagonal(jnp.tril(y))
    y = P.tri_solve(factor, y, lower=True, transpose=True, conjugate=True)
    y = P.tri_solve(factor, y, lower=True, left=False)
    return (_herm(y),)


@_torch_convention
def cho_solve_vjp(res, g, *, lower):
    """``gB = A^{-1} g``, ``C = gB X^H``, factor gradient ``-(C + C^H) L`` (lower) or
    ``-U (C + C^H)`` (upper), not projected on the triangle (seed
    ``cholesky_solve_backward``: torch's convention)."""
    c, x = res
    gb = P.cho_solve(c, lower, g)
    cc = gb @ _mH(x)
    cc = cc + _mH(cc)
    return -(cc @ c if lower else c @ cc), gb


@_torch_convention
def cholesky_inverse_vjp(res, g, *, lower):
    """``-X (G + G^H) X L`` (lower) or ``-U X (G + G^H) X`` (upper) (seed
    ``cholesky_inverse_backward``; the factor is treated as dense, as torch does)."""
    c, x = res
    m = x @ (g + _mH(g)) @ x
    return (-(m @ c) if lower else -(c @ m),)


@_torch_convention
def eigh_vjp(res, g, **_):
    """Seed ``linalg_eig_backward`` (hermitian): ``gA = herm(V (diag gw + F o V^H gV) V^H)``,
    ``F_ij = 1/(w_j - w_i)`` (0 for degenerate pairs), with torch's gauge check (complex)."""
    w, v = res
    gw, gv = g
    vhgv = _mH(v) @ gv
    if jnp.iscomplexobj(vhgv):
        P.check_gauge(_diag(vhgv).imag, "eigh")
    inner = _embed(gw.astype(vhgv.dtype)) + P.gap_reciprocal(w).astype(vhgv.dtype) * vhgv
    return (_herm(v @ inner @ _mH(v)),)


@_torch_convention
def eigvalsh_vjp(v, g, **_):
    """``V diag(gw) V^H`` (seed ``linalg_eig_backward``, values only)."""
    return ((v * g.astype(v.dtype)[..., None, :]) @ _mH(v),)


@_torch_convention
def svd_vjp(res, g, *, full_matrices):
    """Seed ``svd_backward``: ``gA = U[(skew(U^H gU) S + S skew(V^H gV)) o F + diag gS
    + i Im diag(U^H gU)/S] V^H`` plus the ``(I - UU^H) gU S^{-1} V^H`` (m > n) or
    ``U S^{-1} gV^H (I - VV^H)`` (m < n) terms; ``F_ij = 1/(S_j^2 - S_i^2)`` (0 for degenerate
    pairs), ``1/S`` taken as 0 at ``S = 0``; torch's gauge check (complex). ``full_matrices``:
    the extra columns' cotangent enters through ``complement_tangent``'s adjoint."""
    u, s, vh = res
    gu, gs, gvh = g
    m, n = u.shape[-2], vh.shape[-1]
    k = s.shape[-1]
    uk, vhk = u[..., :k], vh[..., :k, :]
    gu = complement_adjoint(u, gu, k) if full_matrices and m > k else gu[..., :k]
    gvh = _mH(complement_adjoint(_mH(vh), _mH(gvh), k)) if full_matrices and n > k else gvh[..., :k, :]
    skew = lambda x: x - _mH(x)  # noqa: E731
    uhgu, vhgv = skew(_mH(uk) @ gu), skew(vhk @ _mH(gvh))
    if jnp.iscomplexobj(uhgu):
        P.check_gauge(_diag(uhgu).imag + _diag(vhgv).imag, "svd")
    f = P.gap_reciprocal(s, squared=True).astype(uhgu.dtype)
    sinv = P.safe_reciprocal(s, s == 0).astype(uhgu.dtype)
    sc = s.astype(uhgu.dtype)
    ret = (uhgu * sc[..., None, :] + sc[..., :, None] * vhgv) * f + _embed(gs.astype(uhgu.dtype))
    if jnp.iscomplexobj(ret):
        ret = ret + _embed(_diag(uhgu) * (sinv / 2))
    if m > k:
        x = gu * sinv[..., None, :]
        return ((uk @ ret + x - uk @ (_mH(uk) @ x)) @ vhk,)
    if n > k:
        x = gvh * sinv[..., :, None]
        return (uk @ (ret @ vhk + x - (x @ _mH(vhk)) @ vhk),)
    return (uk @ ret @ vhk,)


def complement_adjoint(q, g, k):
    """Adjoint of ``jvp_rules.complement_tangent`` (torch's Hermitian convention) for a complete
    basis ``q`` whose first ``k`` columns are the head: the head's cotangent becomes
    ``g_k - Q_e g_e^H Q_k``; returns the head's cotangent only."""
    q_head, q_extra = q[..., :k], q[..., k:]
    return g[..., :k] - q_extra @ (_mH(g[..., k:]) @ q_head)


@_torch_convention
def svdvals_vjp(res, g, **_):
    """``U diag(gS) V^H`` (seed ``svd_backward``'s svdvals fast path)."""
    u, vh = res
    return (u @ (g.astype(u.dtype)[..., :, None] * vh),)


@_torch_convention
def qr_vjp(res, g, *, complete):
    """Seed ``linalg_qr_backward`` with ``M = gR R^H - Q^H gQ``. m >= n:
    ``gA = (Q syminvadj(triu M) + gQ) R^{-H}``; m < n: ``gA = [Q trilImInvAdjSkew(-M) R_1^{-H}, 0]
    + Q gR``. ``complete`` with m > n: the extra columns' cotangent enters through
    ``complement_tangent``'s adjoint (torch raises)."""
    q, r = res
    gq, gr = g
    m, n = q.shape[-2], r.shape[-1]
    if m >= n:
        if complete and m > n:
            gq, gr, q, r = complement_adjoint(q, gq, n), gr[..., :n, :], q[..., :n], r[..., :n, :]
        mm = gr @ _mH(r) - _mH(q) @ gq
        y = jnp.triu(mm)
        ga = q @ P.half_diagonal(y + _mH(y)) + gq
        return (P.tri_solve(r, ga, lower=False, left=False, transpose=True, conjugate=True),)
    mm = gr @ _mH(r) - _mH(q) @ gq
    y = P.half_diagonal(jnp.tril(-mm - _mH(-mm)))
    ga = P.tri_solve(r[..., :m], q @ y, lower=False, left=False, transpose=True, conjugate=True)
    return (jnp.concatenate([ga, jnp.zeros(ga.shape[:-1] + (n - m,), ga.dtype)], axis=-1) + q @ gr,)


@_torch_convention
def eig_vjp(res, g, **_):
    """Seed ``linalg_eig_backward``: ``gA = V^{-H} (diag gw + (V^H gV - V^H V Re diag(V^H gV))
    o conj(F)) V^H`` with ``F_ij = 1/(w_j - w_i)`` (0 for degenerate pairs) and torch's gauge
    check."""
    w, v = res
    gw, gv = g
    vhgv = _mH(v) @ gv
    d = _diag(vhgv)
    P.check_gauge(d.imag, "eig")
    vhgv = vhgv - _mH(v) @ (v * d.real.astype(v.dtype)[..., None, :])
    inner = vhgv * jnp.conj(P.gap_reciprocal(w)) + _embed(gw)
    return (jnp.linalg.solve(_mH(v), inner @ _mH(v)),)


@_torch_convention
def eigvals_vjp(v, g, **_):
    """``V^{-H} diag(gw) V^H`` (seed ``linalg_eig_backward``, values only)."""
    return (jnp.linalg.solve(_mH(v), g[..., :, None] * _mH(v)),)


@_torch_convention
def pinv_vjp(res, g):
    """Seed ``pinv_backward`` (``partials.pinv_adjoint``); none for ``rtol``."""
    a, x = res
    return P.pinv_adjoint(a, x, g), None


@_torch_convention
def lstsq_vjp(res, g):
    """``gA = pinv_backward(gX B^H)``, ``gB = A^{+H} gX`` (seed ``linalg_lstsq_backward``, whose
    translated gB line is damaged; this is upstream's); none for ``rtol``."""
    a, x, b = res
    return P.pinv_adjoint(a, x, g @ _mH(b)), _mH(x) @ g, None


def _lu_cotangent(res, gl, gu):
    lu, perm = res
    lower, upper = P.lu_parts(lu)
    return P.unpermute_rows(P.lu_adjoint(lower, upper, gl, gu), perm)


@_torch_convention
def lu_vjp(res, g, **_):
    """Seed ``linalg_lu_backward`` (square, wide and tall); P has no derivative."""
    _, gl, gu = g
    return (_lu_cotangent(res, gl, gu),)


@_torch_convention
def lu_factor_vjp(res, g, **_):
    """Seed ``lu_factor_ex_backward``: unpack, then ``linalg_lu_backward``."""
    glu, _ = g
    k = min(glu.shape[-2:])
    return (_lu_cotangent(res, *P.unpack_lu(glu, k)),)


@_torch_convention
def lu_solve_vjp(res, g, *, trans):
    """Seed ``linalg_lu_solve_LU`` in its order of products (``A = P L U``, packed factors'
    cotangent ``tril(gL, -1) + triu(gU)``). ``trans`` 0: ``W = U^{-H} g``, ``gB = P L^{-H} W``,
    ``gR = -W X^H``, ``gL = L^{-H} gR U^H``, ``gU = gR``. ``trans`` 2 (``A^H``; 1: ``A^T``, with
    g and X conjugated): ``V = L^{-1} P^T g``, ``gB = A^{-1} g = U^{-1} V``,
    ``gR = -P^T X g^H P L^{-H} = -P^T X V^H``, ``gL = gR``, ``gU = L^H gR U^{-H} =
    -L^H P^T X gB^H``. Each entry then involves only the factor entries and rows of X it depends
    on: a NaN pivot of U leaves the entries of ``triu(gR)`` finite that torch's are
    (``P^T gA = -L^{-H} U^{-H} g X^H`` formed first and multiplied back by ``L^H`` spreads it)."""
    lu, _, perm, x = res
    lower, upper = P.lu_parts(lu)
    solve_h = functools.partial(P.tri_solve, lu, transpose=True, conjugate=True)  # op(T) = T^H
    if trans == 0:
        w = solve_h(g, lower=False)
        gb = P.unpermute_rows(solve_h(w, lower=True, unit=True), perm)
        gr = -(w @ _mH(x))
        return jnp.tril(solve_h(gr @ _mH(upper), lower=True, unit=True), -1) + jnp.triu(gr), None, gb
    g, x = (jnp.conj(g), jnp.conj(x)) if trans == 1 else (g, x)
    v = P.tri_solve(lu, P.permute_rows(g, perm), lower=True, unit=True)  # L^{-1} P^T g
    gb = P.tri_solve(lu, v, lower=False)  # A^{-1} g
    px = -P.permute_rows(x, perm)
    gr = px @ _mH(v)  # -P^T X g^H P L^{-H}
    gu = jnp.triu((_mH(lower) @ px) @ _mH(gb))  # L^H gR U^{-H} = -L^H P^T X gB^H
    return jnp.tril(gr, -1) + gu, None, jnp.conj(gb) if trans == 1 else gb


def lu_unpack_vjp(res, g, *, k):
    """``tril(gL, -1) + triu(gU)`` packed (seed ``lu_unpack_backward``)."""
    _, gl, gu = g
    return P.pack_lu(gl, gu), None


def expm_vjp(a, ct, **_):
    """``expm([[A^T, ct], [0, A^T]])_12`` (seed ``linalg_matrix_exp_differential`` with
    ``adjoint=True``, JAX convention: transpose, not conjugate transpose)."""
    return (J._block_exp_corner(_mT(a), ct),)


def _reflector_adjoint(a, tau, out, g, steps):
    """Reverse pass along the reflector sequence without stored states (seed
    ``householder_product_backward``): ``Y_before = S^{-1} Y_after`` with
    ``S^{-1} = I - s v v^H``, ``s = t / (t |v|^2 - 1)``; ``gS = gY Y_before^H`` gives
    ``gt = -v^H gS v`` and ``gv = -conj(t) gS v - t gS^H v``; ``gY <- S^H gY``. Torch's
    (Hermitian) convention."""
    y, gy = out, g
    ga = jnp.zeros(a.shape, P.promoted_dtype(a, g))
    gtau = jnp.zeros(tau.shape, P.promoted_dtype(tau, g))
    rows = jnp.arange(a.shape[-2])
    for j, conjugate in reversed(steps):
        v = P.reflector(a, j)
        t = jnp.conj(tau[..., j]) if conjugate else tau[..., j]
        norm2 = jnp.sum((v * jnp.conj(v)).real, axis=-1)
        y = P.apply_reflector(t / (t * norm2.astype(t.dtype) - 1), v, y, j)
        gs = gy @ _mH(y)
        gs_v = (gs @ v[..., :, None])[..., 0]
        gt = -jnp.sum(jnp.conj(v) * gs_v, axis=-1)
        gv = -(jnp.conj(t)[..., None] * gs_v) - t[..., None] * (_mH(gs) @ v[..., :, None])[..., 0]
        ga = ga.at[..., :, j].add(jnp.where(rows > j, gv, 0))
        gtau = gtau.at[..., j].add(jnp.conj(gt) if conjugate else gt)
        gy = P.apply_reflector(jnp.conj(t), v, gy, j)
    return ga, gtau, gy


@_torch_convention
def householder_product_vjp(res, g, **_):
    """Seed ``householder_product_backward``, starting from the saved output."""
    a, tau, q = res
    ga, gtau, _ = _reflector_adjoint(a, tau, q, g, P.reflector_sequence(a, tau, adjoint=False, reverse=True))
    return ga, gtau


@_torch_convention
def ormqr_vjp(res, g, *, left, transpose):
    """Seed ``ormqr_backward``: the reverse pass along the reflectors applied to C (``gC`` is
    ``op(Q)^H g``, i.e. ormqr with the opposite ``transpose``)."""
    a, tau, c, out = res
    if left:
        steps = P.reflector_sequence(a, tau, adjoint=transpose, reverse=not transpose)
        return _reflector_adjoint(a, tau, out, g, steps)
    steps = P.reflector_sequence(a, tau, adjoint=not transpose, reverse=transpose)
    ga, gtau, gc = _reflector_adjoint(a, tau, _mH(out), _mH(g), steps)
    return ga, gtau, _mH(gc)


# ----------------------------------------------------------------------------------------------
# FFT. The DFT matrix is symmetric, so in JAX's convention (transpose, no conjugate) the VJP of a
# transform is the same transform of the cotangent, resized to the input.

def _with_length(shape, axis, n):
    shape = list(shape)
    shape[axis] = n
    return tuple(shape)


_FORWARD = {"fft": "fft", "fftn": "fft", "rfft": "fft", "rfftn": "fft", "ifft": "ifft", "ifftn": "ifft",
            "irfft": "ifft", "irfftn": "ifft"}


def fft_vjp(_, ct, *, kind, sizes, axes, norm, shape):
    """c2c (fft, ifft, fftn, ifftn): the same transform of ``ct``. r2c (rfft, rfftn; seed
    ``fft_r2c_backward``): ``Re fft(zero-pad(ct))``. c2r (irfft, irfftn; seed
    ``fft_c2r_backward``): ``w o ifft(ct)`` on the stored half, ``w_j`` = 1 for the DC and
    Nyquist terms and 2 for the others. The result is cut or zero-padded back to the input."""
    last = axes[-1]
    if kind.startswith("r"):  # pad the half spectrum back to the full signal length
        ct = P.resize(ct, _with_length(ct.shape, last, sizes[-1]), (last,))
    out = P.fft_apply(_FORWARD[kind], ct, sizes, axes, norm)
    if kind.startswith("r"):
        out = out.real
    if kind.startswith("ir"):
        m = sizes[-1] // 2 + 1
        weights = P.hermitian_weights(sizes[-1], m, out.real.dtype)
        weights = jnp.expand_dims(weights, tuple(range(1, out.ndim - last % out.ndim))).astype(out.dtype)
        out = P.resize(out, _with_length(out.shape, last, m), (last,)) * P.with_rank(weights, out.ndim)
    return (P.resize(out, shape, axes),)


# ----------------------------------------------------------------------------------------------
# Indexing


def embedding_vjp(res, ct, *, padding_idx, scale_grad_by_freq, num):
    """Seed ``embedding_backward``: rows of ``ct`` added into their indices' rows, none into
    ``padding_idx``, each divided by its index's count when ``scale_grad_by_freq``; the NaN row of
    an out-of-range index is added into the nearest row (``mode="clip"``), not dropped."""
    indices = res
    rows = ct * P.embedding_row_weights(indices, padding_idx, scale_grad_by_freq, num, ct.real.dtype)[..., None]
    return None, jnp.zeros((num, ct.shape[-1]), ct.dtype).at[indices].add(rows, mode="clip")


def scatter_reduce_vjp(res, ct, *, axis, reduce, include_self):
    """Seed ``scatter_reduce_backward``: ``gx = ct o w_x``, ``gsrc = gather(ct) o w_src`` with the
    per-member weights of ``partials.scatter_reduce_weights`` (1 for sum, 1/count for mean,
    1/ties for amax/amin, the product of the others for prod)."""
    x_weight, src_weight, coords = P.scatter_reduce_weights(res, axis=axis, reduce=reduce, include_self=include_self)
    return ct * x_weight, None, P.gather_at(ct, coords, src_weight) * src_weight


# ----------------------------------------------------------------------------------------------
# Shape and indexing


def concatenate_vjp(_, ct, *, axis, shapes):
    """Seed ``cat_tensors_backward``: ``ct`` split back into the pieces."""
    bounds = list(itertools.accumulate(s[axis] for s in shapes))[:-1]
    return tuple(jnp.split(ct, bounds, axis=axis))


def stack_vjp(_, ct, *, axis, shape):
    """Seed ``stack_tensors_backward``: ``ct`` unbound along ``axis``."""
    return tuple(jnp.take(ct, k, axis=axis) for k in range(ct.shape[axis]))


def take_along_axis_vjp(indices, ct, *, axis, shape):
    """Seed ``gather_backward``: ``ct`` scatter-added at the gathered positions (duplicates
    accumulate), into ``arr`` broadcast against ``indices`` off ``axis`` (the mechanism sums the
    broadcast dimensions back, torch's ``sum_to``)."""
    target = ct.shape[:axis] + (shape[axis],) + ct.shape[axis + 1 :]
    return P.scatter_add(target, P.scatter_coords(jnp.broadcast_to(indices, ct.shape), axis), ct), None


def masked_fill_vjp(mask, ct, **_):
    """Seed ``masked_fill`` backward: ``ct`` where the mask is false (the fill value is a
    constant)."""
    return jnp.where(mask, 0, ct), None


def pad_vjp(_, ct, *, widths, value):
    """Seed ``constant_pad_nd_backward``: ``ct`` padded by the negated widths (the interior slice
    of ``ct`` for positive widths, zeros where a negative width cropped)."""
    return (lax.pad(ct, jnp.zeros((), ct.dtype), [(-lo, -hi, 0) for lo, hi in widths]),)


def split_vjp(_, ct, *, axis, sizes):
    """Seed ``split_backward``: the cotangents concatenated (zeros for absent pieces)."""
    dtype = next(c.dtype for c in ct if c is not None)
    shape = lambda n: tuple(n if d == axis else s for d, s in enumerate(_piece_shape(ct)))  # noqa: E731
    return (jnp.concatenate([jnp.zeros(shape(n), dtype) if c is None else c for c, n in zip(ct, sizes)], axis=axis),)


def _piece_shape(ct):
    return next(c.shape for c in ct if c is not None)


def unstack_vjp(_, ct, *, axis):
    """Seed ``unbind_backward``: the cotangents stacked (zeros for absent ones)."""
    like = next(c for c in ct if c is not None)
    return (jnp.stack([jnp.zeros_like(like) if c is None else c for c in ct], axis=axis),)


def block_diag_vjp(_, ct, *, shapes):
    """Seed ``block_diag_backward``: each input gets its diagonal block of ``ct``."""
    out, row, col = [], 0, 0
    for shape in shapes:
        r, c = (1, shape[0]) if len(shape) == 1 else ((1, 1) if not shape else shape)
        out.append(ct[row : row + r, col : col + c].reshape(shape))
        row, col = row + r, col + c
    return tuple(out)


def tile_vjp(_, ct, *, reps, shape):
    """Seed ``repeat_backward`` (torch's ``repeat`` is numpy's ``tile``): the tiled copies summed."""
    full = (1,) * (ct.ndim - len(shape)) + tuple(shape)
    reps = (1,) * (ct.ndim - len(reps)) + tuple(reps)
    split_shape = tuple(v for r, s in zip(reps, full) for v in (r, s))
    sharding = explicit_sharding(ct)
    spec = None if sharding is None else tuple(sharding.spec) + (None,) * ct.ndim
    if spec is not None and all(e is None or r == 1 for r, e in zip(reps, spec)):
        # An Explicit mesh: an axis not tiled keeps its sharding (the copies' axes have none)
        out = jax.sharding.PartitionSpec(*(v for e in spec[: ct.ndim] for v in (None, e)))
        split = lax.reshape(ct, split_shape, out_sharding=out)
    else:
        split = ct.reshape(split_shape)
    summed = split.sum(axis=tuple(range(0, split.ndim, 2)))
    return (summed.reshape(shape),)


def repeat_vjp(_, ct, *, counts, axis):
    """Seed ``repeat_interleave`` backward: each entry's copies summed."""
    return (P.sum_repeats(ct, counts, axis),)


def take_vjp(indices, ct, *, axis, shape):
    """Seed ``index_select_backward`` / ``take_backward``: ``ct`` scatter-added at the taken
    positions (duplicates accumulate)."""
    ct_moved = jnp.moveaxis(ct, tuple(range(axis, axis + indices.ndim)), tuple(range(indices.ndim)))
    sharding = explicit_sharding(ct_moved)  # an Explicit mesh: the other axes as ct's, axis unsharded
    spec = None if sharding is None else jax.sharding.PartitionSpec(
        None, *(tuple(sharding.spec) + (None,) * ct.ndim)[indices.ndim:ct.ndim])
    moved = jnp.zeros((shape[axis], *shape[:axis], *shape[axis + 1:]), ct.dtype, out_sharding=spec)
    return jnp.moveaxis(moved.at[indices].add(ct_moved, out_sharding=spec), 0, axis), None


def value_selection_vjp(idx, ct, *, axis, keepdims, shape, **_):
    """Seed ``value_selecting_reduction_backward``: the cotangent goes to the returned index
    only (ties do not share it)."""
    g, _ = ct
    g = g if keepdims else jnp.expand_dims(g, axis)
    return (P.scatter_add(shape, P.scatter_coords(idx, axis), g),)


# ----------------------------------------------------------------------------------------------
# Convolution and pooling


def convolution_vjp(res, ct, *, stride, padding, dilation, groups):
    """Seed ``convolution_backward``: grad_input by the transposed convolution, grad_weight by
    correlating the input with ``ct``, grad_bias the sum over batch and space."""
    x, w = res
    gx = P.conv_input_grad(ct, w, x.shape[2:], stride, padding, dilation, groups)
    gw = P.conv_weight_grad(x, ct, w.shape[2:], stride, padding, dilation, groups, explicit_sharding(w, x, ct))
    gb = ct.sum(axis=(0, *range(2, ct.ndim)))
    return gx, gw, gb


def conv_transpose_vjp(res, ct, *, stride, padding, dilation, groups):
    """Seed ``convolution_backward`` with ``transposed=true``: grad_input by the (forward)
    convolution of ``ct`` with ``w``, grad_weight by correlating ``ct`` with the input (the roles
    of ``convolution_vjp``'s input and cotangent swapped), grad_bias the sum over batch and
    space."""
    x, w = res
    gx = P.conv(ct, w, stride, padding, dilation, groups)
    gw = P.conv_weight_grad(ct, x, w.shape[2:], stride, padding, dilation, groups, explicit_sharding(w, x, ct))
    gb = ct.sum(axis=(0, *range(2, ct.ndim)))
    return gx, gw, gb


def unfold_vjp(_, ct, *, kernel, stride, padding, dilation, spatial):
    """The transpose of unfold (im2col) is fold (col2im; derivatives.yaml ``im2col``:
    ``col2im(grad, ...)``)."""
    return (P.fold(ct, spatial, kernel, stride, padding, dilation),)


def fold_vjp(_, ct, *, kernel, stride, padding, dilation, spatial):
    """The transpose of fold (col2im) is unfold (im2col; derivatives.yaml ``col2im``:
    ``im2col(grad, ...)``)."""
    return (P.unfold(ct, kernel, stride, padding, dilation),)


def max_pool_vjp(element, ct, *, kernel, stride, padding, dilation, shape):
    """Seed ``max_pool2d_with_indices_backward``: each cotangent added at its window's argmax
    (``element``: which element of the window), as the transpose of the window slices
    (``partials.window_place``: no scatter)."""
    g, _ = ct
    return (P.window_place(g, element, shape, kernel, stride, padding, dilation),)


def adaptive_max_pool_vjp(index, ct, *, shape, **_):
    """Seed ``adaptive_max_pool2d_backward``: each cotangent added at its window's argmax (a
    scatter: adaptive windows differ in size)."""
    g, _ = ct
    return (P.pool_flat_scatter(g, index, shape),)


def avg_pool_vjp(_, ct, *, kernel, stride, padding, count_include_pad, divisor_override, shape):
    """Seed ``avg_pool2d_backward`` / ``avg_pool3d_backward``: each cotangent over its window's
    divisor, added to every input position of the window (``partials.window_sum_transpose``)."""
    return (P.avg_pool_transpose(ct, shape, kernel, stride, padding, count_include_pad, divisor_override),)


def adaptive_avg_pool_vjp(_, ct, *, output_size, shape):
    """Seed ``_adaptive_avg_pool2d_backward`` / ``_adaptive_avg_pool3d_backward``: each cotangent
    shared evenly over its window (the transposed averaging matrices)."""
    return (P.adaptive_avg_pool_transpose(ct, shape, output_size),)


def layer_norm_rows_reference_vjp(res, ct, eps, launch):
    """The jnp form of the fused layer-norm backward (what the kernel computes): seed
    ``layer_norm_backward`` with weight, ``dw = sum g x_hat``, ``db = sum g``, plus the mean and
    rstd outputs' terms ``(g_mean - g_rstd rstd^2 x_hat) / N``."""
    x, w, mean, rstd = res
    g, g_mean, g_rstd = ct
    stat = rstd.dtype
    xhat = (x.astype(stat) - mean[:, None]) * rstd[:, None]
    g = g.astype(stat)
    ws = P.with_rank(w.astype(stat), x.ndim)
    dx = P.affine_norm_backward(xhat, rstd[:, None], g, ws, g_mean[:, None], g_rstd[:, None], (1,))
    return dx.astype(x.dtype), (g * xhat).sum(0).astype(w.dtype), g.sum(0).astype(w.dtype)


@differentiated_as(layer_norm_rows_reference_vjp, n_static=2)
def _layer_norm_rows_kernel_vjp(res, ct, eps, launch):
    from jaxrules import norm_kernels

    x, w, mean, rstd = res
    return norm_kernels.backward(x, ct[0], w, mean, rstd, ct[1], ct[2], launch=launch)


def layer_norm_rows_vjp(res, ct, *, eps, launch):
    """The fused backward kernel (``norm_kernels.backward``); its own derivative is that of
    ``layer_norm_rows_reference_vjp``."""
    return _layer_norm_rows_kernel_vjp(res, tuple(ct), eps, launch)


# ----------------------------------------------------------------------------------------------
# Sorting (sort, topk, cummax/cummin, nanmedian, quantile)


def sort_vjp(idx, ct, *, axis, shape, **_):
    """Seed ``value_selecting_reduction_backward(grad, dim, indices, sizes, keepdim=true)`` (sort
    and topk in derivatives.yaml): each cotangent added at its entry's index."""
    g, _ = ct
    return (P.scatter_add(shape, P.scatter_coords(idx, axis), g),)


# Seed ``cummaxmin_backward``, ``zeros.scatter_add(axis, indices, grad)`` (an entry that stays the
# running extremum collects the cotangents of all the outputs it is), is sort's formula.
cummaxmin_vjp = sort_vjp


def quantile_vjp(res, ct, *, shape, **_):
    """The transpose of ``jvp_rules.quantile_jvp``: ``(1 - w) ct`` added at ``lo`` and ``w ct``
    at ``hi`` (torch: ``lerp``'s backward then sort's ``value_selecting_reduction_backward``)."""
    lo, hi, w = res
    g, _ = ct
    gx = P.scatter_add(shape, P.scatter_coords(lo, lo.ndim - 1), (1 - w) * g)
    return (gx + P.scatter_add(shape, P.scatter_coords(hi, hi.ndim - 1), w * g),)


# ----------------------------------------------------------------------------------------------
# The fused linear + cross-entropy head (its chunked passes in ``partials.losses``)

def linear_cross_entropy_vjp(res, ct, *, reduction, ignore_index, label_smoothing, z_loss, chunk, has_bias,
                             has_class_weight):
    """The logits' cotangent ``G_tc = g_t (a_t p_tc - b_t [c = t] - e_t w_c) + g^lse_t p_tc``
    (``g`` the loss's cotangent per token, ``P.lce_coefficients``; seeds
    ``_log_softmax_backward_data`` and ``nll_loss_backward``) taken through the linear layer
    chunk by chunk (torch's ``linear`` backward: ``dx = G W``, ``dW = G^T x``, ``db = sum_t G``),
    the logits recomputed per chunk from the saved logsumexp. No cotangent for the target and
    the class weights (held fixed)."""
    x, weight, target, bias, class_weight, lse = res
    ct_loss, ct_lse = ct
    vocab = weight.shape[0]
    a, b, e = P.lce_coefficients(target, class_weight, lse, vocab=vocab, ignore_index=ignore_index,
                                 smoothing=label_smoothing, z_loss=z_loss)
    g = (jnp.zeros_like(lse) if ct_loss is None else
         P.lce_token_cotangent(ct_loss, target, class_weight, vocab=vocab, ignore_index=ignore_index,
                               reduction=reduction, dtype=lse.dtype))
    a, b, e = a * g, b * g, None if e is None else e * g
    if ct_lse is not None:
        a = a + ct_lse.astype(lse.dtype)
    dx, dw, db = P.lce_backward(x, weight, bias, target, class_weight, lse, a, b, e, chunk=chunk)
    return (dx, dw, None) + ((db,) if has_bias else ()) + ((None,) if has_class_weight else ())


# ----------------------------------------------------------------------------------------------
# Ops the normalizations' VJP formulas call: B(g) as an op of its own, so that its own formulas
# (above, and ``jvp_rules``) give the double backward under a second reverse pass.

def _normalize_backward_primal(x, mean, rstd, g, *, axes, eps, axis_name):
    # In x's dtype (computed in the statistics' dtype): for bfloat16 inputs an intermediate XLA
    # keeps between fusions is then bfloat16, not float32.
    return P.norm_projection(x, mean, rstd, g, axes, axis_name).astype(x.dtype)


normalize_backward_op = define_op(
    "normalize_backward", _normalize_backward_primal, J.normalize_backward_jvp, normalize_backward_vjp
)
normalize_backward_eps_op = define_op(
    "normalize_backward",
    lambda x, mean, rstd, g, eps, *, axes, axis_name: _normalize_backward_primal(
        x, mean, rstd, g, axes=axes, eps=eps, axis_name=axis_name),
    J.normalize_backward_eps_jvp, normalize_backward_eps_vjp,
)


def _rms_norm_backward_primal(x, rstd, v, *, axes, eps):
    return P.rms_projection(x, rstd, v, axes).astype(x.dtype)


rms_norm_backward_op = define_op(
    "rms_norm_backward", _rms_norm_backward_primal, J.rms_norm_backward_jvp, rms_norm_backward_vjp
)
rms_norm_backward_eps_op = define_op(
    "rms_norm_backward", lambda x, rstd, v, eps, *, axes: _rms_norm_backward_primal(x, rstd, v, axes=axes, eps=eps),
    J.rms_norm_backward_eps_jvp, rms_norm_backward_eps_vjp,
)


def normalize_backward(x, mean, rstd, g, *, axes, eps, axis_name):
    """``rstd (g - E[g] - x_hat E[g x_hat])``: the normalization's VJP (the native backward
    without weight). ``mean``/``rstd`` are x's statistics, passed so that they are not computed
    again; they carry no derivative of their own (the formulas differentiate through x)."""
    if not isinstance(eps, float):  # an array (traced)
        return normalize_backward_eps_op(x, lax.stop_gradient(mean), lax.stop_gradient(rstd), g, eps, axes=axes,
                                         axis_name=axis_name)
    return normalize_backward_op(x, lax.stop_gradient(mean), lax.stop_gradient(rstd), g, axes=axes, eps=eps,
                                 axis_name=axis_name)


def rms_norm_backward(x, rstd, v, *, axes, eps):
    """``rstd (v - x_hat E[v x_hat])``: the RMS normalization's VJP without weight. ``rstd`` is
    x's statistic, passed so that it is not computed again; it carries no derivative of its own
    (the formulas differentiate through x)."""
    if not isinstance(eps, float):  # an array (traced)
        return rms_norm_backward_eps_op(x, lax.stop_gradient(rstd), v, eps, axes=axes)
    return rms_norm_backward_op(x, lax.stop_gradient(rstd), v, axes=axes, eps=eps)
