"""Small guards (the double-``where``, used by every family) and elementwise factors. Part of
``jaxrules.partials``."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy import special

__all__ = [  # the helpers jaxrules.partials re-exports (formulas write P.<name>)
    "abs2_reciprocal", "arctan2_factors", "clip_masks", "copysign_factor", "expand_reduced", "i1_factor",
    "i1e_factor", "logit_factor", "multigammaln_factor", "nan_factor", "pow_base_factor", "pow_exponent_factor",
    "pow_scalar_exponent_factor", "promoted", "promoted_dtype", "reduced_size", "safe_reciprocal", "sgn",
    "sgn_parts", "sinc_derivative", "terms", "times", "use_power_ops", "with_rank", "xlogy_factors"
]

# ----------------------------------------------------------------------------------------------
# Explicit promotion: what jax.numpy's standard promotion would do implicitly, written out, so a
# formula computes the same values for a user who sets ``jax_numpy_dtype_promotion="strict"``.


def with_rank(x, ndim):
    """``x`` with leading unit axes up to rank ``ndim``: the broadcast that implicit rank
    promotion would make, written out, so the formulas run under ``jax_numpy_rank_promotion="raise"``."""
    return lax.expand_dims(jnp.asarray(x), tuple(range(ndim - x.ndim)))


def promoted_dtype(*args):
    """``jnp.result_type(*args)`` on JAX's standard lattice (weak types included), whatever the
    user's ``jax_numpy_dtype_promotion``: the dtype an implicit promotion of ``args`` gives."""
    with jax.numpy_dtype_promotion("standard"):
        return jnp.result_type(*args)


def promoted(*args):
    """``args`` cast to ``promoted_dtype(*args)``: the operands an implicit promotion would
    produce, hence the same results under strict promotion."""
    dtype = promoted_dtype(*args)
    return tuple(jnp.asarray(a).astype(dtype) for a in args)


# ----------------------------------------------------------------------------------------------
# Tangents: a JVP formula's tangent is ``None`` where it is zero.


def terms(*terms):
    """Sum of the non-``None`` terms (a zero tangent contributes nothing, not ``0 * inf``);
    ``None`` (zero) when there are none."""
    present = [t for t in terms if t is not None]
    if not present:
        return None
    out = present[0]
    for t in present[1:]:
        rank = max(out.ndim, t.ndim)
        out = with_rank(out, rank) + with_rank(t, rank)
    return out


def times(factor, t):
    """``factor * t``; ``None`` (zero) for a ``None`` tangent."""
    return None if t is None else factor * t


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
    return x * safe_reciprocal(mag, mag == 0).astype(x.dtype)


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
# Elementwise factors.


# The power factors raise x to a power with the power ops themselves, so that their own
# derivatives (second order and up) follow the same conventions at x = 0. Only those ops' formulas
# call them, and the module that defines the ops hands them over as it defines them
# (``use_power_ops``): this layer names no op module.
_POWER_OPS: dict = {}


def use_power_ops(*, power, power_scalar_exponent) -> None:
    """The ops ``power(x, y)`` (same dtype) and ``power_scalar_exponent(x, exponent=e)`` that
    ``pow_base_factor`` and ``pow_scalar_exponent_factor`` raise x with."""
    _POWER_OPS.update(power=power, power_scalar_exponent=power_scalar_exponent)


def sgn_parts(x):
    """``(sgn(x), 1/(2|x|))`` with both 0 at x = 0 (complex ``sgn_backward``)."""
    mag = jnp.abs(x)
    return x * safe_reciprocal(mag, mag == 0).astype(x.dtype), 0.5 * safe_reciprocal(mag, mag == 0)


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
    return exponent * _POWER_OPS["power_scalar_exponent"](x, exponent=exponent - 1)


def pow_base_factor(x, y):
    """``y x^(y-1)``, 0 where y = 0 (seed ``pow_backward_self``)."""
    zero = y == 0
    y_safe = jnp.where(zero, 1, y)
    return jnp.where(zero, 0, y_safe * _POWER_OPS["power"](x, y_safe - 1))


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
    return jnp.where(jnp.isnan(x), jnp.nan, factor).astype(promoted_dtype(x, y))


def sinc_derivative(x):
    """``d sinc / dx = (cos(pi x) - sinc(x)) / x``; the Taylor series
    ``-pi^2 x/3 + pi^4 x^3/30`` for ``|pi x| < 1e-2`` (no cancellation; 0 at 0). ``sinc`` is
    written out as ``sin(pi x) / (pi x)`` (``x`` is never 0 there), as the op's primal."""
    small = jnp.abs(math.pi * x) < 1e-2
    x_safe = jnp.where(small, 1, x)
    pi_x = math.pi * x_safe
    exact = (jnp.cos(pi_x) - jnp.sin(pi_x) / pi_x) / x_safe
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
    return special.i0(x) - _bessel_ratio(x, out)


def i1e_factor(x, out):
    """``i0e(x) - i1e(x) (sign(x) + 1/x)``; 1/2 at 0 (torch ``i1e_backward``)."""
    return special.i0e(x) - jnp.sign(x) * out - _bessel_ratio(x, out)


def multigammaln_factor(a, d):
    """``sum_{i<d} digamma(a - i/2)`` (seed ``mvlgamma_backward``)."""
    return sum(special.digamma(a - i / 2) for i in range(d))


def xlogy_factors(x, y):
    """``(log y, x / y)``: the x-factor ``log y`` also at x = 0 (torch 2.13's
    ``xlogy(grad, y)``, JAX's), 0 where x = 0 and y <= 0 (torch's ``masked_fill``: x log y is
    not defined near there); the y-factor 0 where x = 0 (x log y is identically 0 along x = 0)
    unless y is NaN, where it is NaN as torch's ``grad * x / y`` (the value is NaN there)."""
    zero = x == 0
    masked = zero & (y <= 0)
    dx = jnp.where(masked, 0, jnp.log(jnp.where(masked, 1, y)))
    flat = zero & ~jnp.isnan(y)
    return dx, jnp.where(flat, 0, x / jnp.where(flat, 1, y))


def nan_factor(mask, dtype):
    """NaN where ``mask``, 1 elsewhere: multiplied into a value or a derivative, it marks the
    entries (or, with a scalar ``mask``, the whole array) as NaN (a mask, not a branch: the
    finite path gains one comparison and one multiply)."""
    return jnp.where(mask, jnp.nan, 1).astype(dtype)
