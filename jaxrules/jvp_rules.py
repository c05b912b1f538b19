"""JVP formulas (forward mode), one per op, mirroring FunctionsManual.cpp.

Signature: ``name_jvp(residuals, *tangents, **static) -> output tangent``. A tangent is ``None``
where it is zero. Each formula is linear in the tangents. The partial derivatives they apply
live in ``partials`` and are shared with the VJP formulas in ``vjp_rules``.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp

from jaxrules import partials as P
from jaxrules.mechanism import unsharded_along
from jaxrules.partials import real_inner
from jaxrules.partials.linalg import expm


def _terms(*terms):
    """Sum of the non-``None`` terms (a zero tangent contributes nothing, not ``0 * inf``);
    ``None`` (zero) when there are none."""
    present = [t for t in terms if t is not None]
    if not present:
        return None
    out = present[0]
    for t in present[1:]:
        rank = max(out.ndim, t.ndim)
        out = P.with_rank(out, rank) + P.with_rank(t, rank)
    return out


def _times(factor, t):
    return None if t is None else factor * t


# ----------------------------------------------------------------------------------------------
# Elementwise


def abs_jvp(sign, t, **_):
    """``Re(conj(sgn x) t)``; 0 at x = 0 (seed ``abs_backward`` via ``sgn``)."""
    return real_inner(sign.astype(P.promoted_dtype(sign, t)), t, (), False)


def sign_jvp(x, t, **_):
    """Real: 0. Complex: ``(t - sgn(x)^2 conj(t)) / (2|x|)``, 0 at x = 0 (seed ``sgn_backward``,
    which torch uses for both directions)."""
    if not jnp.iscomplexobj(x):
        return jnp.zeros_like(t)
    s, inv = P.sgn_parts(x)
    return (t - s * s * jnp.conj(t)) * inv.astype(s.dtype)


def angle_jvp(x, t, **_):
    """Real: 0. Complex: ``Im(conj(x) t) / |x|^2``, 0 at x = 0 (seed ``angle_backward``)."""
    if not jnp.iscomplexobj(x):
        return jnp.zeros_like(t)
    return (jnp.conj(x) * t).imag * P.abs2_reciprocal(x)


def arctan2_jvp(res, ty, tx, **_):
    """``(x ty - y tx) / (x^2 + y^2)``; 0 at (0, 0) (seed ``atan2_backward``, guarded)."""
    dy_factor, dx_factor = P.arctan2_factors(*res)
    return _terms(_times(dy_factor, ty), _times(dx_factor, tx))


def power_scalar_exponent_jvp(x, t, *, exponent, **_):
    """``e x^(e-1) t``, 0 when e = 0 (seed ``pow_backward``)."""
    return P.pow_scalar_exponent_factor(x, exponent) * t


def power_jvp(res, tx, ty, **_):
    """``y x^(y-1) tx + x^y log(x) ty`` with the seed's zero cases (``pow_backward_self``,
    ``pow_backward_exponent``)."""
    x, y, out = res
    dx = None if tx is None else P.pow_base_factor(x, y) * tx
    dy = None if ty is None else P.pow_exponent_factor(x, y, out) * ty
    return _terms(dx, dy)


def power_scalar_base_jvp(res, t, *, base, **_):
    """``b^y log(b) t``, 0 where b = 0 and y >= 0 (seed ``pow_backward_exponent``, Scalar base)."""
    y, out = res
    return P.pow_exponent_factor(jnp.asarray(base, out.dtype), y, out) * t


def copysign_jvp(res, tx, ty, **_):
    """``(result / x) tx``, 0 at x = 0; nothing from the sign source (seed
    ``copysign_tensor_self_backward``)."""
    x, y = res
    if tx is None:
        return jnp.zeros(jnp.broadcast_shapes(x.shape, y.shape), x.dtype)
    return P.copysign_factor(x, y) * tx


def sinc_jvp(x, t, **_):
    """``(cos(pi x) - sinc(x)) / x``, its Taylor series near 0 (value 0 at 0)."""
    return P.sinc_derivative(x) * t


def log1p_jvp(x, t, **_):
    """``t / (1 + x)`` (seed ``log1p_backward``)."""
    return t / (1 + x)


def deg2rad_jvp(res, t, **_):
    """``t pi / 180`` (seed ``deg2rad_backward``)."""
    return t * (math.pi / 180)


def rad2deg_jvp(res, t, **_):
    """``t 180 / pi`` (seed ``rad2deg_backward``)."""
    return t * (180 / math.pi)


def clip_jvp(res, tx, tlo, thi, **_):
    """Seed ``clamp_jvp``: ``where(lo > hi, hi_t, where(x < lo, lo_t, where(x > hi, hi_t, x_t)))``."""
    pick_x, pick_lo, pick_hi = P.clip_masks(*res)
    return _terms(
        None if tx is None else jnp.where(pick_x, tx, 0),
        None if tlo is None else jnp.where(pick_lo, tlo, 0),
        None if thi is None else jnp.where(pick_hi, thi, 0),
    )


def logit_jvp(x, t, *, eps, **_):
    """``t / (x (1 - x))`` inside ``[eps, 1 - eps]``, 0 outside; without eps, NaN outside
    ``[0, 1]`` (seed ``infinitely_differentiable_logit_backward``)."""
    return P.logit_factor(x, eps) * t


def i1_jvp(res, t, **_):
    """``i0(x) - i1(x)/x``, 1/2 at 0 (torch ``i1_backward``)."""
    return P.i1_factor(*res) * t


def i1e_jvp(res, t, **_):
    """``i0e(x) - i1e(x) (sign(x) + 1/x)``, 1/2 at 0 (torch ``i1e_backward``)."""
    return P.i1e_factor(*res) * t


def multigammaln_jvp(a, t, *, d, **_):
    """``sum_{i<d} digamma(a - i/2) t`` (seed ``mvlgamma_backward``)."""
    return P.multigammaln_factor(a, d) * t


def xlogy_jvp(res, tx, ty, **_):
    """``log(y) tx + (x / y) ty`` (seed ``xlogy.Tensor`` in derivatives.yaml): ``log y`` 0 where
    x = 0 and y <= 0 (torch's mask); ``x / y`` 0 where x = 0 and y is not NaN (torch: NaN at
    x = y = 0)."""
    x, y = res
    dx_factor, dy_factor = P.xlogy_factors(x, y)
    return _terms(_times(dx_factor, tx), _times(dy_factor, ty))


# ----------------------------------------------------------------------------------------------
# Reductions


def sum_jvp(res, t, *, axis, keepdims, **_):
    """``sum(t)`` (seed ``sum_backward``'s forward counterpart)."""
    return jnp.sum(t, axis=axis, keepdims=keepdims)


def mean_jvp(res, t, *, axis, keepdims, **_):
    """``mean(t)`` (seed ``mean_backward``)."""
    return jnp.mean(t, axis=axis, keepdims=keepdims)


def nansum_jvp(x, t, *, axis, keepdims, **_):
    """``sum(t where x is not NaN)`` (seed ``nansum_backward``)."""
    return jnp.sum(jnp.where(jnp.isnan(x), 0, t), axis=axis, keepdims=keepdims)


def prod_jvp(x, t, *, axis, keepdims, **_):
    """``sum(prod_{j != i} x_j t_i)``, zero-safe (seed ``prod_safe_zeros_backward``)."""
    return jnp.sum(P.prod_of_others(x, axis) * t, axis=axis, keepdims=keepdims)


def cumsum_jvp(res, t, *, axis, **_):
    """``cumsum(t)`` (seed ``cumsum_backward``)."""
    return jnp.cumsum(t, axis=axis)


def cumprod_jvp(x, t, *, axis, **_):
    """``h_k = x_k h_{k-1} + (prod_{i<k} x_i) t_k``: a linear recurrence, no division, so
    zeros are exact (torch's ``cumprod_backward`` divides and special-cases the first zero)."""
    return P.linear_recurrence(x, P.exclusive_cumprod(x, axis) * t, axis)


def var_jvp(res, t, *, axis, keepdims, correction, **_):
    """``2/(N - c) Re sum(conj(x - mean) t)`` (seed ``var_backward``'s forward counterpart)."""
    centered, _ = res
    scale = P.var_scale(centered, axis, correction)
    return scale * real_inner(centered, t, axis, keepdims)


def std_jvp(res, t, *, axis, keepdims, correction, **_):
    """``var_jvp / (2 std)``, 0 where std = 0 (seed ``std_backward``)."""
    centered, std = res
    scale = P.var_scale(centered, axis, correction)
    return scale * real_inner(centered, t, axis, keepdims) * P.half_reciprocal(std)


def var_mean_jvp(res, t, *, axis, keepdims, correction, **_):
    """``(var_jvp, mean_jvp)`` (seed ``var_mean_backward``)."""
    return (
        var_jvp(res, t, axis=axis, keepdims=keepdims, correction=correction),
        jnp.mean(t, axis=axis, keepdims=keepdims),
    )


def std_mean_jvp(res, t, *, axis, keepdims, correction, **_):
    """``(std_jvp, mean_jvp)`` (seed ``std_mean_backward``)."""
    return (
        std_jvp(res, t, axis=axis, keepdims=keepdims, correction=correction),
        jnp.mean(t, axis=axis, keepdims=keepdims),
    )


def selection_jvp(res, t, *, axis, keepdims, **_):
    """``sum(mask t) / count`` over the selected entries (seed ``evenly_read_jvp``, with the NaN
    handling of ``evenly_distribute_backward`` that the seed's JVP lacks). amax and amin."""
    x, out = res
    weights, t = P.promoted(P.even_weights(x, out, axis, keepdims), t)
    return jnp.sum(weights * t, axis=axis, keepdims=keepdims)


def median_jvp(x, t, *, axis, keepdims, **_):
    """``sum(w t)`` with ``w`` the even split over the middle value(s) (seed
    ``evenly_read_jvp``)."""
    weights, t = P.promoted(P.median_weights(x, axis, keepdims), t)
    return jnp.sum(weights * t, axis=axis, keepdims=keepdims)


def logsumexp_jvp(weights, t, *, axis, keepdims, **_):
    """``sum(exp(x - out) t)`` with the saved weights ``exp(x - out)`` (the softmax's limit at
    infinite ``out``; see ``partials.logsumexp_weights``)."""
    return jnp.sum(weights * t, axis=axis, keepdims=keepdims)


def logcumsumexp_jvp(res, t, *, axis, **_):
    """``dy_k = exp(y_{k-1} - y_k) dy_{k-1} + exp(x_k - y_k) t_k``: coefficients in [0, 1], so
    exact where the seed's ``logcumsumexp_jvp`` (global max + 1e-13) loses precision, and finite
    after leading -inf (see ``partials.logcumsumexp_coefficients``)."""
    a, b = P.logcumsumexp_coefficients(*res, axis)
    return P.linear_recurrence(a, b * t, axis)


def vector_norm_jvp(res, t, *, ord, axis, keepdims, **_):
    """``Re sum(conj(w) t)`` with ``w`` the norm's direction (seed ``norm_jvp``)."""
    x, norm = res
    w = P.vector_norm_direction(x, norm, ord, axis, keepdims)
    return real_inner(w, t, axis, keepdims)


def renorm_jvp(res, t, *, p, axis, maxnorm, **_):
    """Seed ``renorm_jvp``: ``where(norm > maxnorm, s t - x maxnorm/(norm+1e-7)^2 dnorm, t)``
    with ``s = maxnorm/(norm + 1e-7)``."""
    x, norm = res
    w = P.vector_norm_direction(x, norm, p, axis, True)
    scale, dscale, over = P.renorm_scale(norm, maxnorm)
    dnorm = real_inner(w, t, axis, True)
    step = jnp.multiply(*P.promoted(scale, t)) + jnp.multiply(*P.promoted(x, dscale * dnorm))
    return jnp.where(over, step, t)


# ----------------------------------------------------------------------------------------------
# Normalization: y = x_hat w + b with the statistics as outputs (the native kernels with affine),
# and its backward without weight (whose own derivatives are the seed's double backward)


def affine_normalize_jvp(res, tx, tw, tb, *, axes, eps, axis_name):
    """Outputs ``(y, mean, rstd)`` of ``y = x_hat w + b``: ``dmean = E[dx]``, ``drstd = -rstd^2
    E[x_hat dx]``, ``dy = rstd (dx - dmean - x_hat E[x_hat dx]) w + x_hat dw + db`` (seed
    ``layer_norm_jvp`` / ``batch_norm_jvp`` / ``group_norm_jvp``: ``_norm_jvp`` with
    ``_invstd_jvp``, then ``_affine_jvp``)."""
    x, w, mean, rstd = res
    stat = rstd.dtype
    xhat = (x.astype(stat) - mean) * rstd
    dy, dmean, drstd = [], None, None
    if tx is not None:
        t = tx.astype(stat)
        dmean, c = P.group_mean(t, axes, axis_name), P.group_mean(xhat * t, axes, axis_name)
        dy.append(rstd * (t - dmean - xhat * c) * P.with_rank(w.astype(stat), x.ndim))
        drstd = -rstd * rstd * c
    if tw is not None:
        dy.append(xhat * P.with_rank(tw.astype(stat), x.ndim))
    if tb is not None:
        dy.append(jnp.broadcast_to(tb.astype(stat), x.shape))
    return _terms(*dy), dmean, drstd


def normalize_backward_jvp(res, tx, tmean, trstd, tg, *, axes, eps, axis_name):
    """JVP of the backward ``gx = B(g)``: ``B(dg) - rstd (E[dx x_hat] gx + E[g x_hat] B(dx) +
    x_hat E[gx dx])`` — the forward-mode counterpart of the seed's double backward
    (``layer_norm_double_backward`` / ``batchnorm_double_backward`` with weight 1). The statistics
    are recomputed from x (their arguments carry no derivative: see ``normalize_backward``)."""
    x, _, _, g = res
    mean, rstd = P.norm_stats(x, axes, eps, axis_name)
    gx = P.norm_projection(x, mean, rstd, g, axes, axis_name)
    out = None if tg is None else P.norm_projection(x, mean, rstd, tg, axes, axis_name)
    if tx is not None:
        xhat = (x.astype(rstd.dtype) - mean) * rstd
        tx = tx.astype(rstd.dtype)
        mean_ = lambda v: P.group_mean(v, axes, axis_name)  # noqa: E731
        dx_term = -rstd * (
            mean_(tx * xhat) * gx
            + mean_(g.astype(rstd.dtype) * xhat) * P.norm_projection(x, mean, rstd, tx, axes, axis_name)
            + xhat * mean_(gx * tx)
        )
        out = dx_term if out is None else out + dx_term
    return out


def affine_normalize_eps_jvp(res, tx, tw, tb, teps, *, axes, axis_name):
    """``affine_normalize_jvp`` with ``eps`` an array argument (traced: jit/vmap over it), plus
    its term: ``drstd = -rstd^3 deps / 2`` (``rstd = rsqrt(var + eps)``), ``dy = (x - mean) w
    drstd``; the mean does not depend on eps."""
    x, w, mean, rstd, _ = res
    dy, dmean, drstd = affine_normalize_jvp((x, w, mean, rstd), tx, tw, tb, axes=axes, eps=None, axis_name=axis_name)
    if teps is not None:
        stat = rstd.dtype
        de = -0.5 * rstd * rstd * rstd * teps.astype(stat)
        dy = _terms(dy, (x.astype(stat) - mean) * P.with_rank(w.astype(stat), x.ndim) * de)
        drstd = _terms(drstd, de)
    return dy, dmean, drstd


def normalize_backward_eps_jvp(res, tx, tmean, trstd, tg, teps, *, axes, axis_name):
    """``normalize_backward_jvp`` with ``eps`` an array argument, plus its term: ``B(g) = rstd (g
    - E[g]) - rstd^3 (x - mean) E[g (x - mean)]`` depends on eps through ``rstd`` only, so
    ``dB = ((g - E[g]) - 3 rstd^2 (x - mean) E[g (x - mean)]) (-rstd^3 / 2) deps``."""
    x, _, _, g, eps = res
    out = normalize_backward_jvp(res[:4], tx, tmean, trstd, tg, axes=axes, eps=eps, axis_name=axis_name)
    if teps is not None:
        out = _terms(out, P.norm_projection_eps_partial(x, g, eps, axes, axis_name) * teps)
    return out


def rms_norm_jvp(res, tx, tw, *, axes, eps):
    """Outputs ``(y, rstd)`` of ``y = x_hat w``, ``x_hat = x rstd``, ``rstd = rsqrt(E[x^2] +
    eps)``: ``drstd = -rstd^2 E[x_hat dx]``, ``dy = rstd (dx - x_hat E[x_hat dx]) w + x_hat dw``
    (seeds ``rms_norm_jvp`` and ``rms_norm_rstd_jvp`` of torch's ``_fused_rms_norm``)."""
    x, w, rstd = res
    stat = rstd.dtype
    xhat = x.astype(stat) * rstd
    dy, drstd = [], None
    if tx is not None:
        t = tx.astype(stat)
        c = jnp.mean(xhat * t, axis=axes, keepdims=True)
        dy.append(rstd * (t - xhat * c) * P.with_rank(w.astype(stat), t.ndim))
        drstd = -rstd * rstd * c
    if tw is not None:
        dy.append(xhat * P.with_rank(tw.astype(stat), x.ndim))
    return _terms(*dy), drstd


def rms_norm_backward_jvp(res, tx, trstd, tv, *, axes, eps):
    """JVP of the backward ``gx = B(v)``, ``B(v) = rstd (v - x_hat E[v x_hat])``: ``B(dv) - rstd
    (E[x_hat dx] gx + E[v x_hat] B(dx) + x_hat E[gx dx])`` (the double backward of
    ``normalize_backward_jvp`` without the mean terms, derived from ``drstd = -rstd^2 E[x_hat
    dx]``). ``rstd`` is recomputed from x (its argument carries no derivative: see
    ``rms_norm_backward``)."""
    x, _, v = res
    rstd = P.rms_rstd(x, axes, eps)
    out = None if tv is None else P.rms_projection(x, rstd, tv, axes)
    if tx is not None:
        stat = rstd.dtype
        xhat, t, v = x.astype(stat) * rstd, tx.astype(stat), v.astype(stat)
        gx = P.rms_projection(x, rstd, v, axes)
        mean_ = lambda u: jnp.mean(u, axis=axes, keepdims=True)  # noqa: E731
        dx_term = -rstd * (mean_(xhat * t) * gx + mean_(v * xhat) * P.rms_projection(x, rstd, t, axes)
                           + xhat * mean_(gx * t))
        out = dx_term if out is None else out + dx_term
    return out


def rms_norm_eps_jvp(res, tx, tw, teps, *, axes):
    """``rms_norm_jvp`` with ``eps`` an array argument, plus its term: ``drstd = -rstd^3 deps /
    2`` (``rstd = rsqrt(E[x^2] + eps)``), ``dy = x w drstd``."""
    x, w, rstd, _ = res
    dy, drstd = rms_norm_jvp((x, w, rstd), tx, tw, axes=axes, eps=None)
    if teps is not None:
        stat = rstd.dtype
        de = -0.5 * rstd * rstd * rstd * teps.astype(stat)
        dy, drstd = _terms(dy, x.astype(stat) * P.with_rank(w.astype(stat), x.ndim) * de), _terms(drstd, de)
    return dy, drstd


def rms_norm_backward_eps_jvp(res, tx, trstd, tv, teps, *, axes):
    """``rms_norm_backward_jvp`` with ``eps`` an array argument, plus its term: ``B(v) = rstd v -
    rstd^3 x E[v x]`` gives ``dB = (v - 3 rstd^2 x E[v x]) (-rstd^3 / 2) deps``."""
    x, _, v, eps = res
    out = rms_norm_backward_jvp(res[:3], tx, trstd, tv, axes=axes, eps=eps)
    if teps is not None:
        out = _terms(out, P.rms_projection_eps_partial(x, v, eps, axes) * teps)
    return out


# ----------------------------------------------------------------------------------------------
# Pointwise ops whose derivative is one factor per input (activations, losses): the factors come
# from ``partials`` (``derivative(*inputs, **params)``), shared with ``vjp_rules``.


def pointwise_jvp(res, *tangents, derivative, **params):
    """``sum_i (d f / d x_i) t_i``."""
    inputs = res if isinstance(res, tuple) else (res,)
    factors = derivative(*inputs, **params)
    factors = factors if isinstance(factors, tuple) else (factors,)
    return _terms(*(_times(f, t) for f, t in zip(factors, tangents)))


def softmax_jvp(x, t, *, axis, **_):
    """``y (t - sum(y t))`` (the transpose of ``_softmax_backward_data``), y from the saved
    input."""
    e, s = P.softmax_parts(x, axis)
    y = e / s
    return y * (t - jnp.sum(y * t, axis=axis, keepdims=True))


def log_softmax_jvp(res, t, *, axis, **_):
    """``t - sum(softmax t)``, ``softmax = e / s`` from the saved exponentials and row sums (0 at
    -inf logits)."""
    e, s = res
    return t - jnp.sum(e * t, axis=axis, keepdims=True) / s


def masked_softmax_jvp(res, t, tmask, *, axis, **_):
    """Softmax over the entries where ``mask`` (``where=``), 0 elsewhere: ``y (t - sum(y t))``
    with ``y = e / s`` of the included entries only (0 off the mask, so masked entries get no
    tangent and give none)."""
    x, mask = res
    e, s = P.masked_softmax_parts(x, mask, axis)
    y = e / s
    return y * (t - jnp.sum(y * t, axis=axis, keepdims=True))


def masked_log_softmax_jvp(res, t, tmask, *, axis, **_):
    """Log-softmax over the entries where ``mask``, -inf (a constant) elsewhere: ``t - sum(y t)``
    on the mask, 0 off it, ``y = e / s`` of the included entries."""
    e, s, mask = res
    tm = jnp.where(mask, t, 0)
    return jnp.where(mask, tm - jnp.sum(e * tm, axis=axis, keepdims=True) / s, 0)


def glu_jvp(x, t, *, axis, **_):
    """``glu(x) = a sigmoid(b)``: ``sigmoid(b) t_a + a sigmoid(b)(1 - sigmoid(b)) t_b`` (the
    forward counterpart of torch's ``glu_backward``)."""
    a, b = jnp.split(x, 2, axis=axis)
    ta, tb = jnp.split(t, 2, axis=axis)
    s = jax.nn.sigmoid(b)
    return s * ta + a * s * (1 - s) * tb


def dropout_jvp(res, tx, tmask, tscale, **_):
    """``t mask scale`` (seed ``infinitely_differentiable_native_dropout_backward``); ``scale =
    1/(1 - p)`` (an argument: p may be traced) gets no tangent (``dropout`` stops it)."""
    mask, scale = res
    if tx is None:
        return None
    tx, mask, scale = P.promoted(tx, mask, scale)
    return tx * mask * scale


# ----------------------------------------------------------------------------------------------
# Linear algebra (batched over leading dims; shapes in comments are per matrix).

_mT, _mH, _herm, _diag, _embed = P.mT, P.mH, P.herm, P.diagonal, P.diag_embed


def matmul_jvp(res, ta, tb, **_):
    """``dA B + A dB`` (seed ``mm_mat1_backward`` / ``mm_mat2_backward``, forward)."""
    a, b = res
    return _terms(None if ta is None else P.matmul(ta, b), None if tb is None else P.matmul(a, tb))


def linear_jvp(res, tx, tw, tb, **_):
    """``dx W^T + x dW^T + db`` (torch ``linear``)."""
    x, w = res
    product = lambda u, v: jnp.einsum("...i,oi->...o", u, v)  # noqa: E731 - x W^T, x may be 1-D
    return _terms(None if tx is None else product(tx, w), None if tw is None else product(x, tw), tb)


def inv_jvp(x, ta, **_):
    """``dX = -X dA X`` (X = A^{-1}; derivatives.yaml ``linalg_inv_ex``)."""
    return -(x @ ta @ x)


def adjugate_jvp(res, ta, **_):
    """``d adj(A)[E] = c V (diag(Q diag(E~)) - Q o E~) U^H`` with ``A = U S V^H``,
    ``E~ = U^H E V``, ``c = det(U) det(V^H)`` and ``Q`` the pair products of ``S``
    (``partials.pair_products``): exact at every rank (adj(A U S V^H) factors through the SVD
    with U, V held fixed), so det's second derivative is finite at singular matrices."""
    u, s, vh, c = res
    e = _mH(u) @ ta @ _mH(vh)
    q = P.pair_products(s).astype(e.dtype)
    m = _embed(jnp.einsum("...ik,...k->...i", q, _diag(e))) - q * e
    return c[..., None, None] * (_mH(vh) @ m @ _mH(u))


def det_jvp(adj, ta, **_):
    """``d det = tr(adj(A) dA)`` (seed ``linalg_det_jvp``; the adjugate instead of
    ``det A^{-1}``, exact at singular A)."""
    return jnp.einsum("...ij,...ji->...", adj, ta)


def slogdet_jvp(ainv, ta, **_):
    """``d logabs = Re tr(A^{-1} dA)``, ``d sign = i sign Im tr(A^{-1} dA)`` (0 for real A)
    (seed ``slogdet_jvp``). Residuals: ``A^{-1}`` and the sign."""
    ainv, sign = ainv
    tr = jnp.einsum("...ij,...ji->...", ainv, ta)
    dsign = 1j * sign * tr.imag.astype(sign.dtype) if jnp.iscomplexobj(tr) else jnp.zeros_like(sign)
    return dsign, tr.real


def solve_jvp(res, ta, tb, *, left, **_):
    """Left: ``dX = A^{-1}(dB - dA X)``; right (``X A = B``): ``dX = (dB - X dA) A^{-1}``
    (seed ``linalg_solve_jvp`` / ``generic_solve_jvp``). Residuals: the LU factors of A and X."""
    lu, piv, x = res
    if left:
        rhs = _terms(tb, None if ta is None else -(ta @ x))
        return P.lu_solve(lu, piv, rhs, trans=0)
    rhs = _terms(tb, None if ta is None else -(x @ ta))
    return _mT(P.lu_solve(lu, piv, _mT(rhs), trans=1))


def solve_triangular_jvp(res, ta, tb, *, lower, unit, transpose, conjugate, left):
    """``dX = M^{-1}(dB - dM X)`` (``left``) or ``(dB - X dM) M^{-1}`` with ``M = op(A)`` and
    ``dM = op(P(dA))``, ``P`` the projection on the triangle read (strict if ``unit``) (seed
    ``linalg_solve_triangular_forward_AD``)."""
    a, x = res
    dm = None
    if ta is not None:
        dm = P.band(ta, lower, unit)
        dm = _mT(dm) if transpose else dm
        dm = jnp.conj(dm) if conjugate else dm
    rhs = _terms(tb, None if dm is None else -(dm @ x if left else x @ dm))
    return P.tri_solve(a, rhs, lower=lower, left=left, transpose=transpose, conjugate=conjugate, unit=unit)


def cholesky_jvp(factor, ta, **_):
    """``dL = L Phi(L^{-1} herm(dA) L^{-H})``, ``Phi(X) = tril(X) - diag(X)/2`` (seed
    ``cholesky_jvp``; the tangent is symmetrized as the primal is, jnp's convention)."""
    y = P.tri_solve(factor, _herm(ta), lower=True)
    y = P.tri_solve(factor, y, lower=True, left=False, transpose=True, conjugate=True)
    return factor @ P.half_diagonal(jnp.tril(y))


def cho_solve_jvp(res, tc, tb, *, lower):
    """``dA = dK + dK^H`` with ``dK = dL L^H`` (lower) or ``dU^H U`` (upper), then
    ``dX = A^{-1}(dB - dA X)`` (seed ``cholesky_solve_jvp``: the factor's tangent is used whole,
    torch's convention)."""
    c, x = res
    da = None
    if tc is not None:
        dk = tc @ _mH(c) if lower else _mH(tc) @ c
        da = dk + _mH(dk)
    rhs = _terms(tb, None if da is None else -(da @ x))
    return P.cho_solve(c, lower, rhs)


def cholesky_inverse_jvp(res, tc, *, lower):
    """``dX = K + K^H`` with ``K = -X dL L^H X`` (lower) or ``-X U^H dU X`` (upper). The seed's
    ``cholesky_inverse_jvp`` uses ``K = -X dL X L^H``, which is wrong (it assumes
    ``L^{-H} L^{-1} = L^{-1} L^{-H}``; torch 2.13 fails its own forward-AD gradcheck)."""
    c, x = res
    k = -(x @ tc @ _mH(c) @ x) if lower else -(x @ _mH(c) @ tc @ x)
    return k + _mH(k)


def eigh_jvp(res, ta, **_):
    """``dP = V^H herm(dA) V``, ``dw = Re diag(dP)``, ``dV = V (F o dP)`` with
    ``F_ij = 1/(w_j - w_i)`` (0 for degenerate pairs, ``partials.gap_reciprocal``) (seed
    ``linalg_eig_jvp``, hermitian branch)."""
    w, v = res
    dp = _mH(v) @ _herm(ta) @ v
    return _diag(dp).real, v @ (P.gap_reciprocal(w).astype(dp.dtype) * dp)


def eigvalsh_jvp(v, ta, **_):
    """``dw = Re diag(V^H dA V)``."""
    return _diag(_mH(v) @ ta @ v).real


def _pad(x, size, axis):
    """Zero-pad ``x`` along ``axis`` (-1 or -2) to ``size``."""
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, widths)


def complement_tangent(q, dq_head):
    """Tangent of the extra (complement) columns ``Q_e`` of a complete orthonormal basis
    ``[Q_k, Q_e]`` given ``dQ_k``: ``dQ_e = -Q_k dQ_k^H Q_e`` (the rotation that keeps the basis
    orthonormal and does not mix the complement with itself). torch pads zeros here (then
    ``d(Q_e Q_e^H) = 0``, which is wrong); this gauge gets every invariant of ``Q_e`` right."""
    k = dq_head.shape[-1]
    q_head, q_extra = q[..., :k], q[..., k:]
    return jnp.concatenate([dq_head, -(q_head @ (_mH(dq_head) @ q_extra))], axis=-1)


def svd_jvp(res, ta, *, full_matrices):
    """Seed ``linalg_svd_jvp``: ``dP = U^H dA V``, ``dS = Re diag dP``,
    ``dU = U(sym(dP S) o F + i Im diag(dP)/(2S)) (+ (I - UU^H) dA V S^{-1})``, ``dV^H``
    likewise, ``F_ij = 1/(S_j^2 - S_i^2)`` (0 for degenerate pairs), ``1/S`` taken as 0 at
    ``S = 0``. ``full_matrices``: the extra columns get ``complement_tangent`` (torch: zeros)."""
    u, s, vh = res
    m, n = ta.shape[-2:]
    k = s.shape[-1]
    uk, vhk = u[..., :k], vh[..., :k, :]
    vk = _mH(vhk)
    dp = _mH(uk) @ ta @ vk
    ds = _diag(dp).real
    dp = dp - _embed(ds.astype(dp.dtype))
    f = P.gap_reciprocal(s, squared=True).astype(dp.dtype)
    sinv = P.safe_reciprocal(s, s == 0).astype(dp.dtype)
    sym = lambda x: x + _mH(x)  # noqa: E731
    sc = s.astype(dp.dtype)
    du = sym(dp * sc[..., None, :]) * f
    dvh = sym(dp * -sc[..., :, None]) * f
    if jnp.iscomplexobj(dp):
        half = _embed(_diag(dp) * (sinv / 2))
        du, dvh = du + half, dvh + half
    du, dvh = uk @ du, dvh @ vhk
    if m > k:
        x = ta @ (vk * sinv[..., None, :])
        du = du + x - uk @ (_mH(uk) @ x)
    if n > k:
        x = (_mH(uk) * sinv[..., :, None]) @ ta
        dvh = dvh + x - (x @ vk) @ vhk
    if full_matrices and m > k:
        du = complement_tangent(u, du)
    if full_matrices and n > k:
        dvh = _mH(complement_tangent(_mH(vh), _mH(dvh)))
    return du, ds, dvh


def svdvals_jvp(res, ta, **_):
    """``dS = Re diag(U^H dA V)`` (seed ``linalg_svd_jvp``, values only)."""
    u, vh = res
    return _diag(_mH(u) @ ta @ _mH(vh)).real




def qr_jvp(res, ta, *, complete):
    """Seed ``linalg_qr_jvp``. m >= n: ``dR' = syminv(sym(Q^H dA R^{-1}))``,
    ``dQ = dA R^{-1} - Q dR'``, ``dR = dR' R``; m < n: the ``trilim``/``triliminv`` branch.
    ``complete`` with m > n (torch raises): the extra columns get ``complement_tangent``."""
    q, r = res
    m, n = ta.shape[-2:]
    if m >= n:
        qn, rn = q[..., :n], r[..., :n, :]
        da_rinv = P.tri_solve(rn, ta, lower=False, left=False)
        x = _mH(qn) @ da_rinv
        dr = P.half_diagonal(jnp.triu(x + _mH(x)))
        dq = da_rinv - qn @ dr
        dr = dr @ rn
        if complete and m > n:
            dq, dr = complement_tangent(q, dq), _pad(dr, m, -2)
        return dq, dr
    qh_da = _mH(q) @ ta
    x = P.tri_solve(r[..., :m], qh_da[..., :m], lower=False, left=False)
    d = _diag(x)
    trilim = jnp.tril(x, -1) + _embed(d - d.real.astype(d.dtype))
    dq = P.half_diagonal(trilim - _mH(trilim))
    return q @ dq, qh_da - dq @ r


def eig_jvp(res, ta, **_):
    """Seed ``linalg_eig_jvp``: ``dP = V^{-1} dA V``, ``dw = diag dP``,
    ``dX = V (F o dP)`` (``F_ij = 1/(w_j - w_i)``, 0 for degenerate pairs),
    ``dV = dX - V Re diag(V^H dX)`` (unit-norm eigenvectors)."""
    w, v = res
    dp = jnp.linalg.solve(v, ta.astype(v.dtype) @ v)
    dx = v @ (P.gap_reciprocal(w) * dp)
    return _diag(dp), dx - v * _diag(_mH(v) @ dx).real.astype(v.dtype)[..., None, :]


def eigvals_jvp(v, ta, **_):
    """``dw = diag(V^{-1} dA V)``."""
    return _diag(jnp.linalg.solve(v, ta.astype(v.dtype) @ v))


def pinv_jvp(res, ta, trtol):
    """Seed ``pinv_jvp`` (``partials.pinv_tangent``; valid where the rank is locally constant);
    the cutoff ``rtol`` has derivative 0."""
    a, x = res
    return None if ta is None else P.pinv_tangent(a, x, ta)


def lstsq_jvp(res, ta, tb, trtol):
    """``dX = d(A^+) B + A^+ dB`` (seed ``linalg_lstsq_jvp``); ``rtol``: derivative 0."""
    a, x, b = res
    return _terms(None if ta is None else P.pinv_tangent(a, x, ta) @ b, None if tb is None else x @ tb)


def _lu_tangent(res, ta):
    lu, perm = res
    lower, upper = P.lu_parts(lu)
    return P.lu_tangent(lower, upper, P.permute_rows(ta, perm))


def lu_jvp(res, ta, **_):
    """``(dP, dL, dU) = (0, ...)`` of ``A = P L U`` (seed ``linalg_lu_jvp``)."""
    dl, du = _lu_tangent(res, ta)
    return jnp.zeros(ta.shape[:-1] + (ta.shape[-2],), ta.dtype), dl, du


def lu_factor_jvp(res, ta, **_):
    """The packed ``tril(dL, -1) + triu(dU)`` (seed ``lu_factor_ex_jvp``); pivots: no tangent."""
    return P.pack_lu(*_lu_tangent(res, ta)), None


def _lu_matrix_tangent(lu, tlu):
    """``dA' = dL U + L dU`` (``A' = P^T A = L U``) from a tangent of the packed factors."""
    lower, upper = P.lu_parts(lu)
    k = lower.shape[-1]
    return jnp.tril(tlu[..., :, :k], -1) @ upper + lower @ jnp.triu(tlu[..., :k, :])


def lu_solve_jvp(res, tlu, tpiv, tb, *, trans):
    """``X = op(A)^{-1} B`` with ``A = P L U``: ``dX = op(A)^{-1}(dB - op(dA) X)``,
    ``dA = P (dL U + L dU)`` (seed ``linalg_lu_solve_jvp``)."""
    lu, piv, perm, x = res
    dop = None
    if tlu is not None:
        da = P.unpermute_rows(_lu_matrix_tangent(lu, tlu), perm)
        dop = da if trans == 0 else (_mT(da) if trans == 1 else _mH(da))
    rhs = _terms(tb, None if dop is None else -(dop @ x))
    return P.lu_solve(lu, piv, rhs, trans=trans)


def lu_unpack_jvp(res, tlu, tpiv, *, k):
    """``(0, tril(dLU, -1), triu(dLU))`` restricted to L's and U's shapes (the unpacking is
    linear; the matrix axes unsharded under an ``Explicit`` mesh, as the primal's)."""
    m, n = tlu.shape[-2:]
    tlu = unsharded_along(tlu, (tlu.ndim - 2, tlu.ndim - 1))
    return jnp.zeros(tlu.shape[:-2] + (m, m), tlu.dtype), jnp.tril(tlu[..., :, :k], -1), jnp.triu(tlu[..., :k, :])


def _block_exp_corner(a, e):
    """``expm([[A, E], [0, A]])[:n, n:]``: the Frechet derivative of expm at A along E (seed
    ``differential_analytic_matrix_function``)."""

    n = a.shape[-1]
    top = jnp.concatenate([a, e], axis=-1)
    bottom = jnp.concatenate([jnp.zeros_like(a), a], axis=-1)
    return expm(jnp.concatenate([top, bottom], axis=-2))[..., :n, n:]


def expm_jvp(a, ta, **_):
    """``expm([[A, dA], [0, A]])_12`` (seed ``linalg_matrix_exp_differential``)."""
    return _block_exp_corner(a, ta)


def _reflector_jvp(a, tau, c, ta, ttau, tc, steps):
    """Product rule along the reflector sequence: ``Y <- S Y``, ``dY <- dS Y + S dY`` with
    ``S = I - t v v^H``, ``dS = -dt v v^H - t (dv v^H + v dv^H)``."""
    y, dy = c, tc
    for j, conjugate in steps:
        v = P.reflector(a, j)
        t = jnp.conj(tau[..., j]) if conjugate else tau[..., j]
        new_y = P.apply_reflector(t, v, y, j)
        terms = [] if dy is None else [P.apply_reflector(t, v, dy, j)]
        vh_y = jnp.conj(v)[..., None, :] @ y
        if ttau is not None:
            dt = jnp.conj(ttau[..., j]) if conjugate else ttau[..., j]
            terms.append(-dt[..., None, None] * (v[..., :, None] * vh_y))
        if ta is not None:
            dv = P.reflector(ta, j) - P.with_rank(jnp.where(jnp.arange(v.shape[-1]) == j, 1, 0).astype(v.dtype), v.ndim)
            dvh_y = jnp.conj(dv)[..., None, :] @ y
            terms.append(-t[..., None, None] * (dv[..., :, None] * vh_y + v[..., :, None] * dvh_y))
        y, dy = new_y, (_terms(*terms) if terms else None)
    return dy


def householder_product_jvp(res, ta, ttau, **_):
    """Seed ``householder_product_jvp``: ``dQ = sum_i H_1..H_{i-1} dH_i H_{i+1}..H_k`` (first n
    columns), by the product rule along ``Q = H_1 (H_2 (... (H_k I_{m x n})))``."""
    a, tau, _ = res
    m, n = a.shape[-2:]
    eye = jnp.broadcast_to(jnp.eye(m, n, dtype=a.dtype), a.shape)
    return _reflector_jvp(a, tau, eye, ta, ttau, None, P.reflector_sequence(a, tau, adjoint=False, reverse=True))


def ormqr_jvp(res, ta, ttau, tc, *, left, transpose):
    """``d(op(Q) C)`` (seed: the derivative ``ormqr_backward`` transposes): the product rule
    along the reflectors applied to C; ``C op(Q) = (op(Q)^H C^H)^H``."""
    a, tau, c, _ = res
    if left:
        steps = P.reflector_sequence(a, tau, adjoint=transpose, reverse=not transpose)
        return _reflector_jvp(a, tau, c, ta, ttau, tc, steps)
    steps = P.reflector_sequence(a, tau, adjoint=not transpose, reverse=transpose)
    return _mH(_reflector_jvp(a, tau, _mH(c), ta, ttau, None if tc is None else _mH(tc), steps))


# ----------------------------------------------------------------------------------------------
# FFT (linear: the tangent goes through the same transform)


def fft_jvp(_, t, *, kind, sizes, axes, norm, shape):
    """The transform of the tangent (seed: fft_r2c / fft_c2r / fft_c2c are linear)."""
    return P.fft_apply(kind, t, sizes, axes, norm)


# ----------------------------------------------------------------------------------------------
# Indexing


def embedding_jvp(res, ti, tw, *, padding_idx, scale_grad_by_freq, num):
    """``dW[indices]`` with the ``padding_idx`` rows zero (seed
    ``embedding_dense_double_backward``); with ``scale_grad_by_freq`` each row is divided by
    its index's count (the transpose of torch's scaled backward)."""
    weights = P.embedding_row_weights(res, padding_idx, scale_grad_by_freq, num, tw.real.dtype)
    return jnp.take(tw, res, axis=0) * weights[..., None]


def scatter_reduce_jvp(res, tx, ti, tsrc, *, axis, reduce, include_self):
    """Seed ``scatter_reduce_jvp`` (sum, mean: the scatter of the tangents; amax/amin: ties
    share evenly) and, for prod (which torch leaves undefined), the product rule with zero-safe
    products of the other members."""
    x_weight, src_weight, coords = P.scatter_reduce_weights(res, axis=axis, reduce=reduce, include_self=include_self)
    return _terms(
        None if tx is None else tx * x_weight,
        None if tsrc is None else P.scatter_add(x_weight.shape, coords, tsrc * src_weight),
    )


# ----------------------------------------------------------------------------------------------
# Shape and indexing (linear maps: the op applied to the tangents)


def _present_dtype(tangents):
    return next(t.dtype for t in tangents if t is not None)


def concatenate_jvp(_, *tangents, axis, shapes):
    """The tangents concatenated (zeros for absent ones)."""
    dtype = _present_dtype(tangents)
    return jnp.concatenate([jnp.zeros(s, dtype) if t is None else t for t, s in zip(tangents, shapes)], axis=axis)


def stack_jvp(_, *tangents, axis, shape):
    """The tangents stacked (zeros for absent ones)."""
    dtype = _present_dtype(tangents)
    return jnp.stack([jnp.zeros(shape, dtype) if t is None else t for t in tangents], axis=axis)


def take_along_axis_jvp(indices, tx, _, *, axis, shape):
    """``take_along_axis(dx, indices)``."""
    return jnp.take_along_axis(tx, indices, axis=axis)


def masked_fill_jvp(mask, tx, _, **__):
    """``dx`` where the mask is false, 0 under it."""
    return jnp.where(mask, 0, tx)


def pad_jvp(_, tx, *, widths, value):
    """``pad(dx)`` (zero fill; a negative width crops)."""
    return jax.lax.pad(tx, jnp.zeros((), tx.dtype), [(lo, hi, 0) for lo, hi in widths])


def split_jvp(_, tx, *, axis, sizes):
    """The tangent split like ``x``."""
    return tuple(jnp.split(tx, list(itertools.accumulate(sizes))[:-1], axis=axis))


def unstack_jvp(_, tx, *, axis):
    """The tangent unstacked along ``axis``."""
    return tuple(jnp.moveaxis(tx, axis, 0))


def block_diag_jvp(_, *tangents, shapes):
    """``block_diag`` of the tangents (zero blocks for absent ones)."""
    dtype = _present_dtype(tangents)
    return jax.scipy.linalg.block_diag(*(jnp.zeros(s, dtype) if t is None else t for t, s in zip(tangents, shapes)))


def tile_jvp(_, tx, *, reps, shape):
    """``tile(dx, reps)``."""
    return jnp.tile(tx, reps)


def repeat_jvp(_, tx, *, counts, axis):
    """``repeat(dx, counts, axis)``."""
    return P.repeat_along(tx, counts, axis)


def take_jvp(indices, tx, _, *, axis, shape):
    """``take(dx, indices, axis)`` (``axis`` unsharded first under an ``Explicit`` mesh)."""
    return jnp.take(unsharded_along(tx, (axis,)), indices, axis=axis)


def value_selection_jvp(idx, tx, *, axis, keepdims, **_):
    """The tangent read at the selected index (seed ``value_selecting_reduction_jvp``); the
    indices have no tangent."""
    picked = jnp.take_along_axis(tx, idx, axis=axis)
    return (picked if keepdims else jnp.squeeze(picked, axis)), None


# ----------------------------------------------------------------------------------------------
# Convolution and pooling


def convolution_jvp(res, tx, tw, tb, *, stride, padding, dilation, groups):
    """Seed ``convolution_jvp``: ``conv(dx, w) + conv(x, dw) + db``."""
    x, w = res
    terms = []
    if tx is not None:
        terms.append(P.conv(tx, w, stride, padding, dilation, groups))
    if tw is not None:
        terms.append(P.conv(x, tw, stride, padding, dilation, groups))
    out = _terms(*terms) if terms else 0
    return out if tb is None else out + P.bias_view(tb, x.ndim)


def conv_transpose_jvp(res, tx, tw, tb, *, stride, padding, dilation, groups):
    """Seed ``convolution_jvp`` with ``transposed=true``: ``conv_transpose(dx, w) +
    conv_transpose(x, dw) + db``."""
    x, w = res
    terms = []
    if tx is not None:
        terms.append(P.conv_transpose(tx, w, stride, padding, dilation, groups))
    if tw is not None:
        terms.append(P.conv_transpose(x, tw, stride, padding, dilation, groups))
    out = _terms(*terms) if terms else 0
    return out if tb is None else out + P.bias_view(tb, x.ndim)


def unfold_jvp(_, tx, *, kernel, stride, padding, dilation, spatial):
    """unfold (im2col) is linear: the unfolded tangent."""
    return P.unfold(tx, kernel, stride, padding, dilation)


def fold_jvp(_, tx, *, kernel, stride, padding, dilation, spatial):
    """fold (col2im) is linear: the folded tangent."""
    return P.fold(tx, spatial, kernel, stride, padding, dilation)


def max_pool_jvp(element, tx, *, kernel, stride, padding, dilation, shape):
    """The tangent read at the argmax (seed ``max_pool_double_backward``'s gather), as the
    tangent's windows read at the argmax's window element ``element`` (``partials.window_read``:
    no gather); the window elements have no tangent."""
    return P.window_read(tx, element, kernel, stride, padding, dilation), None


def adaptive_max_pool_jvp(index, tx, *, shape, **_):
    """The tangent read at the argmax (seed ``max_pool_double_backward``'s gather; adaptive windows
    differ in size, so a gather); the indices have no tangent."""
    return P.pool_flat_gather(tx, index), None


def avg_pool_jvp(_, tx, *, kernel, stride, padding, count_include_pad, divisor_override, shape):
    """Average pooling is linear: the pooled tangent (derivatives.yaml: ``result: auto_linear``)."""
    return P.avg_pool(tx, kernel, stride, padding, count_include_pad, divisor_override)


def adaptive_avg_pool_jvp(_, tx, *, output_size, shape):
    """Adaptive average pooling is linear: the pooled tangent (``result: auto_linear``)."""
    return P.adaptive_avg_pool(tx, output_size)


def layer_norm_rows_jvp(res, tx, tw, tb, *, eps, launch):
    """Layer norm over the last axis with the affine inside (the fused kernel's op), for the
    outputs ``(y, mean, rstd)``: ``dmean = E[dx]``, ``drstd = -rstd^2 E[x_hat dx]``,
    ``dy = rstd (dx - dmean - x_hat E[x_hat dx]) w + x_hat dw + db`` (seed ``layer_norm_jvp``)."""
    x, w, mean, rstd = res
    stat = rstd.dtype
    xhat = (x.astype(stat) - mean[:, None]) * rstd[:, None]
    dy, dmean, drstd = [], 0, 0
    if tx is not None:
        t = tx.astype(stat)
        dmean, c = t.mean(-1), (xhat * t).mean(-1)
        dy.append(rstd[:, None] * (t - dmean[:, None] - xhat * c[:, None]) * P.with_rank(w.astype(stat), t.ndim))
        drstd = -rstd * rstd * c
    if tw is not None:
        dy.append(xhat * P.with_rank(tw.astype(stat), x.ndim))
    if tb is not None:
        dy.append(jnp.broadcast_to(tb.astype(stat), x.shape))
    return _terms(*dy), dmean, drstd


# ----------------------------------------------------------------------------------------------
# Sorting (sort, topk, cummax/cummin, nanmedian, quantile)


def sort_jvp(idx, tx, *, axis, **_):
    """The tangent read at the selected indices, ``gather(t, axis, idx)`` (seed sort's and
    topk's ``gather_with_keepdimed_indices``); the indices have no tangent. sort and topk."""
    return jnp.take_along_axis(tx, idx, axis=axis), None


# cummax/cummin's forward formula in derivatives.yaml, ``t.gather(axis, indices)`` (the transpose
# of ``cummaxmin_backward``), is sort's.
cummaxmin_jvp = sort_jvp


def quantile_jvp(res, tx, **_):
    """``(1 - w) t[lo] + w t[hi]`` along the last axis: torch's quantile is ``lerp`` of two sorted
    entries with a weight that depends on ``q`` and the count only (seed: the derivatives of
    ``sort`` and ``lerp`` that torch's composite quantile chains); the indices have no tangent.
    quantile and nanmedian."""
    lo, hi, w = res
    tx = unsharded_along(tx, (tx.ndim - 1,))  # an Explicit mesh: reads along the axis
    return (1 - w) * jnp.take_along_axis(tx, lo, axis=-1) + w * jnp.take_along_axis(tx, hi, axis=-1), None


# ----------------------------------------------------------------------------------------------
# The fused linear + cross-entropy head (its chunked passes in ``partials.losses``)

def linear_cross_entropy_jvp(res, *tangents, reduction, ignore_index, label_smoothing, z_loss, chunk, has_bias,
                             has_class_weight):
    """``d loss_t = a_t <p_t, dl_t> - b_t dl_t[target] - e_t <w, dl_t>`` (``P.lce_coefficients``)
    and ``d lse_t = <p_t, dl_t>`` for the logits' tangent ``dl = dx W^T + x dW^T + db``, over the
    vocabulary's chunks, reduced as the loss (seeds ``_log_softmax_backward_data``,
    ``nll_loss_backward``; the class weights are held fixed)."""
    x, weight, target, bias, class_weight, lse = res
    tx, tw, _, tb, _ = P.lce_unpack(tangents, has_bias, has_class_weight)
    if tx is None and tw is None and tb is None:
        return None, None
    vocab = weight.shape[0]
    d_lse, d_target, d_weighted = P.lce_tangent(x, weight, bias, target, class_weight, lse, tx, tw, tb, chunk=chunk,
                                                smoothing=label_smoothing)
    a, b, e = P.lce_coefficients(target, class_weight, lse, vocab=vocab, ignore_index=ignore_index,
                                 smoothing=label_smoothing, z_loss=z_loss)
    d_loss = a * d_lse - b * d_target
    if e is not None:
        d_loss = d_loss - e * d_weighted
    return P.lce_per_token(d_loss, target, class_weight, vocab=vocab, ignore_index=ignore_index,
                           reduction=reduction), d_lse
