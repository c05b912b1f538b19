"""Elementwise ops: primal, residuals, JVP and VJP formulas of each, side by side (gathered in
``jvp_rules`` and ``vjp_rules``). Public through ``jaxrules.numpy`` and ``jaxrules.scipy.special``."""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
from jax import Array
from jax.scipy import special as jsp_special
from jax.typing import ArrayLike

from jaxrules import _validate as V
from jaxrules import partials as P
from jaxrules._namespace import exported_as
from jaxrules.mechanism import define_op
from jaxrules.partials import real_inner

# ----------------------------------------------------------------------------------------------
# Ops

def _save_x_and_out(out, x, **_):
    return x, out

def _save_sign(out, x):
    """``sgn(x)``: int8 for real x (all the backward needs; built from two comparisons: forward
    and backward 0.355 ms on 2048x1024 on a 2-core CPU, against 0.381 ms from a float sign and
    its conversion and 0.348 ms for JAX's autodiff, timed interleaved), complex for complex x."""
    if jnp.iscomplexobj(x):
        return P.sgn(x)
    return (x > 0).astype(jnp.int8) - (x < 0).astype(jnp.int8)


def abs_jvp(sign, t, **_):
    """``Re(conj(sgn x) t)``; 0 at x = 0 (seed ``abs_backward`` via ``sgn``)."""
    return real_inner(sign.astype(P.promoted_dtype(sign, t)), t, (), False)


def abs_vjp(sign, ct, **_):
    """``conj(sgn x) ct`` (seed ``abs_backward``; JAX convention). ``sign`` is the saved
    ``sgn(x)`` (int8 for real x: a quarter of the memory of x)."""
    dtype = P.promoted_dtype(sign, ct)
    return (jnp.conj(sign.astype(dtype)) * ct.astype(dtype),)


abs_op = define_op("abs", lambda x: jnp.abs(x), abs_jvp, abs_vjp, _save_sign)


def sign_jvp(x, t, **_):
    """Real: 0. Complex: ``(t - sgn(x)^2 conj(t)) / (2|x|)``, 0 at x = 0 (seed ``sgn_backward``,
    which torch uses for both directions)."""
    if not jnp.iscomplexobj(x):
        return jnp.zeros_like(t)
    s, inv = P.sgn_parts(x)
    return (t - s * s * jnp.conj(t)) * inv.astype(s.dtype)


def sign_vjp(x, ct, **_):
    """Real: 0. Complex: ``(ct - conj(sgn(x)^2 ct)) / (2|x|)``, 0 at x = 0 (transpose of seed
    ``sgn_backward``)."""
    if not jnp.iscomplexobj(x):
        return (None,)
    s, inv = P.sgn_parts(x)
    return ((ct - jnp.conj(s * s * ct)) * inv.astype(s.dtype),)


sign_op = define_op("sign", lambda x: jnp.sign(x), sign_jvp, sign_vjp)


def angle_jvp(x, t, **_):
    """Real: 0. Complex: ``Im(conj(x) t) / |x|^2``, 0 at x = 0 (seed ``angle_backward``)."""
    if not jnp.iscomplexobj(x):
        return jnp.zeros_like(t)
    return (jnp.conj(x) * t).imag * P.abs2_reciprocal(x)


def angle_vjp(x, ct, **_):
    """Real: 0. Complex: ``-i conj(x) ct / |x|^2``, 0 at x = 0 (seed ``angle_backward``,
    conjugated)."""
    if not jnp.iscomplexobj(x):
        return (None,)
    return (-1j * jnp.conj(x) * ct.astype(x.dtype) * P.abs2_reciprocal(x).astype(x.dtype),)


angle_op = define_op("angle", lambda x: jnp.angle(x), angle_jvp, angle_vjp)


def arctan2_jvp(res, ty, tx, **_):
    """``(x ty - y tx) / (x^2 + y^2)``; 0 at (0, 0) (seed ``atan2_backward``, guarded)."""
    dy_factor, dx_factor = P.arctan2_factors(*res)
    return P.terms(P.times(dy_factor, ty), P.times(dx_factor, tx))


def arctan2_vjp(res, ct, **_):
    """``(x ct, -y ct) / (x^2 + y^2)``, 0 at (0, 0) (seed ``atan2_backward``)."""
    dy_factor, dx_factor = P.arctan2_factors(*res)
    return dy_factor * ct, dx_factor * ct


arctan2_op = define_op("arctan2", jnp.arctan2, arctan2_jvp, arctan2_vjp)


def power_jvp(res, tx, ty, **_):
    """``y x^(y-1) tx + x^y log(x) ty`` with the seed's zero cases (``pow_backward_self``,
    ``pow_backward_exponent``)."""
    x, y, out = res
    dx = None if tx is None else P.pow_base_factor(x, y) * tx
    dy = None if ty is None else P.pow_exponent_factor(x, y, out) * ty
    return P.terms(dx, dy)


def power_vjp(res, ct, **_):
    """``(y x^(y-1) ct, x^y log(x) ct)`` with the zero cases of seed ``pow_backward_self`` and
    ``pow_backward_exponent``."""
    x, y, out = res
    return P.pow_base_factor(x, y) * ct, P.pow_exponent_factor(x, y, out) * ct


power_op = define_op("power", jnp.power, power_jvp, power_vjp, lambda out, x, y: (x, y, out))


def power_scalar_exponent_jvp(x, t, *, exponent, **_):
    """``e x^(e-1) t``, 0 when e = 0 (seed ``pow_backward``)."""
    return P.pow_scalar_exponent_factor(x, exponent) * t


def power_scalar_exponent_vjp(x, ct, *, exponent, **_):
    """``e x^(e-1) ct``, 0 when e = 0 (seed ``pow_backward``)."""
    return (P.pow_scalar_exponent_factor(x, exponent) * ct,)


power_scalar_exponent_op = define_op("power_scalar_exponent", lambda x, *, exponent: jnp.power(x, exponent), power_scalar_exponent_jvp, power_scalar_exponent_vjp)


def power_scalar_base_jvp(res, t, *, base, **_):
    """``b^y log(b) t``, 0 where b = 0 and y >= 0 (seed ``pow_backward_exponent``, Scalar base)."""
    y, out = res
    return P.pow_exponent_factor(jnp.asarray(base, out.dtype), y, out) * t


def power_scalar_base_vjp(res, ct, *, base, **_):
    """``b^y log(b) ct``, 0 where b = 0 and y >= 0 (seed ``pow_backward_exponent``)."""
    y, out = res
    return (P.pow_exponent_factor(jnp.asarray(base, out.dtype), y, out) * ct,)


power_scalar_base_op = define_op("power_scalar_base", lambda y, *, base: jnp.power(jnp.asarray(base, y.dtype), y), power_scalar_base_jvp, power_scalar_base_vjp, lambda out, y, **_: (y, out))
P.use_power_ops(power=power_op, power_scalar_exponent=power_scalar_exponent_op)  # their derivative factors


def copysign_jvp(res, tx, ty, **_):
    """``(result / x) tx``, 0 at x = 0; nothing from the sign source (seed
    ``copysign_tensor_self_backward``)."""
    x, y = res
    if tx is None:
        return jnp.zeros(jnp.broadcast_shapes(x.shape, y.shape), x.dtype)
    return P.copysign_factor(x, y) * tx


def copysign_vjp(res, ct, **_):
    """``((result / x) ct, 0)``, 0 at x = 0 (seed ``copysign_tensor_self_backward``)."""
    return P.copysign_factor(*res) * ct, None


copysign_op = define_op("copysign", jnp.copysign, copysign_jvp, copysign_vjp)


def _sinc_primal(x):
    """``sin(pi x) / (pi x)``, 1 at 0: ``torch.sinc``'s and ``numpy.sinc``'s formula (NaN at
    +-inf, where sin is NaN). Written out rather than ``jax.numpy.sinc``, whose value at +-inf
    (0 from jax 0.12) and whose support under ``shard_map`` (jax 0.12's polynomial evaluation
    refuses an argument varying over a manual axis) depend on the installed JAX."""
    x = x if jnp.issubdtype(x.dtype, jnp.inexact) else x.astype(jnp.result_type(float))
    zero = x == 0
    pi_x = math.pi * jnp.where(zero, 1, x)
    return jnp.where(zero, jnp.ones((), x.dtype), jnp.sin(pi_x) / pi_x)


def sinc_jvp(x, t, **_):
    """``(cos(pi x) - sinc(x)) / x``, its Taylor series near 0 (value 0 at 0)."""
    return P.sinc_derivative(x) * t


def sinc_vjp(x, ct, **_):
    """``sinc'(x) ct`` (series near 0)."""
    return (P.sinc_derivative(x) * ct,)


sinc_op = define_op("sinc", _sinc_primal, sinc_jvp, sinc_vjp)


def log1p_jvp(x, t, **_):
    """``t / (1 + x)`` (seed ``log1p_backward``)."""
    return t / (1 + x)


def log1p_vjp(x, ct, **_):
    """``ct / (1 + x)`` (seed ``log1p_backward``; holomorphic, so no conjugate in JAX's
    convention)."""
    return (ct / (1 + x),)


log1p_op = define_op("log1p", jnp.log1p, log1p_jvp, log1p_vjp)


def deg2rad_jvp(res, t, **_):
    """``t pi / 180`` (seed ``deg2rad_backward``)."""
    return t * (math.pi / 180)


def deg2rad_vjp(res, ct, **_):
    """``ct pi / 180`` (seed ``deg2rad_backward``)."""
    return (ct * (math.pi / 180),)


deg2rad_op = define_op("deg2rad", jnp.deg2rad, deg2rad_jvp, deg2rad_vjp, lambda out, x: ())


def rad2deg_jvp(res, t, **_):
    """``t 180 / pi`` (seed ``rad2deg_backward``)."""
    return t * (180 / math.pi)


def rad2deg_vjp(res, ct, **_):
    """``ct 180 / pi`` (seed ``rad2deg_backward``)."""
    return (ct * (180 / math.pi),)


rad2deg_op = define_op("rad2deg", jnp.rad2deg, rad2deg_jvp, rad2deg_vjp, lambda out, x: ())


def clip_jvp(res, tx, tlo, thi, **_):
    """Seed ``clamp_jvp``: ``where(lo > hi, hi_t, where(x < lo, lo_t, where(x > hi, hi_t, x_t)))``."""
    pick_x, pick_lo, pick_hi = P.clip_masks(*res)
    return P.terms(
        None if tx is None else jnp.where(pick_x, tx, 0),
        None if tlo is None else jnp.where(pick_lo, tlo, 0),
        None if thi is None else jnp.where(pick_hi, thi, 0),
    )


def clip_vjp(res, ct, **_):
    """The transpose of seed ``clamp_jvp``: the cotangent goes to whichever of x, lo, hi the
    output follows (seed ``clamp_backward`` / ``clamp_backward_min_max``, except at lo == hi
    with x < lo, where torch's backward drops the gradient and its JVP gives it to lo)."""
    pick_x, pick_lo, pick_hi = P.clip_masks(*res)
    return jnp.where(pick_x, ct, 0), jnp.where(pick_lo, ct, 0), jnp.where(pick_hi, ct, 0)


clip_op = define_op(
    "clip", lambda x, lo, hi: jnp.minimum(jnp.maximum(x, lo), hi), clip_jvp, clip_vjp
)


def logit_jvp(x, t, *, eps, **_):
    """``t / (x (1 - x))`` inside ``[eps, 1 - eps]``, 0 outside; without eps, NaN outside
    ``[0, 1]`` (seed ``infinitely_differentiable_logit_backward``)."""
    return P.logit_factor(x, eps) * t


def logit_vjp(x, ct, *, eps, **_):
    """``ct / (x (1 - x))`` in the eps-window (seed ``infinitely_differentiable_logit_backward``)."""
    return (P.logit_factor(x, eps) * ct,)


logit_op = define_op("logit", lambda x, *, eps: jsp_special.logit(x if eps is None else jnp.clip(x, eps, 1 - eps)), logit_jvp, logit_vjp)


def i1_jvp(res, t, **_):
    """``i0(x) - i1(x)/x``, 1/2 at 0 (torch ``i1_backward``)."""
    return P.i1_factor(*res) * t


def i1_vjp(res, ct, **_):
    """``(i0(x) - i1(x)/x) ct`` (torch ``i1_backward``)."""
    return (P.i1_factor(*res) * ct,)


i1_op = define_op("i1", jsp_special.i1, i1_jvp, i1_vjp, _save_x_and_out)


def i1e_jvp(res, t, **_):
    """``i0e(x) - i1e(x) (sign(x) + 1/x)``, 1/2 at 0 (torch ``i1e_backward``)."""
    return P.i1e_factor(*res) * t


def i1e_vjp(res, ct, **_):
    """``(i0e(x) - i1e(x)(sign x + 1/x)) ct`` (torch ``i1e_backward``)."""
    return (P.i1e_factor(*res) * ct,)


i1e_op = define_op("i1e", jsp_special.i1e, i1e_jvp, i1e_vjp, _save_x_and_out)


def multigammaln_jvp(a, t, *, d, **_):
    """``sum_{i<d} digamma(a - i/2) t`` (seed ``mvlgamma_backward``)."""
    return P.multigammaln_factor(a, d) * t


def multigammaln_vjp(a, ct, *, d, **_):
    """``sum_{i<d} digamma(a - i/2) ct`` (seed ``mvlgamma_backward``)."""
    return (P.multigammaln_factor(a, d) * ct,)


multigammaln_op = define_op("multigammaln", lambda a, *, d: jsp_special.multigammaln(a, d), multigammaln_jvp, multigammaln_vjp)


def xlogy_jvp(res, tx, ty, **_):
    """``log(y) tx + (x / y) ty`` (seed ``xlogy.Tensor`` in derivatives.yaml): ``log y`` 0 where
    x = 0 and y <= 0 (torch's mask); ``x / y`` 0 where x = 0 and y is not NaN (torch: NaN at
    x = y = 0)."""
    x, y = res
    dx_factor, dy_factor = P.xlogy_factors(x, y)
    return P.terms(P.times(dx_factor, tx), P.times(dy_factor, ty))


def xlogy_vjp(res, ct, **_):
    """``(log(y) ct, (x/y) ct)`` (seed ``xlogy.Tensor``): ``log y`` 0 where x = 0 and y <= 0
    (torch's mask), ``x / y`` 0 where x = 0 and y is not NaN."""
    dx_factor, dy_factor = P.xlogy_factors(*res)
    return dx_factor * ct, dy_factor * ct


xlogy_op = define_op("xlogy", jsp_special.xlogy, xlogy_jvp, xlogy_vjp)


# ----------------------------------------------------------------------------------------------
# Ops: polar: z = r e^{i theta} (real arguments, complex output; formulas here, beside the op)

def _polar_primal(r, theta):
    return jax.lax.complex(r * jnp.cos(theta), r * jnp.sin(theta))


def _polar_save(out, r, theta):
    """``(r, e^{i theta})``: the unit phasor, which the seed reads as ``sgn(result)`` (0 where
    r = 0, so it is recomputed from the angle instead)."""
    return r, _polar_primal(jnp.ones_like(theta), theta)


def _polar_jvp(res, tr, ttheta):
    """``dz = e^{i theta} (dr + i r dtheta)`` (torch's polar JVP in derivatives.yaml)."""
    r, unit = res
    r, tr, ttheta = (None if v is None else v.astype(unit.dtype) for v in (r, tr, ttheta))
    if tr is None:
        return unit * (1j * r * ttheta)
    return unit * (tr if ttheta is None else tr + 1j * r * ttheta)


def _polar_vjp(res, ct):
    """Seed ``polar_backward`` in JAX's convention: with ``w = ct e^{i theta}``,
    ``g_r = Re(w)`` and ``g_theta = -r Im(w)`` (the seed's ``Re(conj(g) sgn(z))`` and
    ``Re(conj(g) i z)``, with the phasor in place of ``sgn(z)``, which is 0 at r = 0)."""
    r, unit = res
    w = ct * unit
    return jnp.real(w), -r * jnp.imag(w)


polar_op = define_op("polar", _polar_primal, _polar_jvp, _polar_vjp, _polar_save)


# ----------------------------------------------------------------------------------------------
# Public functions: jax.numpy / jax.scipy.special signatures

@exported_as("jaxrules.numpy.abs", "jaxrules.numpy.absolute")
def abs(x: ArrayLike, /) -> Array:  # noqa: A001 - mirrors jax.numpy.abs
    """``|x|`` for real and complex x; derivative ``sgn(x)``, 0 at 0 (seed ``abs_backward``).
    Mirrors ``torch.abs``; also ``jaxrules.numpy.absolute``.

    Args:
        x: the input. Integer and boolean input is passed to ``jax.numpy.abs`` (no rule).

    Returns:
        ``|x|``: real (the matching real dtype) for complex ``x``, else ``x``'s dtype.
    """
    x = V.array("abs", "x", x, inexact=False)
    return abs_op(x) if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.abs(x)


@exported_as("jaxrules.numpy.sign")
def sign(x: ArrayLike, /) -> Array:
    """``sign(x)``; complex: ``x/|x|`` (torch.sgn) with the derivative of seed ``sgn_backward``
    (JAX's own derivative of complex sign is wrongly 0). Real: derivative 0. Mirrors
    ``torch.sgn`` / ``torch.sign``.

    Args:
        x: the input, real or complex. Integer and boolean input is passed to
            ``jax.numpy.sign`` (no rule).

    Returns:
        -1, 0 or 1 for real ``x``; ``x/|x|`` (0 at 0) for complex ``x``; ``x``'s dtype.
    """
    x = V.array("sign", "x", x, inexact=False)
    return sign_op(x) if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.sign(x)


@exported_as("jaxrules.numpy.angle")
def angle(z: ArrayLike, deg: bool = False) -> Array:
    """Argument of ``z``; derivative ``Im(dz / z)`` (0 at z = 0 and for real z; seed
    ``angle_backward``). Mirrors ``torch.angle``.

    Args:
        z: the input, real or complex (integer and boolean input is promoted to the default
            float dtype).
        deg: return degrees instead of radians (through ``rad2deg``).

    Returns:
        The argument of ``z`` in ``[-pi, pi]`` (degrees with ``deg``), a real array.
    """
    out = angle_op(V.array("angle", "z", z))
    return rad2deg(out) if deg else out


@exported_as("jaxrules.numpy.arctan2", "jaxrules.numpy.atan2")
def arctan2(x1: ArrayLike, x2: ArrayLike, /) -> Array:
    """``atan2(x1, x2)``; derivative ``(x2, -x1)/(x1^2 + x2^2)``, 0 at (0, 0) (seed
    ``atan2_backward``, which is NaN there). Mirrors ``torch.atan2``; also
    ``jaxrules.numpy.atan2``.

    Args:
        x1: the y-coordinates (integer and boolean input is promoted to float).
        x2: the x-coordinates, broadcastable with ``x1``.

    Returns:
        The angle of the point ``(x2, x1)`` in ``[-pi, pi]``, of the broadcast shape.
    """
    x1, x2 = V.inexact_arrays("arctan2", x1=x1, x2=x2)
    V.broadcast("arctan2", x1=x1, x2=x2)
    return arctan2_op(x1, x2)


def _is_python_scalar(v) -> bool:
    return isinstance(v, numbers.Number) and not isinstance(v, bool)


@exported_as("jaxrules.numpy.power", "jaxrules.numpy.pow")
def power(x1: ArrayLike, x2: ArrayLike, /) -> Array:
    """``x1 ** x2`` with torch's zero cases (seed ``pow_backward``, ``pow_backward_self``,
    ``pow_backward_exponent``): ``x**0`` has derivative 0 at x = 0 (JAX: NaN) and
    ``d/dy 0**y`` is 0 for y >= 0. A Python-number exponent or base is held fixed. Mirrors
    ``torch.pow``; also ``jaxrules.numpy.pow``.

    Args:
        x1: the base. With a Python-number ``x2``, an integer or boolean ``x1`` is passed to
            ``jax.numpy.power`` (no rule); otherwise an integer or boolean array base is
            promoted to float. A Python number (not a bool) is a fixed base.
        x2: the exponent, broadcastable with ``x1``. A Python number (not a bool) is a fixed
            exponent; an array exponent is promoted to float, except that integer (and boolean)
            operands both go to ``jax.numpy.power``: an integer result, as JAX's.

    Returns:
        ``x1 ** x2`` of the broadcast shape, in the two operands' result dtype.

    Example:
        >>> import jax, jaxrules.numpy as rnp
        >>> print(rnp.power(2.0, 3.0), jax.grad(lambda x: rnp.power(x, 0.0))(0.0))  # torch's 0; jax.numpy's: nan
        8.0 0.0
    """
    if _is_python_scalar(x2) and not _is_python_scalar(x1):
        x1 = V.array("power", "x1", x1, inexact=False)
        if not jnp.issubdtype(x1.dtype, jnp.inexact):
            return jnp.power(x1, x2)
        return power_scalar_exponent_op(x1, exponent=x2)
    if _is_python_scalar(x1) and not _is_python_scalar(x2):
        x2 = V.array("power", "x2", x2, inexact=False)
        if not (jnp.issubdtype(x2.dtype, jnp.inexact) or isinstance(x1, float | complex)):
            return jnp.power(x1, x2)  # integer ** integer: jax.numpy's integer power (no rule)
        return power_scalar_base_op(V.array("power", "x2", x2), base=x1)
    x1, x2 = V.array("power", "x1", x1, inexact=False), V.array("power", "x2", x2, inexact=False)
    if not (jnp.issubdtype(x1.dtype, jnp.inexact) or jnp.issubdtype(x2.dtype, jnp.inexact)):
        return jnp.power(x1, x2)  # integer ** integer: jax.numpy's integer power (no rule)
    x1, x2 = V.array("power", "x1", x1), V.array("power", "x2", x2)
    V.broadcast("power", x1=x1, x2=x2)
    dtype = jnp.result_type(x1, x2)
    return power_op(x1.astype(dtype), x2.astype(dtype))


@exported_as("jaxrules.numpy.copysign")
def copysign(x1: ArrayLike, x2: ArrayLike, /) -> Array:
    """``|x1|`` with the sign of ``x2``; derivative ``result/x1``, 0 at x1 = 0 (seed
    ``copysign_tensor_self_backward``; JAX gives +-1 there), none to ``x2``. Mirrors
    ``torch.copysign``.

    Args:
        x1: the magnitudes (integer and boolean input is promoted to float).
        x2: the signs, broadcastable with ``x1`` (no derivative flows to it).

    Returns:
        ``|x1|`` with ``x2``'s sign (signed zeros included), of the broadcast shape.
    """
    x1, x2 = V.inexact_arrays("copysign", x1=x1, x2=x2)
    V.broadcast("copysign", x1=x1, x2=x2)
    return copysign_op(x1, x2)


@exported_as("jaxrules.numpy.sinc")
def sinc(x: ArrayLike, /) -> Array:
    """``sin(pi x)/(pi x)``; derivative by its Taylor series near 0 (exact 0 at 0). Mirrors
    ``torch.sinc``.

    Args:
        x: the input (integer and boolean input is promoted to float).

    Returns:
        The normalized sinc of ``x`` (1 at 0).
    """
    return sinc_op(V.array("sinc", "x", x))


@exported_as("jaxrules.numpy.log1p")
def log1p(x: ArrayLike, /) -> Array:
    """``log(1 + x)``; derivative ``1/(1 + x)`` (seed ``log1p_backward``). Mirrors
    ``torch.log1p``.

    Args:
        x: the input, real or complex (integer and boolean input is promoted to float).

    Returns:
        ``log(1 + x)`` (NaN below -1 for real ``x``, -inf at -1).
    """
    return log1p_op(V.array("log1p", "x", x))


@exported_as("jaxrules.numpy.deg2rad", "jaxrules.numpy.radians")
def deg2rad(x: ArrayLike, /) -> Array:
    """Degrees to radians (seed ``deg2rad_backward``). Mirrors ``torch.deg2rad``; also
    ``jaxrules.numpy.radians``.

    Args:
        x: angles in degrees (integer and boolean input is promoted to float).

    Returns:
        ``x * pi / 180``.
    """
    return deg2rad_op(V.array("deg2rad", "x", x))


@exported_as("jaxrules.numpy.rad2deg", "jaxrules.numpy.degrees")
def rad2deg(x: ArrayLike, /) -> Array:
    """Radians to degrees (seed ``rad2deg_backward``). Mirrors ``torch.rad2deg``; also
    ``jaxrules.numpy.degrees``.

    Args:
        x: angles in radians (integer and boolean input is promoted to float).

    Returns:
        ``x * 180 / pi``.
    """
    return rad2deg_op(V.array("rad2deg", "x", x))


@exported_as("jaxrules.numpy.clip")
def clip(arr: ArrayLike | None = None, /, min: ArrayLike | None = None, max: ArrayLike | None = None) -> Array:  # noqa: A002 - mirrors jax.numpy.clip
    """``minimum(maximum(arr, min), max)`` with torch's derivative: the full gradient to
    ``arr`` on the closed interval (JAX splits it in half at the bounds), to ``min``/``max``
    where they are active, to ``max`` when min > max (seed ``clamp_backward``,
    ``clamp_backward_min_max``, ``clamp_jvp``). Mirrors ``torch.clamp``.

    Args:
        arr: the array to clip (required; ``TypeError`` if missing). Integer and boolean input
            is passed to ``jax.numpy.clip`` (no rule).
        min: the lower bound, broadcastable with ``arr``; None: no lower bound.
        max: the upper bound, broadcastable with ``arr``; None: no upper bound. Neither bound:
            ``arr`` itself, as ``jax.numpy.clip`` (``jaxrules.torch.clamp`` raises, as torch).

    Returns:
        ``arr`` clipped to ``[min, max]`` (``max`` where ``min > max``), of the broadcast shape.

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.numpy as rnp
        >>> x = jnp.array([1.0, 2.0, 3.0, 4.0])
        >>> print(rnp.clip(x, 2.0, 3.0))
        [2. 2. 3. 3.]
        >>> print(jax.grad(lambda x: rnp.clip(x, 2.0, 3.0).sum())(x))  # ties pass the gradient, as torch
        [0. 1. 1. 0.]
    """
    if arr is None:
        raise TypeError("clip: the array argument 'arr' is required")
    x = V.array("clip", "arr", arr, inexact=False)
    if min is None and max is None:  # jax.numpy's identity
        return x
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.clip(x, min, max)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        raise ValueError("clip: complex input is not supported (jax.numpy's clip refuses it too)")
    bounds = {name: v for name, v in (("min", min), ("max", max)) if v is not None}
    x, *given = V.inexact_arrays("clip", arr=x, **bounds)
    given = dict(zip(bounds, given))
    lo = given.get("min", jnp.asarray(-jnp.inf, x.dtype))
    hi = given.get("max", jnp.asarray(jnp.inf, x.dtype))
    V.broadcast("clip", arr=x, min=lo, max=hi)
    return clip_op(x, lo, hi)


@exported_as("jaxrules.scipy.special.logit")
def logit(x: ArrayLike, *, eps: float | None = None) -> Array:
    """``log(x/(1 - x))``; with ``eps`` (torch's argument) x is first clamped to
    ``[eps, 1 - eps]`` and the derivative ``1/(x(1 - x))`` is kept on the closed window (seed
    ``infinitely_differentiable_logit_backward``); without eps, NaN outside [0, 1]. Mirrors
    ``torch.logit``.

    Args:
        x: probabilities (integer and boolean input is promoted to float).
        eps: a Python or NumPy real number in ``[0, 0.5]`` (a static value, not a traced
            one), or None for no clamping.

    Returns:
        The log-odds of ``x`` (clamped to ``[eps, 1 - eps]`` first when ``eps`` is given).
    """
    if eps is not None and not (isinstance(eps, numbers.Real) and 0 <= eps <= 0.5):
        raise ValueError(f"logit: eps must be a number in [0, 0.5], got {eps!r}")
    return logit_op(V.array("logit", "x", x), eps=None if eps is None else float(eps))


@exported_as("jaxrules.scipy.special.i1")
def i1(x: ArrayLike) -> Array:
    """Modified Bessel function of order 1; derivative ``i0(x) - i1(x)/x`` (1/2 at 0). Mirrors
    ``torch.special.i1``.

    Args:
        x: the input, real (integer and boolean input is promoted to float).

    Returns:
        ``I_1(x)``.
    """
    return i1_op(V.array("i1", "x", x))


@exported_as("jaxrules.scipy.special.i1e")
def i1e(x: ArrayLike) -> Array:
    """Exponentially scaled ``i1``; derivative ``i0e(x) - i1e(x)(sign(x) + 1/x)`` (1/2 at 0).
    Mirrors ``torch.special.i1e``.

    Args:
        x: the input, real (integer and boolean input is promoted to float).

    Returns:
        ``exp(-|x|) I_1(x)``.
    """
    return i1e_op(V.array("i1e", "x", x))


@exported_as("jaxrules.scipy.special.multigammaln")
def multigammaln(a: ArrayLike, d: int) -> Array:
    """Log of the multivariate gamma function of dimension ``d``; derivative
    ``sum_{i<d} digamma(a - i/2)`` (seed ``mvlgamma_backward``). Mirrors
    ``torch.special.multigammaln``.

    Args:
        a: the argument (integer and boolean input is promoted to float); the function is
            finite for ``a > (d - 1)/2``.
        d: the dimension, a positive Python int (``ValueError`` otherwise; not traced).

    Returns:
        ``log Gamma_d(a)``, of ``a``'s shape.
    """
    if not isinstance(d, numbers.Integral) or d < 1:
        raise ValueError(f"multigammaln: d must be a positive int, got {d!r}")
    return multigammaln_op(V.array("multigammaln", "a", a), d=int(d))


@exported_as("jaxrules.scipy.special.xlogy")
def xlogy(x: ArrayLike, y: ArrayLike) -> Array:
    """``x log(y)``, 0 where x = 0; derivatives ``log y`` (also at x = 0, as torch and JAX; 0
    where x = 0 and y <= 0, torch's mask) and ``x/y`` (0 where x = 0: torch's is NaN at x = y =
    0, where x log y is identically 0 in y; NaN at x = 0, y = NaN, as torch). Mirrors
    ``torch.special.xlogy``.

    Args:
        x: the factor (integer and boolean input is promoted to float).
        y: the argument of the log, broadcastable with ``x``.

    Returns:
        ``x * log(y)`` with 0 where ``x == 0``, of the broadcast shape.
    """
    x, y = V.array("xlogy", "x", x), V.array("xlogy", "y", y)
    V.broadcast("xlogy", x=x, y=y)
    return xlogy_op(x, y)


@exported_as("jaxrules.numpy.polar")
def polar(abs: ArrayLike, angle: ArrayLike) -> Array:  # noqa: A002 - torch's argument name
    """``abs * (cos(angle) + i sin(angle))`` (seed ``polar_backward``). Mirrors ``torch.polar``
    (jax.numpy has no ``polar``); derivative ``e^{i angle} (d abs + i abs d angle)``, also at
    ``abs = 0``, where torch's backward gives ``abs`` no gradient.

    Args:
        abs: the magnitudes, real (integer and boolean input is promoted to float; torch
            requires float).
        angle: the angles in radians, real, broadcastable with ``abs`` (torch requires the
            same dtype as ``abs``; here the two are promoted to a common float dtype).

    Returns:
        The complex array of the broadcast shape (complex64 for float32 or narrower input,
        complex128 for float64).
    """
    r, theta = V.array("polar", "abs", abs), V.array("polar", "angle", angle)
    for name, x in (("abs", r), ("angle", theta)):
        if jnp.iscomplexobj(x):
            raise TypeError(f"polar: argument {name!r} must be real, got {x.dtype}")
    V.broadcast("polar", abs=r, angle=theta)
    dtype = P.promoted_dtype(jnp.result_type(r, theta), jnp.float32)
    return polar_op(r.astype(dtype), theta.astype(dtype))
