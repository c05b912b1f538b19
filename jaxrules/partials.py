"""Partial derivatives shared by the JVP formulas (``jvp_rules``) and the VJP formulas
(``vjp_rules``): each helper computes, from the residuals, the factor that both formulas apply
(one to a tangent, the other to a cotangent), so the two formulas cannot drift apart.

Every helper is branch-free (masks, not ``if``) so it works under jit and vmap, and uses the
double-``where`` guard so that JAX's derivative of the helper (second order) has no NaN at the
masked points.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrules.checking import runtime_check
from jaxrules.mechanism import explicit_sharding

# ----------------------------------------------------------------------------------------------
# Small guards.


def safe_reciprocal(x, zero_at):
    """``1/x`` where ``zero_at`` is false, exactly 0 where it is true (double-where guard)."""
    return jnp.where(zero_at, 0, 1 / jnp.where(zero_at, 1, x))


def sgn(x):
    """torch.sgn: ``x/|x|`` (complex) or ``sign(x)`` (real); 0 at 0."""
    if not jnp.iscomplexobj(x):
        return jnp.sign(x)
    mag = jnp.abs(x)
    return x * safe_reciprocal(mag, mag == 0)


def expand_reduced(g, shape, axis, keepdims):
    """Broadcast a reduction's output-shaped array back to the input ``shape`` (torch's
    ``unsqueeze_multiple`` + ``expand``, seed ``sum_backward``). ``axis`` is a normalized tuple."""
    if not keepdims:
        g = jnp.expand_dims(g, axis)
    return jnp.broadcast_to(g, shape)


def reduced_size(shape, axis):
    """Number of elements folded into each output element (seed ``_safe_size``)."""
    return math.prod(shape[a] for a in axis)


# ----------------------------------------------------------------------------------------------
# Linear recurrences h_k = a_k h_{k-1} + b_k (h_{-1} = 0), used by cumprod and logcumsumexp.


def _compose(left, right):
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a2 * b1 + b2


def linear_recurrence(a, b, axis):
    """Solve ``h_k = a_k h_{k-1} + b_k`` along ``axis`` with an associative scan (no division,
    so zeros in ``a`` are exact)."""
    dtype = jnp.result_type(a, b)
    return lax.associative_scan(_compose, (a.astype(dtype), b.astype(dtype)), axis=axis)[1]


def linear_recurrence_transpose(a, ct, axis):
    """Transpose of ``b -> linear_recurrence(a, b)``: ``s_k = ct_k + a_{k+1} s_{k+1}``."""
    n = a.shape[axis]
    shifted = jnp.concatenate(
        [lax.slice_in_dim(a, 1, n, axis=axis), jnp.zeros_like(lax.slice_in_dim(a, 0, 1, axis=axis))],
        axis=axis,
    )
    dtype = jnp.result_type(a, ct)
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
    is the same tree; the two associative scans this replaced were 2x slower on the H100)."""
    if not axis:
        return jnp.ones_like(x)
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
    e = jnp.exp(jnp.where(finite, x - jnp.where(finite, m, 0), at_limit))
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
        return x * safe_reciprocal(n, n == 0)
    mag = jnp.abs(x)
    if ord in (math.inf, -math.inf):
        return sgn(x) * even_weights(mag, norm, axis, keepdims)
    zero = mag == 0
    safe_mag = jnp.where(zero, 1, mag)
    safe_n = jnp.where(n == 0, 1, n)
    scale = jnp.where(zero | (n == 0), 0, (safe_mag / safe_n) ** (ord - 1))
    return sgn(x) * scale


def real_inner(w, t, axis, keepdims):
    """``Re sum(conj(w) t)`` over ``axis``."""
    prod = jnp.conj(w) * t if jnp.iscomplexobj(w) else w * t
    return jnp.sum(prod.real if jnp.iscomplexobj(prod) else prod, axis=axis, keepdims=keepdims)


# ----------------------------------------------------------------------------------------------
# Elementwise factors.


def _ops():
    """The elementwise ops, for factors whose own derivative must follow jaxrules' conventions
    (imported late: the ops import this module)."""
    from jaxrules.ops import elementwise

    return elementwise


def sgn_parts(x):
    """``(sgn(x), 1/(2|x|))`` with both 0 at x = 0 (complex ``sgn_backward``)."""
    mag = jnp.abs(x)
    return x * safe_reciprocal(mag, mag == 0), 0.5 * safe_reciprocal(mag, mag == 0)


def abs2_reciprocal(x):
    """``1/|x|^2``, 0 at x = 0."""
    mag2 = (x * jnp.conj(x)).real
    return safe_reciprocal(mag2, mag2 == 0)


def arctan2_factors(y, x):
    """``(x, -y) / (x^2 + y^2)``, both 0 at (0, 0) (the zero subgradient; the seed's
    ``atan2_backward`` gives NaN there, torch 2.13's VJP 0 and its JVP NaN)."""
    d = x * x + y * y
    inv = safe_reciprocal(d, d == 0)
    return x * inv, -y * inv


def pow_scalar_exponent_factor(x, exponent):
    """``e x^(e-1)``, exactly 0 when e = 0 (seed ``pow_backward``: avoids ``0 * inf``)."""
    if exponent == 0:
        return jnp.zeros_like(x)
    return exponent * _ops().power(x, exponent - 1)


def pow_base_factor(x, y):
    """``y x^(y-1)``, 0 where y = 0 (seed ``pow_backward_self``)."""
    zero = y == 0
    y_safe = jnp.where(zero, 1, y)
    return jnp.where(zero, 0, y_safe * _ops().power(x, y_safe - 1))


def pow_exponent_factor(x, y, out):
    """``x^y log(x)``, 0 where x = 0 and y >= 0 (real part of y for complex y with zero imaginary
    part; seed ``pow_backward_exponent``)."""
    if jnp.iscomplexobj(y):
        nonneg = (y.imag == 0) & (y.real >= 0)
    else:
        nonneg = y >= 0
    mask = (x == 0) & nonneg
    x_safe = jnp.where(mask, 1, x)
    log_x = jnp.log(x_safe.astype(out.dtype) if jnp.iscomplexobj(out) else x_safe)
    return jnp.where(mask, 0, out * log_x)


def copysign_factor(x, y):
    """``copysign(x, y) / x``: +-1, 0 where x = 0, NaN where x is NaN (seed
    ``copysign_tensor_self_backward``; +-1 at x = +-inf, where the seed's ratio is inf/inf = NaN)."""
    same = jnp.signbit(x) == jnp.signbit(y)
    factor = jnp.where(x == 0, 0, jnp.where(same, 1.0, -1.0))
    return jnp.where(jnp.isnan(x), jnp.nan, factor).astype(jnp.result_type(x, y))


def sinc_derivative(x):
    """``d sinc / dx = (cos(pi x) - sinc(x)) / x``; the Taylor series
    ``-pi^2 x/3 + pi^4 x^3/30`` for ``|pi x| < 1e-2`` (no cancellation; 0 at 0)."""
    small = jnp.abs(math.pi * x) < 1e-2
    x_safe = jnp.where(small, 1, x)
    exact = (jnp.cos(math.pi * x_safe) - jnp.sinc(x_safe)) / x_safe
    series = -(math.pi**2) * x / 3 + math.pi**4 * x**3 / 30
    return jnp.where(small, series, exact)


def clip_masks(x, lo, hi):
    """Which of ``x, lo, hi`` the output follows (seed ``clamp_jvp``'s selection): ``hi`` when
    lo > hi, else ``lo`` when x < lo, ``hi`` when x > hi, else ``x`` when lo <= x <= hi (ties go
    to x). None of them where x or the bound it is compared with is NaN (seed
    ``clamp_backward_min_max``: the output is NaN, every gradient 0)."""
    # jnp's logical ops, not ``~``/``&``: under jit a scalar bound may be a Python bool here,
    # and ``~False == -1``.
    crossed = jnp.greater(lo, hi)
    below = jnp.logical_and(jnp.logical_not(crossed), jnp.less(x, lo))
    above = jnp.logical_or(crossed, jnp.greater(x, hi))
    inside = jnp.logical_and(jnp.greater_equal(x, lo), jnp.less_equal(x, hi))
    return inside, below, jnp.logical_and(above, jnp.logical_not(below))


def logit_factor(x, eps):
    """``1/(x(1 - x))`` inside ``[eps, 1 - eps]`` (0 outside); with ``eps=None`` inside
    ``[0, 1]`` (NaN outside) — seed ``infinitely_differentiable_logit_backward``."""
    lo, hi, outside = (0.0, 1.0, jnp.nan) if eps is None else (eps, 1 - eps, 0.0)
    inside = (x >= lo) & (x <= hi)
    x_safe = jnp.where(inside, x, 0.5)
    return jnp.where(inside, 1 / (x_safe * (1 - x_safe)), outside)


def _bessel_ratio(x, i1x):
    """``i1(x)/x`` (or ``i1e(x)/x``) with its limit 1/2 at 0."""
    zero = x == 0
    return jnp.where(zero, 0.5, i1x / jnp.where(zero, 1, x))


def i1_factor(x, out):
    """``i0(x) - i1(x)/x``; 1/2 at 0 (torch ``i1_backward``)."""
    from jax.scipy import special

    return special.i0(x) - _bessel_ratio(x, out)


def i1e_factor(x, out):
    """``i0e(x) - i1e(x) (sign(x) + 1/x)``; 1/2 at 0 (torch ``i1e_backward``)."""
    from jax.scipy import special

    return special.i0e(x) - jnp.sign(x) * out - _bessel_ratio(x, out)


def multigammaln_factor(a, d):
    """``sum_{i<d} digamma(a - i/2)`` (seed ``mvlgamma_backward``)."""
    from jax.scipy import special

    return sum(special.digamma(a - i / 2) for i in range(d))


def xlogy_factors(x, y):
    """``(xlogy(x != 0, y), x / y)``, both 0 where x = 0 (x log y is identically 0 there)."""
    zero = x == 0
    y_safe = jnp.where(zero, 1, y)
    return jnp.where(zero, 0, jnp.log(y_safe)), jnp.where(zero, 0, x / y_safe)


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
    count_prev = count - hits
    safe_count = jnp.where(count == 0, 1, count)
    a_inf = jnp.where(re(y_prev) == re(y), count_prev / safe_count, 0).astype(x.dtype)
    b_inf = (hits / safe_count).astype(x.dtype)
    return jnp.where(finite, a_soft, a_inf), jnp.where(finite, b_soft, b_inf)


def renorm_scale(norm, maxnorm):
    """``(s, ds/dnorm, norm > maxnorm)`` with ``s = maxnorm / (norm + 1e-7)`` (seed
    ``renorm_backward``)."""
    inv = 1 / (norm + 1e-7)
    return maxnorm * inv, -maxnorm * inv * inv, norm > maxnorm


# ----------------------------------------------------------------------------------------------
# Normalization: x_hat = (x - mean) * rstd over ``axes`` (and over the devices of ``axis_name``).
# Statistics are computed in float32 for half-precision input, as torch does.


def stat_dtype(dtype):
    """float32 for float16/bfloat16, else the dtype itself."""
    return jnp.float32 if jnp.dtype(dtype).itemsize < 4 else dtype


def group_mean(v, axes, axis_name):
    """Mean over ``axes`` (kept), and over the devices of ``axis_name`` when given."""
    m = jnp.mean(v, axis=axes, keepdims=True)
    return m if axis_name is None else lax.pmean(m, axis_name)


def norm_stats(x, axes, eps, axis_name):
    """``(mean, rstd)`` with the biased variance (torch's saved statistics), in ``stat_dtype``.

    Each device's ``(mean, var)`` comes, on a GPU, from one pass over x (``welford_moments``:
    XLA then reads x once for them instead of twice, 1.1-1.2x faster forward+backward on an H100,
    ``benchmarks/RESULTS.md``), elsewhere from two (the mean, then the centered mean square:
    faster on a CPU); across the devices of ``axis_name`` they merge as Chan et al.'s parallel
    variance, ``var = E_dev[var_d + (mean_d - mean)^2]`` (equal counts per device)."""
    xf = x.astype(stat_dtype(x.dtype))
    one_pass = functools.partial(welford_moments, axes=axes)
    mean, var = lax.platform_dependent(xf, cuda=one_pass, rocm=one_pass,
                                       default=functools.partial(_two_pass_moments, axes=axes))
    if axis_name is not None:
        local_mean = mean
        mean = lax.pmean(local_mean, axis_name)
        var = lax.pmean(var + jnp.square(local_mean - mean), axis_name)
    return mean, lax.rsqrt(var + eps)


def _two_pass_moments(x, axes):
    """``(mean, biased var)`` over ``axes`` (kept): the mean, then the centered mean square."""
    mean = jnp.mean(x, axis=axes, keepdims=True)
    return mean, jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def welford_moments(x, axes):
    """``(mean, biased var)`` over ``axes`` (kept) in one read of x: one variadic reduction of
    (count, mean, M2) triples merged as Chan et al. (``M2 = Ma + Mb + d^2 na nb / n``, ``d = mb -
    ma``; torch's GPU kernels use Welford too), over x minus the group's first element (without
    the shift a float32 mean near 4096 costs 3e-4 of the variance; with it the relative error is
    ~1e-5 at worst, ``tests/test_norm_stats.py``, against ~1e-7 for two passes). An empty group
    gives NaN for both, as ``jnp.mean``. Derivatives (JAX cannot differentiate a variadic
    reduction): ``d mean = E[dx]``, ``d var = 2 E[(x - mean) dx]``."""
    axes = tuple(a % x.ndim for a in axes)
    shift = _first_of_group(x, axes)

    def merge(a, b):
        (na, ma, sa), (nb, mb, sb) = a, b
        n = na + nb
        frac = jnp.where(n > 0, nb / jnp.where(n > 0, n, 1), 0)
        delta = mb - ma
        return n, ma + delta * frac, sa + sb + delta * delta * na * frac

    zero = jnp.zeros((), x.dtype)
    n, mean, m2 = lax.reduce((jnp.ones_like(x), x - shift, jnp.zeros_like(x)), (zero, zero, zero), merge, axes)
    kept = tuple(1 if a in axes else d for a, d in enumerate(x.shape))
    mean = jnp.where(n > 0, mean, jnp.nan).reshape(kept) + shift
    return mean, (m2 / n).reshape(kept)


@welford_moments.defjvp
def _welford_moments_jvp(axes, primals, tangents):
    (x,), (dx,) = primals, tangents
    mean, var = welford_moments(x, axes)
    dmean = jnp.mean(dx, axis=axes, keepdims=True)
    return (mean, var), (dmean, 2 * jnp.mean((x - mean) * dx, axis=axes, keepdims=True))


def norm_projection_eps_partial(x, g, eps, axes, axis_name):
    """``dB(g)/deps`` of the normalization's backward ``B(g) = rstd (g - E[g] - x_hat E[g
    x_hat]) = rstd (g - E[g]) - rstd^3 (x - mean) E[g (x - mean)]``, ``rstd = rsqrt(var + eps)``:
    ``((g - E[g]) - 3 rstd^2 (x - mean) E[g (x - mean)]) (-rstd^3 / 2)``, statistics from x."""
    mean, rstd = norm_stats(x, axes, eps, axis_name)
    xm = x.astype(rstd.dtype) - mean
    g = g.astype(rstd.dtype)
    e = lambda v: group_mean(v, axes, axis_name)  # noqa: E731
    return ((g - e(g)) - 3 * rstd * rstd * xm * e(g * xm)) * (-0.5 * rstd * rstd * rstd)


def affine_norm_backward(xhat, rstd, gw, g_mean, g_rstd, axes):
    """dx of ``y = x_hat w + b`` with the statistics as outputs too, ``gw = g w`` and every
    per-group value kept along ``axes``: ``rstd (gw - E[gw] - x_hat E[gw x_hat]) + (g_mean -
    g_rstd rstd^2 x_hat) / count`` (the native backward with weight plus the statistics'
    cotangents; the fused norm kernels compute it, their reference VJPs call this)."""
    count = math.prod(xhat.shape[a] for a in axes)
    dx = rstd * (gw - gw.mean(axes, keepdims=True) - xhat * (gw * xhat).mean(axes, keepdims=True))
    return dx + (g_mean - g_rstd * rstd * rstd * xhat) / count


def softmax_parts(x, axis):
    """``(e, s)``: ``e = exp(x - max x)`` and ``s = sum e`` over ``axis`` (kept), softmax = e / s.
    The shift is a constant for differentiation (softmax does not depend on it)."""
    e = jnp.exp(x - lax.stop_gradient(max_or_neg_inf(x, axis)))
    return e, jnp.sum(e, axis=axis, keepdims=True)


def masked_softmax_parts(x, mask, axis):
    """``(e, s)`` of the softmax over the entries where ``mask`` (jax.nn's ``where=``): ``e =
    exp(x - max x)`` there and 0 elsewhere, ``s = sum e`` (kept axes), 1 where no entry is
    included (softmax 0 there, as JAX's; log_softmax -inf). The shift is a constant."""
    xs = jnp.where(mask, x, -jnp.inf)
    m = jnp.max(xs, axis=axis, keepdims=True, initial=-jnp.inf)
    m = lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0))
    e = jnp.where(mask, jnp.exp(xs - m), 0)
    s = jnp.sum(e, axis=axis, keepdims=True)
    return e, jnp.where(jnp.any(mask, axis=axis, keepdims=True), s, 1)


def groups_first(x3, layout, groups):
    """(N, C, L) as (P, K, L): P statistic groups of K rows. ``layout`` ``"group"``: P = N G,
    K = C / G (group norm); ``"batch"``: P = C, K = N (batch norm)."""
    if layout == "group":
        return x3.reshape(x3.shape[0] * groups, x3.shape[1] // groups, x3.shape[2])
    return jnp.swapaxes(x3, 0, 1)


def groups_last(u, layout, shape):
    """The inverse of ``groups_first``: (P, K, L) back to ``shape`` (N, C, L)."""
    return u.reshape(shape) if layout == "group" else jnp.swapaxes(u, 0, 1)


def rows_to_samples(rows, layout, n):
    """Per-row values (P, K) as per (sample, channel) values (N, C)."""
    return rows.reshape(n, -1) if layout == "group" else rows.T


def channel_rows(v, layout, groups, n):
    """A per-channel vector (C,) as per-row values (P, K)."""
    if layout == "group":
        return jnp.tile(v.reshape(groups, -1), (n, 1))
    return jnp.broadcast_to(v[:, None], (v.shape[0], n))


def norm_projection(x, mean, rstd, v, axes, axis_name):
    """``rstd (v - E[v] - x_hat E[v x_hat])``: both the JVP of x -> x_hat (seed ``_norm_jvp`` with
    ``_invstd_jvp``) and its transpose (the native backward without weight), since the operator
    is symmetric. Computed in the statistics' dtype.

    ``E[v x_hat]`` is summed over shifted data, ``rstd (E[v (x - s)] - (mean - s) E[v])`` with
    ``s`` the group's first element (on each device): exact in exact arithmetic for any ``s``;
    the sums do not wait for the statistics, so XLA computes them in the pass that reads x for
    the statistics or for dx (1.3-1.9x faster on an H100 than summing ``v x_hat``,
    ``benchmarks/RESULTS.md``). torch's kernels sum over unshifted x (``s = 0``), which cancels
    when ``|mean| >> std``; with the shift only ``|mean - s| / std`` matters."""
    stat = rstd.dtype
    v, xs = v.astype(stat), x.astype(stat)
    shift = lax.stop_gradient(_first_of_group(xs, axes))
    mean_v = jnp.mean(v, axes, keepdims=True)
    centered = jnp.mean(v * (xs - shift), axes, keepdims=True) - (mean - shift) * mean_v  # E[v (x - mean)]
    if axis_name is not None:  # each device's shift is undone before the devices' means are taken
        mean_v, centered = lax.pmean((mean_v, centered), axis_name)
    xhat = (xs - mean) * rstd
    return rstd * (v - mean_v - xhat * (rstd * centered))


def _first_of_group(x, axes):
    """x at index 0 of each of ``axes`` (kept, so it broadcasts against x); 0 when x is empty."""
    if x.size == 0:
        return jnp.zeros((), x.dtype)
    axes = {a % x.ndim for a in axes}
    sharding = explicit_sharding(x)
    spec = (() if sharding is None else tuple(sharding.spec)) + (None,) * x.ndim
    sharded = tuple(a for a in sorted(axes) if spec[a] is not None)
    first = x[tuple(slice(0, 1) if a in axes and a not in sharded else slice(None) for a in range(x.ndim))]
    if not sharded:
        return first
    # An Explicit mesh refuses to slice a sharded axis: there the first element is picked by a
    # masked sum instead (elementwise, then a reduction, as the statistics are).
    at_zero = functools.reduce(jnp.logical_and, [lax.broadcasted_iota(np.int32, first.shape, a) == 0 for a in sharded])
    return jnp.sum(jnp.where(at_zero, first, jnp.zeros((), x.dtype)), axis=sharded, keepdims=True)


def rms_rstd(x, axes, eps):
    """``rsqrt(E[x^2] + eps)`` over ``axes`` (kept), in ``stat_dtype`` (torch's ``rms_norm``)."""
    xf = x.astype(stat_dtype(x.dtype))
    return lax.rsqrt(jnp.mean(jnp.square(xf), axis=axes, keepdims=True) + eps)


def rms_projection_eps_partial(x, v, eps, axes):
    """``dB(v)/deps`` of the RMS normalization's backward ``B(v) = rstd (v - x_hat E[v x_hat]) =
    rstd v - rstd^3 x E[v x]``, ``rstd = rsqrt(E[x^2] + eps)``: ``(v - 3 rstd^2 x E[v x])
    (-rstd^3 / 2)``, rstd from x."""
    rstd = rms_rstd(x, axes, eps)
    xs, v = x.astype(rstd.dtype), v.astype(rstd.dtype)
    return (v - 3 * rstd * rstd * xs * jnp.mean(v * xs, axis=axes, keepdims=True)) * (-0.5 * rstd * rstd * rstd)


def rms_projection(x, rstd, v, axes):
    """``rstd (v - x_hat E[v x_hat])`` with ``x_hat = x rstd``: both the JVP of x -> x_hat for
    the RMS norm and its transpose (the operator is symmetric), as ``norm_projection`` without
    the mean. Computed in the statistics' dtype, as ``rstd v - rstd^3 x E[v x]``: the row sum
    ``E[v x]`` does not wait for ``rstd``, so XLA computes it in the pass that reads x for the
    statistics (on the H100, ``E[v x_hat]`` cost a pass: 0.85x of plain JAX at 16384x4096)."""
    stat = rstd.dtype
    xs, v = x.astype(stat), v.astype(stat)
    return rstd * v - (rstd * rstd * rstd) * xs * jnp.mean(v * xs, axis=axes, keepdims=True)


# ----------------------------------------------------------------------------------------------
# Activations: d f / dx from the saved input (seed ``infinitely_differentiable_*_backward``).
# Where torch's double backward uses a strict mask that its first derivative does not (elu
# family and softplus at their kinks), the value at the kink is wrapped in ``stop_gradient`` so
# that the second derivative there is torch's 0.


def _kink(x, at, value_below, value_above, value_at):
    """``value_below`` for x < at, ``value_above`` for x > at, ``value_at`` (with zero derivative)
    at x == at."""
    return jnp.where(x < at, value_below, jnp.where(x == at, lax.stop_gradient(value_at), value_above))


def silu_derivative(x):
    """``s (1 + x (1 - s))``, ``s = sigmoid(x)`` (seed ``infinitely_differentiable_silu_backward``)."""
    s = jax.nn.sigmoid(x)
    return s * (1 + x * (1 - s))








def hardsigmoid_derivative(x):
    """1/6 for -3 < x < 3, else 0 (torch's ``hardsigmoid_backward``: 0 at +-3)."""
    return jnp.where((x > -3) & (x < 3), 1 / 6, 0).astype(x.dtype)


def hardswish_derivative(x):
    """0 for x <= -3, ``x/3 + 1/2`` for -3 < x < 3, 1 for x >= 3 (torch 2.13's
    ``hardswish_backward``: 0 at -3, 1 at 3); second derivative 1/3 strictly inside (-3, 3)."""
    return jnp.where(x <= -3, 0, jnp.where(x >= 3, 1, x / 3 + 0.5)).astype(x.dtype)




def mish_derivative(x):
    """``tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2)``, ``sp = softplus(x)`` computed stably, so the
    second derivative is finite at large x (torch: NaN at 800; seed
    ``infinitely_differentiable_mish_backward``)."""
    tsp = jnp.tanh(jax.nn.softplus(x))
    return tsp + x * jax.nn.sigmoid(x) * (1 - tsp * tsp)


def gelu_derivative(x, approximate):
    """Exact: ``Phi(x) + x phi(x)``. Tanh: ``0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u'``,
    ``u = sqrt(2/pi)(x + 0.044715 x^3)`` (torch ``gelu_backward``; its double backward is
    ``gelu_double_backward``)."""
    if approximate:
        k = math.sqrt(2 / math.pi)
        u = k * (x + 0.044715 * x**3)
        th = jnp.tanh(u)
        return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * 0.044715 * x * x)
    cdf = 0.5 * (1 + lax.erf(x / math.sqrt(2)))
    pdf = jnp.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return cdf + x * pdf


def elu_derivatives(x, alpha, scale, celu):
    """``(d/dx, d/dalpha)`` of ``scale x`` (x > 0), ``scale alpha (exp(x / a) - 1)`` (x <= 0),
    ``a = alpha`` for celu, 1 for elu and selu. d/dx: ``scale`` for x > 0, ``scale (alpha / a)
    exp(x / a)`` for x <= 0 (torch's ``elu_backward``: the alpha branch at 0), with torch's
    second derivative 0 at 0 (seed ``elu_double_backward``'s strict mask). d/dalpha: 0 for
    x > 0; ``scale (exp(x) - 1)`` (elu) or ``exp(x / alpha) - 1 - (x / alpha) exp(x / alpha)``
    (celu) for x <= 0 (continuous: 0 at x = 0)."""
    neg_x = jnp.minimum(x, 0)
    if celu:
        u = neg_x / alpha
        e = jnp.exp(u)
        dx = _kink(x, 0.0, scale * e, scale, jnp.asarray(scale, x.dtype))
        dalpha = jnp.where(x > 0, 0, scale * (jnp.expm1(u) - u * e))
    else:
        dx = _kink(x, 0.0, scale * alpha * jnp.exp(neg_x), scale, scale * alpha)
        dalpha = jnp.where(x > 0, 0, scale * jnp.expm1(neg_x))
    return dx.astype(x.dtype), dalpha.astype(x.dtype)


def softplus_derivatives(x, beta, threshold):
    """``(d/dx, d/dbeta, d/dthreshold)`` of torch's softplus ``log(1 + exp(beta x)) / beta``
    where ``beta x <= threshold``, ``x`` above. d/dx: ``sigmoid(beta x)`` below, 1 above (torch
    ``softplus_backward``), second derivative 0 at the threshold (seed
    ``softplus_double_backward``'s strict mask). d/dbeta: ``(x sigmoid(beta x) - softplus(beta
    x) / beta) / beta`` below, 0 above. d/dthreshold: 0 (the switch point moves a discontinuity
    of size ``softplus(t)/beta - t/beta``, ~2e-9 at torch's default 20; no gradient, as for a
    step)."""
    bx = x * beta
    s = jax.nn.sigmoid(bx)
    below = bx <= threshold
    dbeta = jnp.where(below, (x * s - jax.nn.softplus(jnp.minimum(bx, threshold)) / beta) / beta, 0)
    return _kink(bx, threshold, s, jnp.ones_like(s), s), dbeta.astype(x.dtype), jnp.zeros_like(x)


def log_sigmoid_derivative(x):
    """``sigmoid(-x)`` (stable at +-800; seed ``log_sigmoid_double_backward``)."""
    return jax.nn.sigmoid(-x)


# ----------------------------------------------------------------------------------------------
# Pointwise losses: the partial derivatives with respect to each input.

_LOG_FLOOR = -100.0  # torch clamps the logs of binary_cross_entropy at -100


def bce_derivatives(x, y):
    """Of ``-(y max(log x, -100) + (1 - y) max(log(1 - x), -100))``, consistent with the clamped
    forward: where a log is clamped it is locally constant, so its term contributes nothing
    (torch's input gradient is ``(x - y)/max(x(1 - x), 1e-12)``, its target gradient ``-logit(x)``
    — infinite at x in {0, 1} although the forward is finite there)."""
    floor = math.exp(_LOG_FLOOR)
    live_x, live_1mx = x > floor, 1 - x > floor  # where the logs are not clamped
    log_x = jnp.where(live_x, jnp.log(jnp.where(live_x, x, 1)), _LOG_FLOOR)
    log_1mx = jnp.where(live_1mx, jnp.log1p(-jnp.where(live_1mx, x, 0)), _LOG_FLOOR)
    clamped_x, clamped_1mx = jnp.logical_not(live_x), jnp.logical_not(live_1mx)
    dx = -(y * safe_reciprocal(x, clamped_x) - (1 - y) * safe_reciprocal(1 - x, clamped_1mx))
    return dx, -(log_x - log_1mx)


def bce_with_logits_derivatives(x, y, pos_weight):
    """Of ``-(p y logsigmoid(x) + (1 - y) logsigmoid(-x))`` (seed
    ``binary_cross_entropy_with_logits_backward`` and ``..._target_backward``):
    ``((p y + 1 - y) sigmoid(x) - p y, logsigmoid(-x) - p logsigmoid(x), -y logsigmoid(x))``."""
    dx = (pos_weight * y + 1 - y) * jax.nn.sigmoid(x) - pos_weight * y
    dy = jax.nn.log_sigmoid(-x) - pos_weight * jax.nn.log_sigmoid(x)
    return dx, dy, -y * jax.nn.log_sigmoid(x)


def mse_derivatives(x, y):
    """Of ``(x - y)^2`` (seed ``mse_loss_double_backward``: second derivative 2)."""
    d = 2 * (x - y)
    return d, -d




def kl_div_derivatives(x, t, log_target):
    """Of torch's pointwise KL term, ``t (log t - x)`` (0 where t == 0) or, with ``log_target``,
    ``exp(t) (t - x)``: input ``-t`` / ``-exp(t)``; target ``log t + 1 - x`` (``-inf`` at t == 0,
    as torch: the one-sided slope of t log t) / ``exp(t) (t + 1 - x)`` (seed ``kl_div`` formulas of
    derivatives.yaml)."""
    if log_target:
        e = jnp.exp(t)
        return -e, e * (t + 1 - x)
    return -t, jnp.log(t) + 1 - x


def margin_ranking_derivatives(x1, x2, y, margin):
    """Of ``max(0, -y (x1 - x2) + margin)``: ``(-y, y, -(x1 - x2), 1)`` where the hinge is
    active, including at 0 (torch's ``clamp_min`` backward passes the gradient at the bound), 0
    elsewhere; the last is the margin's."""
    active = (-y * (x1 - x2) + margin >= 0).astype(x1.dtype)
    return -y * active, y * active, -(x1 - x2) * active, active


def hinge_embedding_derivatives(x, y, margin):
    """Of ``[y != 1] max(0, margin - x) + [y != -1] x``: ``-[y != 1][margin - x >= 0] + [y != -1]``
    (torch's ``clamp_min`` backward: the active branch at the bound); the labels get 0; the
    margin ``[y != 1][margin - x >= 0]``."""
    hinge = jnp.where((y != 1) & (margin - x >= 0), 1, 0).astype(x.dtype)
    dx = jnp.where(y != -1, 1, 0).astype(x.dtype) - hinge
    return dx, jnp.zeros_like(y), hinge


def huber_derivatives(x, y, delta):
    """Of torch's huber loss ``d^2 / 2`` inside ``|d| < delta``, ``delta (|d| - delta / 2)``
    outside: ``d`` inside, ``delta sign(d)`` outside; second derivative ``[|d| < delta]`` (seed
    ``huber_loss_double_backward``: 0 on the boundary). The delta's: 0 inside, ``|d| - delta``
    outside (continuous: 0 on the boundary)."""
    d = x - y
    inside = jnp.abs(d) < delta
    g = jnp.where(inside, d, delta * jnp.sign(d))
    return g, -g, jnp.where(inside, 0, jnp.abs(d) - delta).astype(x.dtype)


def smooth_l1_derivatives(x, y, beta):
    """Of torch's smooth L1 loss ``d^2 / (2 beta)`` inside ``|d| < beta``, ``|d| - beta / 2``
    outside: ``d / beta`` inside, ``sign(d)`` outside; beta = 0 is the L1 loss (seed
    ``smooth_l1_loss_double_backward``). The beta's: ``-d^2 / (2 beta^2)`` inside, ``-1/2``
    outside (continuous on the boundary)."""
    d = x - y
    inside = jnp.abs(d) < beta  # never where beta == 0
    b = jnp.where(inside, beta, 1)
    g = jnp.where(inside, d / b, jnp.sign(d))
    return g, -g, jnp.where(inside, -0.5 * d * d / (b * b), -0.5).astype(x.dtype)


def soft_margin_derivatives(x, y):
    """Of ``softplus(-y x)``: ``(-y sigmoid(-y x), -x sigmoid(-y x))`` — stable at |x| = 800,
    where torch's ``soft_margin_loss_backward`` overflows to NaN."""
    s = jax.nn.sigmoid(-y * x)
    return -y * s, -x * s




def poisson_nll_derivatives(x, t, eps, *, log_input, full, **_):
    """Of torch's ``poisson_nll_loss``: ``exp(x) - t x`` (``log_input``) or ``x - t log(x + eps)``,
    plus with ``full`` the Stirling term ``t log t - t + log(2 pi t) / 2`` where ``t > 1``:
    ``(exp(x) - t, -x)`` or ``(1 - t / (x + eps), -log(x + eps))``, the target's plus
    ``log t + 1 / (2 t)`` where ``t > 1`` and 0 elsewhere (torch: NaN at t = 0, from ``0 * log 0``
    in the masked term's backward). The eps's (an argument: it may be traced): 0 with
    ``log_input``, ``-t / (x + eps)`` without."""
    if log_input:
        dx, dt, deps = jnp.exp(x) - t, -x, jnp.zeros_like(x)
    else:
        dx, dt, deps = 1 - t / (x + eps), -jnp.log(x + eps), -t / (x + eps)
    if full:
        big = t > 1
        safe = jnp.where(big, t, 2)
        dt = dt + jnp.where(big, jnp.log(safe) + 0.5 / safe, 0)
    return dx, dt, deps


# ----------------------------------------------------------------------------------------------
# Linear algebra: matrix helpers shared by the JVP and VJP formulas (batched over leading dims).


def mT(x):
    """Transpose of the last two axes."""
    return jnp.swapaxes(x, -1, -2)


def mH(x):
    """Conjugate transpose of the last two axes."""
    return jnp.conj(mT(x))


def matmul(a, b):
    """``A B`` over broadcast leading dims, as one ``dot_general`` (no transposed copies)."""
    return jnp.einsum("...ij,...jk->...ik", a, b)


def matmul_nt(a, b):
    """``A B^T`` without materializing the transpose (the contraction names the axes)."""
    return jnp.einsum("...ij,...kj->...ik", a, b)


def matmul_tn(a, b, out_sharding=None):
    """``A^T B`` without materializing the transpose; ``out_sharding`` for an ``Explicit`` mesh
    (the contracted rows may be sharded)."""
    return jnp.einsum("...ji,...jk->...ik", a, b, out_sharding=out_sharding)


def herm(x):
    """Hermitian part ``(X + X^H) / 2``."""
    return (x + mH(x)) / 2


def diagonal(x):
    """The main diagonal of each matrix, shape ``(..., min(m, n))``."""
    return jnp.diagonal(x, axis1=-2, axis2=-1)


def diag_embed(d):
    """Square matrices with ``d`` on the diagonal (torch's ``diag_embed``)."""
    return d[..., :, None] * jnp.eye(d.shape[-1], dtype=d.dtype)


def half_diagonal(x):
    """``x`` with its diagonal halved (torch's ``syminv`` / ``syminvadj`` / ``triliminv``)."""
    return x - diag_embed(diagonal(x)) / 2


def band(x, lower, strict=False):
    """``tril(x)`` or ``triu(x)``; strictly below (above) the diagonal when ``strict``."""
    if lower:
        return jnp.tril(x, -1 if strict else 0)
    return jnp.triu(x, 1 if strict else 0)


def tri_solve(a, b, *, lower, left=True, transpose=False, conjugate=False, unit=False):
    """``op(A)^{-1} B`` (``left``) or ``B op(A)^{-1}``, ``op(A)`` = ``A`` transposed and/or
    conjugated; only the ``lower`` (or upper) triangle of ``A`` is read."""
    return lax.linalg.triangular_solve(
        a, b, left_side=left, lower=lower, transpose_a=transpose, conjugate_a=conjugate, unit_diagonal=unit
    )


def gap_reciprocal(values, squared=False):
    """``F[..., i, j] = 1 / (w_j - w_i)`` (``w = values**2`` when ``squared``), exactly 0 on the
    diagonal and for *degenerate* pairs, ``|w_j - w_i| <= n eps max|w|``.

    The torch formulas divide by these gaps (``E`` in seed ``linalg_eig_backward`` and
    ``svd_backward``) and give inf/NaN at repeated values. Zeroing the degenerate pairs is the
    derivative in the gauge that does not rotate a degenerate subspace: a loss that depends only
    on the values, or only on well-separated subspaces, gets its exact (finite) derivative.
    """
    w = values * values if squared else values
    diff = w[..., None, :] - w[..., :, None]
    n = w.shape[-1]
    scale = jnp.max(jnp.abs(w), axis=-1, keepdims=True)[..., None]
    tiny = n * jnp.finfo(diff.dtype).eps * scale
    return safe_reciprocal(diff, jnp.abs(diff) <= tiny)


def pair_products(s):
    """``Q[..., i, k] = prod_{j not in {i, k}} s_j`` for ``i != k`` and 0 on the diagonal,
    zero-safe (exclusive products, no division): the second-order cofactors of ``diag(s)``."""
    n = s.shape[-1]
    eye = jnp.eye(n, dtype=bool)
    without_i = jnp.where(eye, jnp.ones_like(s)[..., None, :], s[..., None, :])
    return jnp.where(eye, 0, prod_of_others(without_i, (without_i.ndim - 1,)))


def check_gauge(im_diag, op):
    """torch's gauge check for complex eigen/singular vectors: the loss must not depend on
    their phases, i.e. ``Im diag(V^H gV)`` must vanish (``allclose(., 0, 1e-2, 1e-2)``)."""
    runtime_check(
        jnp.any(jnp.abs(im_diag) > 1e-2),
        f"{op}: the eigenvectors/singular vectors in the complex case are specified up to "
        "multiplication by e^{i phi}; the loss depends on this phase, so its gradient is "
        "ill-defined (make the loss invariant, e.g. use abs(V) or V @ V^H).",
    )


def lu_solve(lu, piv, b, trans=0):
    """``A^{-1} B`` (``trans`` 0), ``A^{-T} B`` (1) or ``A^{-H} B`` (2) from ``lu_factor(A)``."""
    from jax.scipy.linalg import lu_solve as _lu_solve

    return _lu_solve((lu, piv), b, trans=trans)


def lu_factor(a):
    """``(lu, piv)`` of ``A`` (LAPACK's packed LU with partial pivoting)."""
    from jax.scipy.linalg import lu_factor as _lu_factor

    return _lu_factor(a)


def cho_solve(c, lower, b):
    """``(L L^H)^{-1} B`` (``lower``) or ``(U^H U)^{-1} B`` from the triangle of ``c``."""
    from jax.scipy.linalg import cho_solve as _cho_solve

    return _cho_solve((c, lower), b)


# Moore-Penrose pseudo-inverse (shared by pinv and lstsq).


def pinv_tangent(a, x, da):
    """``dX = -X dA X + (I - XA) dA^H X^H X + X X^H dA^H (I - AX)`` for ``X = A^+`` of locally
    constant rank (Golub-Pereyra; seed ``pinv_jvp``)."""
    dah = mH(da)
    return -(x @ da @ x) + (dah @ (mH(x) @ x) - x @ (a @ (dah @ (mH(x) @ x)))) + (
        (x @ mH(x)) @ dah - ((x @ mH(x)) @ dah @ a) @ x
    )


def pinv_adjoint(a, x, g):
    """Hermitian adjoint of ``pinv_tangent`` (seed ``pinv_backward``, torch's convention):
    ``-X^H G X^H + X^H X G^H (I - XA) + (I - AX) G^H X X^H``."""
    gh = mH(g)
    xhx, xxh = mH(x) @ x, x @ mH(x)
    return -(mH(x) @ g @ mH(x)) + (xhx @ gh - ((xhx @ gh) @ x) @ a) + (gh @ xxh - a @ (x @ (gh @ xxh)))


# LU factorization with partial pivoting: ``A[perm] = L U`` (``lax.linalg.lu``), L unit lower
# (m x k), U upper (k x n), k = min(m, n).


def lu_parts(lu):
    """``(L, U)`` from the packed factors."""
    m, n = lu.shape[-2:]
    k = min(m, n)
    lower = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=lu.dtype)
    return lower, jnp.triu(lu[..., :k, :])


def permutation_rows(perm, dtype):
    """``I[perm]`` (the rows of the identity in the order ``perm``: ``P^T``), as a comparison
    rather than a gather, so it keeps ``perm``'s batch sharding under an ``Explicit`` mesh."""
    return (perm[..., :, None] == jnp.arange(perm.shape[-1], dtype=perm.dtype)).astype(dtype)


def permute_rows(x, perm):
    """``x[perm]`` (row permutation, batched): ``P^T X``."""
    return jnp.take_along_axis(x, perm[..., :, None], axis=-2)


def unpermute_rows(x, perm):
    """``P X``: the inverse of ``permute_rows``."""
    return jnp.take_along_axis(x, jnp.argsort(perm, axis=-1)[..., :, None], axis=-2)


def lu_tangent(lower, upper, da_perm):
    """``(dL, dU)`` from ``P^T dA`` (seed ``linalg_lu_jvp``): ``dK = L1^{-1} dA1 U1^{-1}``,
    ``dL1 = L1 tril(dK, -1)``, ``dU1 = triu(dK) U1``; wide: ``dU2 = L1^{-1} dA2 - tril(dK, -1) U2``;
    tall: ``dL2 = dA2 U1^{-1} - L2 triu(dK)``."""
    m, n = da_perm.shape[-2:]
    k = min(m, n)
    l1, u1 = lower[..., :k, :], upper[..., :, :k]
    dk = tri_solve(l1, da_perm[..., :k, :k], lower=True, unit=True)
    dk = tri_solve(u1, dk, lower=False, left=False)
    strict, upper_part = jnp.tril(dk, -1), jnp.triu(dk)
    dl, du = l1 @ strict, upper_part @ u1
    if n > k:
        du2 = tri_solve(l1, da_perm[..., :, k:], lower=True, unit=True) - strict @ upper[..., :, k:]
        du = jnp.concatenate([du, du2], axis=-1)
    if m > k:
        dl2 = tri_solve(u1, da_perm[..., k:, :], lower=False, left=False) - lower[..., k:, :] @ upper_part
        dl = jnp.concatenate([dl, dl2], axis=-2)
    return dl, du


def lu_adjoint(lower, upper, gl, gu):
    """Hermitian adjoint of ``lu_tangent``: ``P^T``-side cotangent of A from ``(gL, gU)`` (seed
    ``linalg_lu_backward``)."""
    m, k = lower.shape[-2:]
    n = upper.shape[-1]
    l1, u1 = lower[..., :k, :], upper[..., :, :k]
    gk = jnp.tril(mH(l1) @ gl[..., :k, :], -1) + jnp.triu(gu[..., :, :k] @ mH(u1))
    if n > k:
        gk = gk - jnp.tril(gu[..., :, k:] @ mH(upper[..., :, k:]), -1)
    if m > k:
        gk = gk - jnp.triu(mH(lower[..., k:, :]) @ gl[..., k:, :])
    ga1 = tri_solve(l1, gk, lower=True, unit=True, transpose=True, conjugate=True)
    ga1 = tri_solve(u1, ga1, lower=False, left=False, transpose=True, conjugate=True)
    if n > k:
        ga2 = tri_solve(l1, gu[..., :, k:], lower=True, unit=True, transpose=True, conjugate=True)
        return jnp.concatenate([ga1, ga2], axis=-1)
    if m > k:
        ga2 = tri_solve(u1, gl[..., k:, :], lower=False, left=False, transpose=True, conjugate=True)
        return jnp.concatenate([ga1, ga2], axis=-2)
    return ga1


def pack_lu(dl, du):
    """Packed ``tril(dL, -1) + triu(dU)`` in the shape of ``lu`` (seed ``lu_factor_ex_jvp``)."""
    m, k = dl.shape[-2:]
    n = du.shape[-1]
    out = jnp.zeros(dl.shape[:-2] + (m, n), jnp.result_type(dl, du))
    out = out.at[..., :, :k].add(jnp.tril(dl, -1))
    return out.at[..., :k, :].add(jnp.triu(du))


def unpack_lu(g, k):
    """Cotangents ``(gL, gU)`` of the packed factors' cotangent ``g`` (seed
    ``lu_factor_ex_backward``)."""
    return jnp.tril(g[..., :, :k], -1), jnp.triu(g[..., :k, :])


# Householder reflectors ``H_j = I - tau_j v_j v_j^H`` with ``v_j = [0, ..., 0, 1, A[j+1:, j]]``.


def reflector(a, j):
    """``v_j`` from column ``j`` of the packed reflectors ``a``."""
    m = a.shape[-2]
    rows = jnp.arange(m)
    return jnp.where(rows == j, jnp.ones((), a.dtype), jnp.where(rows > j, a[..., :, j], 0))


def apply_reflector(tau, v, y):
    """``(I - tau v v^H) Y``."""
    return y - tau[..., None, None] * (v[..., :, None] * (jnp.conj(v)[..., None, :] @ y))


def reflector_sequence(a, tau, *, adjoint, reverse):
    """``[(j, conjugate)]`` in the order the reflectors are applied to the right-hand side:
    ``H_1 H_2 ... H_k C`` applies ``H_k`` first (``reverse``); ``Q^H C`` applies ``H_1^H``
    first."""
    k = tau.shape[-1]
    order = range(k - 1, -1, -1) if reverse else range(k)
    return [(j, adjoint) for j in order]


# Discrete Fourier transforms (``kind`` is the jax.numpy.fft function name).


def fft_apply(kind, x, sizes, axes, norm):
    """``jnp.fft.<kind>`` over ``axes`` with output sizes ``sizes`` (the logical signal lengths)."""
    fn = getattr(jnp.fft, kind + ("n" if not kind.endswith("n") else ""))
    return fn(x, s=sizes, axes=axes, norm=norm)


def resize(x, shape, axes):
    """``x`` cut or zero-padded along ``axes`` to ``shape``'s lengths there (the transpose of
    ``jnp.fft``'s own cut/pad of its input)."""
    for axis in axes:
        n, m = x.shape[axis], shape[axis]
        if n > m:
            x = lax.slice_in_dim(x, 0, m, axis=axis)
        elif n < m:
            widths = [(0, 0)] * x.ndim
            widths[axis] = (0, m - n)
            x = jnp.pad(x, widths)
    return x


def hermitian_weights(n, m, dtype):
    """``w_j`` for the ``m = n//2 + 1`` stored coefficients of a real signal of length ``n``:
    1 for the DC term (and the Nyquist term when n is even), 2 for the others (each stands for
    itself and its conjugate mirror)."""
    j = jnp.arange(m)
    return jnp.where((j == 0) | ((n % 2 == 0) & (j == n // 2)), 1, 2).astype(dtype)


# Scatter / gather along one axis (torch's ``scatter_reduce``): ``coords`` addresses, for each
# position of ``index``, the target element (the position with its ``axis`` coordinate replaced
# by the index).


class _CoordsAlong(tuple):
    """Scatter coordinates that are ``index`` along ``axis`` and the position elsewhere."""

    index: jax.Array
    axis: int


def scatter_coords(index, axis):
    """The scatter target coordinates of ``index`` along ``axis``."""
    coords = list(jnp.indices(index.shape, sparse=True))
    coords[axis] = index
    out = _CoordsAlong(coords)
    out.index, out.axis = index, axis % index.ndim
    return out


def zeros_sharded_like(shape, dtype, like):
    """``zeros(shape)`` sharded as ``like`` along the axes where both have the same size, under an
    ``Explicit`` mesh (the operand of a scatter, sharded as its updates); else plain zeros."""
    sharding = explicit_sharding(like)
    if sharding is None or jnp.ndim(like) != len(shape):
        return jnp.zeros(shape, dtype)
    spec = tuple(sharding.spec) + (None,) * len(shape)
    spec = [e if jnp.shape(like)[a] == n else None for a, (e, n) in enumerate(zip(spec, shape))]
    return jnp.zeros(shape, dtype, out_sharding=jax.sharding.PartitionSpec(*spec))


def scatter_add(shape, coords, values):
    """``zeros(shape).at[coords].add(values)``."""
    if isinstance(coords, _CoordsAlong) and values.shape == coords.index.shape and all(
            n == m for a, (n, m) in enumerate(zip(shape, values.shape)) if a != coords.axis):
        # One scatter per line along the axis, vmapped: the other axes become the scatter's
        # batching dimensions, which XLA's partitioner keeps sharded (it replicates a scatter of
        # sparse iotas into replicated zeros) and which an Explicit mesh resolves.
        def line(index, values):
            return jnp.zeros((shape[coords.axis],), values.dtype).at[index].add(values)

        for _ in range(values.ndim - 1):
            line = jax.vmap(line)
        moved = line(jnp.moveaxis(coords.index, coords.axis, -1), jnp.moveaxis(values, coords.axis, -1))
        return jnp.moveaxis(moved, -1, coords.axis)
    zeros = zeros_sharded_like(shape, values.dtype, values)
    return zeros.at[coords].add(values, out_sharding=explicit_sharding(zeros))


def repeat_along(x, counts, axis):
    """Entry ``i`` of ``x`` along ``axis`` repeated ``counts[i]`` times (``counts`` static)."""
    return jnp.repeat(x, jnp.asarray(counts), axis=axis, total_repeat_length=sum(counts))


def sum_repeats(ct, counts, axis):
    """The transpose of ``repeat_along``: each entry's copies summed (a segment sum)."""
    ids = np.repeat(np.arange(len(counts)), counts)
    moved = jnp.moveaxis(ct, axis, 0)
    return jnp.moveaxis(jax.ops.segment_sum(moved, ids, num_segments=len(counts)), 0, axis)


def scattered_mask(shape, coords):
    """Which target elements receive at least one scattered value."""
    index = max(coords, key=jnp.size)  # the scattered index (the others are sparse iotas)
    zeros = zeros_sharded_like(shape, bool, index)
    return zeros.at[coords].set(True, out_sharding=explicit_sharding(zeros))


def _segmented_cumprod(values, starts):
    """Inclusive cumulative products that restart where ``starts`` is true (an associative scan:
    products only, so JAX differentiates it to any order)."""

    def combine(a, b):
        (a_value, a_start), (b_value, b_start) = a, b
        return jnp.where(b_start, b_value, a_value * b_value), a_start | b_start

    return lax.associative_scan(combine, (values, starts))[0]


def segment_products_of_others(values, segments):
    """``prod_{j != i, segments[j] == segments[i]} values[j]`` for each ``i`` (1-D), zero-safe
    and division-free: exclusive segmented products forward and backward over the members
    sorted by segment (seed ``scatter_reduce_backward``'s prod, without its single-zero special
    case, so second and higher derivatives are exact with any number of zeros)."""
    order = jnp.argsort(segments, stable=True)
    v, s = values[order], segments[order]
    boundary = s[1:] != s[:-1]
    starts = jnp.concatenate([jnp.ones(1, bool), boundary])
    ends = jnp.concatenate([boundary, jnp.ones(1, bool)])
    one = jnp.ones(1, v.dtype)
    before = jnp.where(starts, 1, jnp.concatenate([one, _segmented_cumprod(v, starts)[:-1]]))
    after = jnp.where(ends, 1, jnp.concatenate([_segmented_cumprod(v[::-1], ends[::-1])[:-1][::-1], one]))
    return jnp.zeros_like(values).at[order].set(before * after)


def embedding_row_weights(indices, padding_idx, scale_grad_by_freq, num, dtype):
    """Per looked-up row: 0 for ``padding_idx``, ``1/count(index)`` with ``scale_grad_by_freq``,
    else 1."""
    weights = jnp.ones(indices.shape, dtype)
    if scale_grad_by_freq:
        counts = jnp.zeros(num, dtype).at[indices].add(1)
        weights = weights / counts[indices]
    if padding_idx is not None:
        weights = jnp.where(indices == padding_idx, 0.0, weights)
    return weights


def scatter_prod_weights(x, index, src, axis, include_self):
    """``(w_x, w_src)`` of a scatter product: each member's product of the other members of its
    slot (``segment_products_of_others``); an element not kept (``include_self=False`` and
    scattered) has weight 0, one not scattered and not kept weight 1."""
    coords = scatter_coords(index, axis)
    target = jnp.ravel_multi_index(jnp.broadcast_arrays(*coords), x.shape, mode="clip").ravel()
    own = jnp.arange(x.size)
    if include_self:
        others = segment_products_of_others(jnp.concatenate([x.ravel(), src.ravel()]), jnp.concatenate([own, target]))
        return others[: x.size].reshape(x.shape), others[x.size :].reshape(src.shape)
    others = segment_products_of_others(src.ravel(), target)
    return jnp.where(scattered_mask(x.shape, coords), 0, 1).astype(x.dtype), others.reshape(src.shape)


def scatter_reduce_weights(res, *, axis, reduce, include_self):
    """``(w_x, w_src, coords)``: the derivative of each output element with respect to its own
    ``x`` element and to each scattered ``src`` element (seed ``scatter_reduce_backward`` /
    ``scatter_reduce_jvp``). Residuals: ``(x, index, src, out, prod_weights)`` (the last only
    for prod)."""
    x, index, src, out, prod_weights = res
    coords = scatter_coords(index, axis)
    hit = scattered_mask(x.shape, coords)
    keeps_x = jnp.ones(x.shape, bool) if include_self else ~hit
    if reduce == "sum":
        return keeps_x.astype(x.dtype), jnp.ones(src.shape, src.dtype), coords
    if reduce == "mean":
        count = keeps_x.astype(x.real.dtype) + scatter_add(x.shape, coords, jnp.ones(src.shape, x.real.dtype))
        inverse = 1 / jnp.maximum(count, 1)
        return keeps_x * inverse, inverse[coords], coords
    if reduce in ("amax", "amin"):
        x_ties = keeps_x & (x == out)
        src_ties = src == out[coords]
        count = x_ties.astype(x.dtype) + scatter_add(x.shape, coords, src_ties.astype(x.dtype))
        inverse = safe_reciprocal(count, count == 0)
        return x_ties * inverse, src_ties * inverse[coords], coords
    return (*prod_weights, coords)  # prod: the product of the slot's other members


# ----------------------------------------------------------------------------------------------
# Convolution (channels first: x (N, C, *spatial), weight (O, C / groups, *kernel)) and pooling


def _conv_numbers(ndim, lhs, rhs, out):
    return lax.ConvDimensionNumbers(lhs_spec=lhs + tuple(range(2, ndim)), rhs_spec=rhs + tuple(range(2, ndim)),
                                    out_spec=out + tuple(range(2, ndim)))


def conv(x, w, stride, padding, dilation, groups):
    """torch's convolution without bias: ``padding`` is ((lo, hi), ...) per spatial axis."""
    return lax.conv_general_dilated(
        x, w, window_strides=stride, padding=padding, rhs_dilation=dilation, feature_group_count=groups,
        dimension_numbers=_conv_numbers(x.ndim, (0, 1), (0, 1), (0, 1)),
    )


def conv_input_grad(g, w, in_spatial, stride, padding, dilation, groups):
    """The transposed convolution (seed ``convolution_backward``'s grad_input): ``g`` (strides
    become input dilation) against the flipped kernel with in/out channels swapped per group."""
    o, i_g, *kernel = w.shape
    swapped = w.reshape(groups, o // groups, i_g, *kernel).swapaxes(1, 2).reshape(groups * i_g, o // groups, *kernel)
    flipped = jnp.flip(swapped, axis=tuple(range(2, w.ndim)))
    pads = []
    for n, k, s, (lo, _), d, out in zip(in_spatial, kernel, stride, padding, dilation, g.shape[2:]):
        span = d * (k - 1) + 1
        pads.append((span - 1 - lo, n - 1 - (out - 1) * s + lo))
    return lax.conv_general_dilated(
        g, flipped, window_strides=(1,) * len(kernel), padding=pads, lhs_dilation=stride, rhs_dilation=dilation,
        feature_group_count=groups, dimension_numbers=_conv_numbers(g.ndim, (0, 1), (0, 1), (0, 1)),
    )


def conv_weight_grad(x, g, kernel, stride, padding, dilation, groups, out_sharding=None):
    """seed ``convolution_backward``'s grad_weight: ``x`` (channels as the batch) correlated with
    ``g`` (strides become kernel dilation), one group per batch group; ``out_sharding`` the
    weight's (an ``Explicit`` mesh asks for it: the batch contracted may be sharded)."""
    pads = []
    for n, k, s, (lo, _), d, out in zip(x.shape[2:], kernel, stride, padding, dilation, g.shape[2:]):
        pads.append((lo, (k - 1) * d + (out - 1) * s + 1 - n - lo))
    return lax.conv_general_dilated(
        x, g, window_strides=dilation, padding=pads, rhs_dilation=stride, batch_group_count=groups,
        dimension_numbers=_conv_numbers(x.ndim, (1, 0), (1, 0), (1, 0)), out_sharding=out_sharding,
    )


def conv_transpose(x, w, stride, padding, dilation, groups):
    """torch's transposed convolution without bias, ``x`` (N, C_in, *spatial) and ``w`` (C_in,
    C_out / groups, *kernel): the transpose of ``conv(., w)`` with ``padding`` ((lo, hi), ...)
    whose output ``x`` would be (``conv_input_grad``); torch's ``padding``/``output_padding``
    are ``lo = padding``, ``hi = padding - output_padding``, so each output axis has
    ``(n - 1) stride + dilation (k - 1) + 1 - lo - hi`` entries."""
    spatial = tuple((n - 1) * s + d * (k - 1) + 1 - lo - hi
                    for n, k, s, (lo, hi), d in zip(x.shape[2:], w.shape[2:], stride, padding, dilation))
    return conv_input_grad(x, w, spatial, stride, padding, dilation, groups)


def bias_view(b, ndim):
    """A per-channel vector shaped to broadcast against (N, C, *spatial)."""
    return b.reshape((1, -1) + (1,) * (ndim - 2))


def window_positions(spatial, kernel, stride, padding, dilation):
    """Static (prod(kernel), *out) flat input positions of every window element, row-major in
    the window; -1 where the window covers padding (``padding`` ((lo, hi), ...) per axis)."""
    axes = []
    for n, k, s, (lo, hi), d in zip(spatial, kernel, stride, padding, dilation):
        out = (n + lo + hi - d * (k - 1) - 1) // s + 1
        pos = np.arange(out)[None, :] * s + np.arange(k)[:, None] * d - lo  # (k, out)
        axes.append(np.where((pos >= 0) & (pos < n), pos, -1))
    return combine_windows(axes, spatial)


def combine_windows(axes, spatial):
    """Per-axis (k, out) input positions (-1: none) -> (prod(k), *out) flat positions, row-major
    in the window; -1 where any axis has none."""
    grids = np.meshgrid(*[np.arange(a.shape[0]) for a in axes], *[np.arange(a.shape[1]) for a in axes], indexing="ij")
    dims = len(axes)
    coords = [axes[i][grids[i], grids[dims + i]] for i in range(dims)]
    inside = np.all([c >= 0 for c in coords], axis=0)
    flat = np.ravel_multi_index([np.maximum(c, 0) for c in coords], spatial)
    flat = np.where(inside, flat, -1)
    return flat.reshape(math.prod(a.shape[0] for a in axes), *flat.shape[dims:])


def _block_index(spatial, kernel, stride, padding, dilation):
    """``(index, size)``: the (prod(kernel), L) flat positions of ``window_positions`` with the
    blocks flattened (row-major) and padding sent to ``size``, one past the plane."""
    pos = window_positions(spatial, kernel, stride, padding, dilation)
    size = math.prod(spatial)
    return np.where(pos >= 0, pos, size).reshape(pos.shape[0], math.prod(pos.shape[1:])), size


def unfold(x, kernel, stride, padding, dilation):
    """torch's ``im2col``: (N, C, *spatial) -> (N, C prod(kernel), L), entry ``(c, j)`` of block
    ``l`` the input under element ``j`` (row-major) of the ``l``-th window (row-major), 0 on the
    ``padding`` ((lo, hi), ...). A gather: exact in every dtype."""
    n, c = x.shape[:2]
    index, size = _block_index(x.shape[2:], kernel, stride, padding, dilation)
    planes = x.reshape(n, c, size)  # not -1: the batch may be empty
    cols = jnp.take(planes, index, axis=2, mode="fill", fill_value=0)  # (N, C, K, L)
    return cols.reshape(n, c * index.shape[0], index.shape[1])


def fold(cols, spatial, kernel, stride, padding, dilation):
    """torch's ``col2im``, the transpose of ``unfold`` for an input of ``spatial`` size: each
    entry of (N, C prod(kernel), L) added at its window position (padding dropped), summed in
    float32 for half precision."""
    index, size = _block_index(spatial, kernel, stride, padding, dilation)
    n, ck, blocks = cols.shape
    c = ck // index.shape[0]
    acc = stat_dtype(cols.dtype)
    planes = zeros_sharded_like((n, c, size), acc, cols).at[:, :, index].add(
        cols.astype(acc).reshape(n, c, *index.shape), mode="drop")
    return planes.reshape(n, c, *spatial).astype(cols.dtype)


def pool_flat_gather(x, flat_index):
    """``x`` (N, C, *spatial) read at per-plane flat spatial indices (N, C, *out)."""
    planes = x.reshape(x.shape[:2] + (math.prod(x.shape[2:]),))  # not -1: the batch may be empty
    picked = jnp.take_along_axis(planes, flat_index.reshape(flat_index.shape[:2] + (math.prod(flat_index.shape[2:]),)),
                                 axis=2)
    return picked.reshape(flat_index.shape)


def pool_flat_scatter(g, flat_index, shape):
    """The transpose of ``pool_flat_gather``: ``g`` scatter-added into zeros of ``shape``."""
    idx = flat_index.reshape(flat_index.shape[:2] + (math.prod(flat_index.shape[2:]),))

    def plane(values, index):  # one (sample, channel): vmapped, the scatter has batching dims,
        return jnp.zeros((math.prod(shape[2:]),), values.dtype).at[index].add(values)  # which shard

    return jax.vmap(jax.vmap(plane))(g.reshape(idx.shape), idx).reshape(shape)


def _spatial_pads(pads):
    return ((0, 0, 0), (0, 0, 0), *pads)


def _window_grid(spatial, kernel, stride, padding, dilation):
    """Per spatial axis ``(out, padded length)`` of the windows over an input padded by
    ``padding`` ((lo, hi), ...; ``hi`` negative where trailing input lies in no window)."""
    return [((n + lo + hi - d * (k - 1) - 1) // s + 1, n + lo + hi)
            for n, k, s, (lo, hi), d in zip(spatial, kernel, stride, padding, dilation)]


def _window_offsets(kernel):
    """Every element of a window, row-major (``window_positions``' order), as per-axis offsets."""
    return [np.unravel_index(j, kernel) for j in range(math.prod(kernel))]


def window_slices(x, kernel, stride, padding, dilation, fill):
    """(N, C, prod(kernel), *out): element ``j`` (row-major) of every window of ``x`` (N, C,
    *spatial) padded with ``fill``, as one strided slice per window element: no gather, so XLA
    fuses it and a batch-sharded ``x`` stays sharded (the windows of ``window_positions``)."""
    padded = lax.pad(x, np.array(fill, x.dtype), _spatial_pads((lo, hi, 0) for lo, hi in padding))
    grid = _window_grid(x.shape[2:], kernel, stride, padding, dilation)
    slices = []
    for offset in _window_offsets(kernel):
        start = [o * d for o, d in zip(offset, dilation)]
        limit = [b + (m - 1) * s + 1 for b, (m, _), s in zip(start, grid, stride)]
        slices.append(lax.slice(padded, (0, 0, *start), (*x.shape[:2], *limit), (1, 1, *stride)))
    return jnp.stack(slices, axis=2)


def window_slices_transpose(windows, shape, kernel, stride, padding, dilation):
    """The transpose of ``window_slices`` for an input of ``shape``: element ``j`` of every window
    (``windows`` (N, C, prod(kernel), *out)) added back at its input position, each as the
    slice's transpose (the slice spread out with ``stride - 1`` zeros between entries); the
    padding dropped. No scatter (seed ``max_pool2d_with_indices_backward``'s scatter-add)."""
    zero = np.zeros((), windows.dtype)
    grid = _window_grid(shape[2:], kernel, stride, padding, dilation)
    total = None
    for j, offset in enumerate(_window_offsets(kernel)):
        pads = []
        for o, d, (m, length), s in zip(offset, dilation, grid, stride):
            lo = o * d
            pads.append((lo, length - lo - (m - 1) * s - 1, s - 1))
        piece = lax.pad(windows[:, :, j], zero, _spatial_pads(pads))
        total = piece if total is None else total + piece
    return lax.pad(total, zero, _spatial_pads((-lo, -hi, 0) for lo, hi in padding))


def window_element(flat_index, spatial, kernel, stride, padding, dilation):
    """Which element (row-major) of its window each flat input position of ``flat_index`` (N, C,
    *out; a position of that output's window) is: per axis ``(i + lo - o s) / d``."""
    coords = jnp.unravel_index(flat_index, spatial)
    element = jnp.zeros(flat_index.shape, jnp.int32)
    for axis, (i, k, s, (lo, _), d) in enumerate(zip(coords, kernel, stride, padding, dilation)):
        out = lax.broadcasted_iota(jnp.int32, flat_index.shape, 2 + axis)
        element = element * k + (i.astype(jnp.int32) + lo - out * s) // d
    return element


def window_select(windows, element):
    """``windows`` (N, C, K, *out) read at window element ``element`` (N, C, *out): a masked
    sum over the window (elementwise; the unselected entries, NaN or not, do not enter)."""
    chosen = element[:, :, None] == lax.broadcasted_iota(jnp.int32, windows.shape, 2)
    return jnp.sum(jnp.where(chosen, windows, 0), axis=2).astype(windows.dtype)


def window_place(g, element, shape, kernel, stride, padding, dilation):
    """The transpose of ``window_select`` after ``window_slices``: ``g`` (N, C, *out) added at
    window element ``element`` of each window of an input of ``shape``."""
    k = math.prod(kernel)
    chosen = element[:, :, None] == lax.broadcasted_iota(jnp.int32, (*g.shape[:2], k, *g.shape[2:]), 2)
    return window_slices_transpose(jnp.where(chosen, g[:, :, None], 0), shape, kernel, stride, padding, dilation)


def window_sum(x, kernel, stride, padding):
    """The sum over every window of (N, C, *spatial) (no dilation); ``padding`` ((lo, hi), ...)
    per spatial axis of zeros, ``hi`` negative where trailing input lies in no window."""
    zero = np.zeros((), x.dtype)
    padded = lax.pad(x, zero, _spatial_pads((lo, hi, 0) for lo, hi in padding))
    return lax.reduce_window(padded, zero, lax.add, (1, 1, *kernel), (1, 1, *stride), "VALID")


def window_sum_transpose(g, kernel, stride, padding):
    """The transpose of ``window_sum``: each input position gets the sum of ``g`` over the windows
    that cover it. ``g`` spread out with ``stride - 1`` zeros between entries and ``kernel - 1``
    around, summed over windows of ``kernel`` at stride 1 (the padded input's length
    ``(out - 1) stride + kernel``), the padding cut off again (seed ``avg_pool2d_backward``'s
    scatter, as a gather)."""
    zero = np.zeros((), g.dtype)
    spread = lax.pad(g, zero, _spatial_pads((k - 1, k - 1, s - 1) for k, s in zip(kernel, stride)))
    full = lax.reduce_window(spread, zero, lax.add, (1, 1, *kernel), (1,) * g.ndim, "VALID")
    return lax.pad(full, zero, _spatial_pads((-lo, -hi, 0) for lo, hi in padding))


def avg_pool_divisor(spatial, kernel, stride, padding, count_include_pad, divisor_override):
    """torch's avg_pool divisor per output position (static): ``divisor_override``, else the
    window's size clipped to the padded input (``count_include_pad``) or to the input itself;
    both are products of one length per axis."""
    lengths = []
    for n, k, s, (lo, hi) in zip(spatial, kernel, stride, padding):
        out = (n + lo + hi - k) // s + 1
        start = np.arange(out) * s - lo
        end = np.minimum(start + k, n + lo)  # torch clips a ceil_mode window to the padding
        if not count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, n)
        lengths.append(end - start)
    if divisor_override is not None:
        return np.full([len(v) for v in lengths], float(divisor_override))
    return functools.reduce(np.multiply.outer, lengths).astype(float)


def avg_pool(x, kernel, stride, padding, count_include_pad, divisor_override):
    """torch's avg_pool: the window sums over the divisor, summed in float32 for half precision."""
    divisor = avg_pool_divisor(x.shape[2:], kernel, stride, padding, count_include_pad, divisor_override)
    acc = stat_dtype(x.dtype)
    return (window_sum(x.astype(acc), kernel, stride, padding) / divisor.astype(acc)).astype(x.dtype)


def avg_pool_transpose(g, shape, kernel, stride, padding, count_include_pad, divisor_override):
    """The transpose of ``avg_pool`` for an input of ``shape``: ``g`` over the divisor, spread
    back over the windows (``window_sum_transpose``)."""
    divisor = avg_pool_divisor(shape[2:], kernel, stride, padding, count_include_pad, divisor_override)
    acc = stat_dtype(g.dtype)
    return window_sum_transpose(g.astype(acc) / divisor.astype(acc), kernel, stride, padding).astype(g.dtype)


def adaptive_windows(n, out):
    """torch's adaptive pooling windows of an axis of length ``n``: ``[floor(i n / out),
    ceil((i + 1) n / out))`` for i < out (static)."""
    i = np.arange(out)
    return (i * n) // out, -((-(i + 1) * n) // out)


def _adaptive_window_index(n, out):
    """``(index, valid, length)`` of the adaptive windows of an axis of length ``n``: ``index``
    (out, width) the positions of each window (padded with the last position), ``valid`` which
    of them belong to it, ``length`` its length."""
    start, end = adaptive_windows(n, out)
    length = end - start
    k = np.arange(int(length.max(initial=0)))
    return np.minimum(start[:, None] + k, max(n - 1, 0)), k < length[:, None], length


def _window_means(y, axis, n, out):
    """The mean of each adaptive window along ``axis``: a sum per window (no product with a
    dense averaging matrix, whose zeros would turn an inf elsewhere on the axis into NaN)."""
    index, valid, length = _adaptive_window_index(n, out)
    windows = jnp.take(jnp.moveaxis(y, axis, -1), index, axis=-1)  # (..., out, width)
    means = jnp.where(valid, windows, 0).sum(-1) / length.astype(y.dtype)
    return jnp.moveaxis(means, -1, axis)


def _window_means_transpose(g, axis, n, out):
    """The transpose of ``_window_means``: each window's cotangent shared evenly over it."""
    index, valid, length = _adaptive_window_index(n, out)
    g = jnp.moveaxis(g, axis, -1)
    shares = jnp.where(valid, (g / length.astype(g.dtype))[..., None], 0)  # (..., out, width)
    spread = zeros_sharded_like(g.shape[:-1] + (n,), g.dtype, g).at[..., index].add(shares)
    return jnp.moveaxis(spread, -1, axis)


def _along_spatial_axes(x, step, sizes, output_size):
    """``step`` applied to each spatial axis of x (N, C, *spatial) in turn, accumulated in
    float32 for half precision."""
    y = x.astype(stat_dtype(x.dtype))
    for axis, (n, out) in enumerate(zip(sizes, output_size), start=2):
        y = step(y, axis, n, out)
    return y.astype(x.dtype)


def adaptive_avg_pool(x, output_size):
    """torch's adaptive_avg_pool: the mean of each adaptive window, axis by axis (it is separable:
    the window's size is the product of its lengths)."""
    return _along_spatial_axes(x, _window_means, x.shape[2:], output_size)


def adaptive_avg_pool_transpose(g, shape, output_size):
    """The transpose of ``adaptive_avg_pool`` (seed ``_adaptive_avg_pool2d_backward``: each
    cotangent shared evenly over its window)."""
    return _along_spatial_axes(g, _window_means_transpose, shape[2:], output_size)


# ----------------------------------------------------------------------------------------------
# Sorting (sort, topk, cummax/cummin, nanmedian, quantile)


def sort_permutation(x, axis, descending=False):
    """torch's stable sort order along ``axis`` (default-int indices): NaN after every number
    (before, when ``descending``), equal values (``-0.0 == 0.0``) in their positions' order."""
    axis = axis % x.ndim
    nan = jnp.isnan(x)
    value = jnp.where(nan | (x == 0), jnp.zeros((), x.dtype), x)  # XLA's total order splits -0.0 and 0.0
    if descending:  # ~ reverses integer and boolean order without overflow
        value = -value if jnp.issubdtype(x.dtype, jnp.inexact) else ~value
    first, second = (~nan, value) if descending else (nan, value)
    iota = lax.broadcasted_iota(jnp.zeros((), int).dtype, x.shape, axis, out_sharding=explicit_sharding(x))
    return lax.sort((first, second, iota), dimension=axis, num_keys=2, is_stable=True)[2]


def cummaxmin_select(x, axis, largest):
    """torch's ``cummax`` (``largest``) / ``cummin``: ``(values, indices)``. A later entry
    replaces the running one when it is NaN or (the running one is not NaN and) it is ``>=``
    (``<=``): NaN propagates with the index of the latest NaN, ties take the later index. This is
    the maximum in the order (is NaN, +-value, index), hence associative (a parallel scan)."""
    index = lax.broadcasted_iota(jnp.zeros((), int).dtype, x.shape, axis, out_sharding=explicit_sharding(x))

    def combine(a, b):
        (va, ia), (vb, ib) = a, b
        better = vb >= va if largest else vb <= va
        take_b = jnp.isnan(vb) | (~jnp.isnan(va) & better)
        return jnp.where(take_b, vb, va), jnp.where(take_b, ib, ia)

    return lax.associative_scan(combine, (x, index), axis=axis)


QUANTILE_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def quantile_selection(x, q, method, ignore_nan):
    """The two order statistics each quantile reads and the weight of the upper one, for ``x``
    with the reduced axis last, ``(..., n)``, and ``q`` a tuple of ``m`` numbers in [0, 1]:
    ``(lower index, upper index, weight)``, each ``(..., m)``, indices into ``x``'s last axis.

    torch's ``quantile_compute``: rank ``q (c - 1)`` in the stable NaN-last order, ``c`` the count
    of numbers (``ignore_nan``: nanquantile/nanmedian; 0 numbers read position 0) or ``n``, where
    a NaN in the slice moves the rank to the last position (a NaN: the result is NaN). ``linear``
    reads floor and ceil with weight ``rank - floor``; ``midpoint`` weight 1/2; ``lower``,
    ``higher`` and ``nearest`` (half to even, as torch and numpy) one position. The weight is 0
    where both positions are one entry."""
    n = x.shape[-1]
    perm = sort_permutation(x, -1)
    nan = jnp.isnan(x)
    if ignore_nan:
        count = n - jnp.sum(nan, axis=-1, keepdims=True)
    else:
        count = jnp.full(x.shape[:-1] + (1,), n)
    rank = jnp.asarray(q, x.dtype) * jnp.maximum(count - 1, 0).astype(x.dtype)
    if not ignore_nan:
        rank = jnp.where(jnp.any(nan, axis=-1, keepdims=True), jnp.asarray(n - 1, x.dtype), rank)
    below, above = jnp.floor(rank), jnp.ceil(rank)
    if method == "linear":
        weight = rank - below
    elif method == "midpoint":
        weight = jnp.full_like(rank, 0.5)
    else:
        below = above = {"lower": below, "higher": above, "nearest": jnp.round(rank)}[method]
        weight = jnp.zeros_like(rank)
    weight = jnp.where(below == above, 0, weight)
    lo = jnp.take_along_axis(perm, below.astype(perm.dtype), axis=-1)
    hi = jnp.take_along_axis(perm, above.astype(perm.dtype), axis=-1)
    return lo, hi, weight


def lerp_selected(x, lo, hi, weight):
    """``x[lo] + weight (x[hi] - x[lo])`` along the last axis (torch's ``lerp``: from the upper
    end for weights >= 1/2), exactly ``x[lo]`` where ``lo == hi`` (no ``inf - inf``)."""
    a = jnp.take_along_axis(x, lo, axis=-1)
    b = jnp.take_along_axis(x, hi, axis=-1)
    mixed = jnp.where(weight < 0.5, a + weight * (b - a), b - (b - a) * (1 - weight))
    return jnp.where(lo == hi, a, mixed)
