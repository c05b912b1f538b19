"""Activations and the softmax family (``jaxrules.nn``, jax.nn's names and signatures, torch's
extra arguments): primal, residuals, JVP and VJP formulas of each, side by side (gathered in
``jvp_rules`` / ``vjp_rules``); the derivative factors are in ``partials`` (a factor no other
formula uses may sit beside its op)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.typing import ArrayLike

from jaxrules import _validate as V
from jaxrules import partials as P
from jaxrules._namespace import exported_as
from jaxrules.checking import runtime_check
from jaxrules.mechanism import define_op

# ----------------------------------------------------------------------------------------------
# Ops

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def pointwise_jvp(res, *tangents, derivative, **params):
    """``sum_i (d f / d x_i) t_i``."""
    inputs = res if isinstance(res, tuple) else (res,)
    factors = derivative(*inputs, **params)
    factors = factors if isinstance(factors, tuple) else (factors,)
    return P.terms(*(P.times(f, t) for f, t in zip(factors, tangents)))


def pointwise_vjp(res, ct, *, derivative, **params):
    """``(d f / d x_i) ct`` for each input (broadcast inputs are summed back by the mechanism)."""
    inputs = res if isinstance(res, tuple) else (res,)
    factors = derivative(*inputs, **params)
    factors = factors if isinstance(factors, tuple) else (factors,)
    return tuple(f * ct for f in factors)


def pointwise_op(name, primal, derivative):
    """A pointwise op: ``primal(*inputs, **params)``, ``derivative(*inputs, **params)`` the factor
    (or the tuple of factors, one per input) of ``jvp_rules.pointwise_jvp`` /
    ``vjp_rules.pointwise_vjp``."""
    op = define_op(name, primal, pointwise_jvp, pointwise_vjp)
    return lambda *inputs, **params: op(*inputs, derivative=derivative, **params)


def _elu_primal(x, alpha, *, scale, celu, **_):
    neg = jnp.minimum(x, 0)
    return scale * jnp.where(x > 0, x, alpha * jnp.expm1(neg / alpha if celu else neg))


def _softplus_primal(x, beta, threshold, **_):
    bx = x * beta
    return jnp.where(bx > threshold, x, jax.nn.softplus(jnp.minimum(bx, threshold)) / beta)


def _gelu_primal(x, *, approximate, **_):
    """The tanh form as ``jax.nn.gelu``; the exact form as torch's kernels, ``x (1 + erf(x /
    sqrt 2)) / 2``, computed in float32 for half-precision x. On an H200 its forward takes 0.53x
    the time of ``jax.nn.gelu``'s ``x erfc(-x / sqrt 2) / 2`` at 4096x32768 in bfloat16 (XLA
    evaluates all three branches of erfc). In the far negative tail it gives torch's values, with
    a relative error over 1e-3 below x = -3.7 and 0 below -5.2 in float32 (erf rounds to -1),
    where the erfc form stays relatively accurate."""
    if approximate:
        return jax.nn.gelu(x, approximate=True)
    xf = x.astype(P.stat_dtype(x.dtype))
    return (0.5 * xf * (1 + lax.erf(xf * (1 / math.sqrt(2))))).astype(x.dtype)


_threshold = pointwise_op("threshold", lambda x, threshold, value, **_: jnp.where(x <= threshold, value, x).astype(x.dtype),
                          P.threshold_derivatives)
_silu = pointwise_op("silu", lambda x, **_: jax.nn.silu(x), P.silu_derivative)
_mish = pointwise_op("mish", lambda x, **_: x * jnp.tanh(jax.nn.softplus(x)), P.mish_derivative)
_gelu = pointwise_op("gelu", _gelu_primal, P.gelu_derivative)
_elu = pointwise_op("elu", _elu_primal, P.elu_derivatives)
_softplus = pointwise_op("softplus", _softplus_primal, P.softplus_derivatives)
_log_sigmoid = pointwise_op("log_sigmoid", lambda x, **_: jax.nn.log_sigmoid(x), P.log_sigmoid_derivative)
_hardtanh = pointwise_op("hardtanh", lambda x, min_val, max_val, **_: jnp.clip(x, min_val, max_val).astype(x.dtype),
                         P.hardtanh_derivatives)
_leaky_relu = pointwise_op("leaky_relu", lambda x, slope, **_: jnp.where(x > 0, x, x * slope).astype(x.dtype),
                           P.slope_derivatives)


def _hardsigmoid_derivative(x):
    """1/6 for -3 < x < 3, else 0 (torch's ``hardsigmoid_backward``: 0 at +-3)."""
    return jnp.where((x > -3) & (x < 3), 1 / 6, 0).astype(x.dtype)


_hardsigmoid = pointwise_op("hardsigmoid", lambda x, **_: (jnp.clip(x + 3, 0, 6) / 6).astype(x.dtype),
                            _hardsigmoid_derivative)
_hardswish = pointwise_op("hardswish", lambda x, **_: (x * jnp.clip(x + 3, 0, 6) / 6).astype(x.dtype), P.hardswish_derivative)
_prelu = pointwise_op("prelu", lambda x, w, **_: jnp.where(x > 0, x, w * x).astype(x.dtype), P.slope_derivatives)


def softmax_jvp(x, t, *, axis, **_):
    """``y (t - sum(y t))`` (the transpose of ``_softmax_backward_data``), y from the saved
    input."""
    e, s = P.softmax_parts(x, axis)
    y = e / s
    return y * (t - jnp.sum(y * t, axis=axis, keepdims=True))


def softmax_vjp(x, ct, *, axis, **_):
    """``y (ct - sum(ct y))`` (torch ``_softmax_backward_data``; its double backward, seed
    ``softmax_double_backward``, is the derivative of this formula), from the saved input as
    ``(ct / s - sum(ct e) / s^2) e`` with ``e = exp(x - max x)``, ``s = sum e``: the same product
    without the elementwise division that forms y (that division made the op 0.90x of JAX's
    autodiff on an H100; this form, JAX's own, runs at its speed)."""
    e, s = P.softmax_parts(x, axis)
    return ((ct / s - jnp.sum(ct * e, axis=axis, keepdims=True) / (s * s)) * e,)


softmax_op = define_op("softmax", lambda x, *, axis: jax.nn.softmax(x, axis=axis), softmax_jvp, softmax_vjp,
                       lambda out, x, **_: x)
def _log_softmax_primal(x, *, axis):
    """``x - max x - log(sum exp(x - max x))`` (jax.nn.log_softmax's arithmetic)."""
    _, s = P.softmax_parts(x, axis)
    return x - lax.stop_gradient(P.max_or_neg_inf(x, axis)) - jnp.log(s)


def log_softmax_jvp(res, t, *, axis, **_):
    """``t - sum(softmax t)``, ``softmax = e / s`` from the saved exponentials and row sums (0 at
    -inf logits)."""
    e, s = res
    return t - jnp.sum(e * t, axis=axis, keepdims=True) / s


def log_softmax_vjp(res, ct, *, axis, **_):
    """``ct - softmax sum(ct)`` (torch ``_log_softmax_backward_data``, which takes the softmax as
    ``exp(output)``). Here ``softmax = e / s`` from the forward's own exponentials
    ``e = exp(x - max x)`` and row sums ``s`` (saved): no exponential and no elementwise
    division in the backward (CPU: 0.65-0.78x of JAX's autodiff with ``exp(output)``)."""
    e, s = res
    return (ct - e * (jnp.sum(ct, axis=axis, keepdims=True) / s),)


log_softmax_op = define_op("log_softmax", _log_softmax_primal, log_softmax_jvp, log_softmax_vjp,
                           lambda out, x, *, axis: P.softmax_parts(x, axis))  # the forward's own (XLA: CSE)
def _masked_softmax_primal(x, mask, *, axis):
    e, s = P.masked_softmax_parts(x, mask, axis)
    return e / s


def _masked_log_softmax_primal(x, mask, *, axis):
    e, s = P.masked_softmax_parts(x, mask, axis)
    xs = jnp.where(mask, x, -jnp.inf)
    m = jnp.max(xs, axis=axis, keepdims=True, initial=-jnp.inf)
    return jnp.where(mask, x - lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0)) - jnp.log(s), -jnp.inf)


def _masked_log_softmax_save(out, x, mask, *, axis):
    e, s = P.masked_softmax_parts(x, mask, axis)
    return e, s, mask


def masked_softmax_jvp(res, t, tmask, *, axis, **_):
    """Softmax over the entries where ``mask`` (``where=``), 0 elsewhere: ``y (t - sum(y t))``
    with ``y = e / s`` of the included entries only (0 off the mask, so masked entries get no
    tangent and give none)."""
    x, mask = res
    e, s = P.masked_softmax_parts(x, mask, axis)
    y = e / s
    return y * (t - jnp.sum(y * t, axis=axis, keepdims=True))


def masked_softmax_vjp(res, ct, *, axis, **_):
    """The masked softmax (``where=``): ``_softmax_backward_data`` over the included entries,
    ``(ct / s - sum(ct e) / s^2) e`` with ``e`` 0 off the mask (no cotangent there); the mask
    gets none."""
    x, mask = res
    e, s = P.masked_softmax_parts(x, mask, axis)
    return (ct / s - jnp.sum(ct * e, axis=axis, keepdims=True) / (s * s)) * e, None


masked_softmax_op = define_op("softmax", _masked_softmax_primal, masked_softmax_jvp, masked_softmax_vjp,
                              lambda out, x, mask, **_: (x, mask))


def masked_log_softmax_jvp(res, t, tmask, *, axis, **_):
    """Log-softmax over the entries where ``mask``, -inf (a constant) elsewhere: ``t - sum(y t)``
    on the mask, 0 off it, ``y = e / s`` of the included entries."""
    e, s, mask = res
    tm = jnp.where(mask, t, 0)
    return jnp.where(mask, tm - jnp.sum(e * tm, axis=axis, keepdims=True) / s, 0)


def masked_log_softmax_vjp(res, ct, *, axis, **_):
    """The masked log-softmax (``where=``): ``_log_softmax_backward_data`` over the included
    entries, ``ct - softmax sum(ct)`` with the cotangents of the masked (constant -inf) outputs
    dropped: 0 off the mask."""
    e, s, mask = res
    cm = jnp.where(mask, ct, 0)
    return jnp.where(mask, cm - e * (jnp.sum(cm, axis=axis, keepdims=True) / s), 0), None


masked_log_softmax_op = define_op("log_softmax", _masked_log_softmax_primal, masked_log_softmax_jvp,
                                  masked_log_softmax_vjp, _masked_log_softmax_save)


def glu_jvp(x, t, *, axis, **_):
    """``glu(x) = a sigmoid(b)``: ``sigmoid(b) t_a + a sigmoid(b)(1 - sigmoid(b)) t_b`` (the
    forward counterpart of torch's ``glu_backward``)."""
    a, b = jnp.split(x, 2, axis=axis)
    ta, tb = jnp.split(t, 2, axis=axis)
    s = jax.nn.sigmoid(b)
    return s * ta + a * s * (1 - s) * tb


def glu_vjp(x, ct, *, axis, **_):
    """torch ``glu_backward``: ``(sigmoid(b) ct, a sigmoid(b)(1 - sigmoid(b)) ct)`` concatenated."""
    a, b = jnp.split(x, 2, axis=axis)
    s = jax.nn.sigmoid(b)
    return (jnp.concatenate([s * ct, a * s * (1 - s) * ct], axis=axis),)


glu_op = define_op("glu", lambda x, *, axis: jax.nn.glu(x, axis=axis), glu_jvp, glu_vjp)


def dropout_jvp(res, tx, tmask, tscale, **_):
    """``t mask scale`` (seed ``infinitely_differentiable_native_dropout_backward``); ``scale =
    1/(1 - p)`` (an argument: p may be traced) gets no tangent (``dropout`` stops it)."""
    mask, scale = res
    if tx is None:
        return None
    tx, mask, scale = P.promoted(tx, mask, scale)
    return tx * mask * scale


def dropout_vjp(res, ct, **_):
    """``ct mask scale``; the mask gets nothing (seed ``infinitely_differentiable_native_dropout_backward``),
    nor does ``scale = 1/(1 - p)`` (``dropout`` stops it)."""
    mask, scale = res
    ct, mask, scale = P.promoted(ct, mask, scale)
    return ct * mask * scale, None, None


dropout_op = define_op("dropout", lambda x, mask, scale: jnp.where(mask, x * scale, 0).astype(x.dtype),
                       dropout_jvp, dropout_vjp, lambda out, x, mask, scale: (mask, scale))


# ----------------------------------------------------------------------------------------------
# Public functions

def _integer_array(x) -> bool:
    """Whether ``x`` is an integer array (not a Python number, not boolean)."""
    return isinstance(x, jax.Array | np.ndarray | np.generic) and jnp.issubdtype(jnp.asarray(x).dtype, jnp.integer)


def _real(op, x):
    x = V.array(op, "x", x)
    if jnp.iscomplexobj(x):
        raise TypeError(f"{op}: argument 'x' must be real, got {x.dtype}")
    return x


@exported_as("jaxrules.nn.threshold")
def threshold(x: ArrayLike, threshold: float | ArrayLike, value: float | ArrayLike) -> Array:
    """Thresholding, ``value if x <= threshold else x``; mirrors ``torch.nn.functional.threshold``.

    The derivative is ``[not x <= threshold]`` (torch's ``threshold_backward``: 0 at the threshold,
    1 at NaN, which passes through as torch's). ``value``'s derivative is ``[x <= threshold]``; the
    threshold gets none (a switch point).

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).
        threshold: the threshold, a number, an array broadcasting against ``x``, or a tracer (jit,
            vmap).
        value: the replacement where ``x <= threshold``, a number, an array or a tracer.

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """
    x = _real("threshold", x)
    return _threshold(x, V.hyperparameter("threshold", "threshold", threshold, x),
                      V.hyperparameter("threshold", "value", value, x))


@exported_as("jaxrules.nn.relu")
def relu(x: ArrayLike) -> Array:
    """Rectified linear unit, ``max(x, 0)``; mirrors ``torch.relu`` (and ``jax.nn.relu``).

    Derivative ``[x > 0]``: 0 at 0 (torch's ``threshold_backward``); NaN passes through with
    derivative 1, as torch's.

    Args:
        x: the input, a real array (integer input keeps its dtype, as ``jax.nn.relu`` and
            ``torch.relu``: no derivative; boolean input is promoted to float; complex raises
            ``TypeError``).

    Returns:
        An array of ``x``'s shape and dtype (float for boolean input).
    """
    if _integer_array(x):
        return jax.nn.relu(x)
    x = _real("relu", x)
    zero = jnp.zeros((), x.dtype)
    return _threshold(x, zero, zero)


@exported_as("jaxrules.nn.hardtanh")
def hardtanh(x: ArrayLike, min_val: float | ArrayLike = -1.0, max_val: float | ArrayLike = 1.0) -> Array:
    """Hard tanh, ``clip(x, min_val, max_val)``; mirrors ``torch.nn.functional.hardtanh``.

    Derivative ``[min_val < x < max_val]`` (torch's ``hardtanh_backward``: 0 at the bounds, where
    ``jax.nn.hard_tanh`` gives 1; 0 at NaN, as torch's vectorized kernel; its scalar tail gives 1).
    The bounds may be arrays or tracers (jit, vmap, grad: their derivatives are ``[x <= min_val]``
    and ``[x >= max_val]``). Also ``hard_tanh`` (jax.nn's name) and ``relu6``.

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).
        min_val: the lower bound, a number, an array or a tracer.
        max_val: the upper bound; ``min_val <= max_val`` is checked (``ValueError``) when both are
            concrete, at run time (``jaxrules.checked``) when traced.

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """

    x = _real("hardtanh", x)
    lo = V.hyperparameter("hardtanh", "min_val", min_val, x)
    hi = V.hyperparameter("hardtanh", "max_val", max_val, x)
    lo_host, hi_host = V.host_value(min_val), V.host_value(max_val)
    if lo_host is not None and hi_host is not None and np.any(lo_host > hi_host):
        raise ValueError(f"hardtanh: min_val={min_val!r} must not exceed max_val={max_val!r}")
    if lo_host is None or hi_host is None:  # traced: the run-time check (jaxrules.checked raises it)

        runtime_check(lo > hi, "hardtanh: min_val must not exceed max_val (traced values)")
    return _hardtanh(x, lo, hi)


@exported_as("jaxrules.nn.hard_tanh")
def hard_tanh(x: ArrayLike) -> Array:
    """``clip(x, -1, 1)``, ``jax.nn.hard_tanh`` with torch's derivative at +-1 (0): ``hardtanh(x)``.

    Args:
        x: the input, a real array (integer input keeps its dtype, as ``jax.nn.hard_tanh``: no
            derivative; boolean input is promoted to float; complex raises ``TypeError``).

    Returns:
        An array of ``x``'s shape and dtype (float for boolean input).
    """
    if _integer_array(x):
        return jax.nn.hard_tanh(x)
    return hardtanh(x)


@exported_as("jaxrules.nn.relu6")
def relu6(x: ArrayLike) -> Array:
    """``min(max(x, 0), 6)``; mirrors ``torch.nn.functional.relu6`` (``hardtanh(x, 0, 6)``).

    Derivative ``[0 < x < 6]``: 0 at 0 and 6 (torch's ``hardtanh_backward``) and at NaN.

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """
    return hardtanh(x, 0.0, 6.0)


@exported_as("jaxrules.nn.leaky_relu")
def leaky_relu(x: ArrayLike, negative_slope: float | ArrayLike = 0.01) -> Array:
    """Leaky ReLU, ``x if x > 0 else negative_slope x``; mirrors ``torch.nn.functional.leaky_relu``.

    Derivative 1 for x > 0, ``negative_slope`` otherwise: at 0 and at NaN too (torch's
    ``leaky_relu_backward``; ``jax.nn.leaky_relu`` gives 1 at 0).

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).
        negative_slope: the slope for x <= 0, a number, an array or a tracer (jit, vmap, grad: its
            derivative is ``x`` for x <= 0, else 0).

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """
    x = _real("leaky_relu", x)
    return _leaky_relu(x, V.hyperparameter("leaky_relu", "negative_slope", negative_slope, x))


@exported_as("jaxrules.nn.hardsigmoid", "jaxrules.nn.hard_sigmoid")
def hardsigmoid(x: ArrayLike) -> Array:
    """Hard sigmoid, ``relu6(x + 3) / 6``; mirrors ``torch.nn.functional.hardsigmoid``.

    Derivative 1/6 strictly inside (-3, 3), 0 at +-3 (torch's ``hardsigmoid_backward``). Also
    ``hard_sigmoid`` (jax.nn's name).

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """
    return _hardsigmoid(_real("hardsigmoid", x))


@exported_as("jaxrules.nn.hardswish", "jaxrules.nn.hard_swish")
def hardswish(x: ArrayLike) -> Array:
    """Hard swish, ``x relu6(x + 3) / 6``; mirrors ``torch.nn.functional.hardswish``.

    Derivative ``x/3 + 1/2`` inside (-3, 3), 0 at -3 and 1 at 3 (torch 2.13's
    ``hardswish_backward``); NaN at NaN. Also ``hard_swish`` (jax.nn's name).

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """
    return _hardswish(_real("hardswish", x))


@exported_as("jaxrules.nn.prelu")
def prelu(x: ArrayLike, weight: ArrayLike) -> Array:
    """Parametric ReLU, ``x if x > 0 else weight x``; mirrors ``torch.nn.functional.prelu``.

    Derivatives as torch's ``_prelu_kernel_backward``: the weight's branch at 0 and at NaN; the
    weight's gradient (``x`` where x <= 0) summed over the other axes.

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).
        weight: the slopes, one value (shape () or (1,)) or one per channel, shape (C,) for the
            channels at axis 1 (``ValueError`` otherwise).

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """
    x = _real("prelu", x)
    w = V.array("prelu", "weight", weight)
    if jnp.iscomplexobj(w) or w.ndim > 1:
        raise ValueError(f"prelu: weight must be a real vector of 1 or C values, got {w.dtype}{list(w.shape)}")
    if w.size == 1:
        w = w.reshape(())
    elif x.ndim < 2 or w.shape != (x.shape[1],):
        raise ValueError(f"prelu: weight must have 1 value or one per channel (axis 1) of x {x.shape}, got {w.shape}")
    else:
        w = w.reshape((1,) + (-1,) + (1,) * (x.ndim - 2))  # (1, C, 1, ...): x's rank, broadcast explicitly
    return _prelu(x, w.astype(x.dtype)).astype(x.dtype)


@exported_as("jaxrules.nn.silu", "jaxrules.nn.swish")
def silu(x: ArrayLike) -> Array:
    """SiLU (swish), ``x sigmoid(x)``; mirrors ``torch.nn.functional.silu`` (and ``jax.nn.silu``).

    Derivative ``s (1 + x (1 - s))``, ``s = sigmoid(x)`` (seed
    ``infinitely_differentiable_silu_backward``). Also ``swish``.

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """
    return _silu(_real("silu", x))


@exported_as("jaxrules.nn.mish")
def mish(x: ArrayLike) -> Array:
    """Mish, ``x tanh(softplus(x))``; mirrors ``torch.nn.functional.mish``.

    Seed ``infinitely_differentiable_mish_backward``; the second derivative is finite at large x
    (torch: NaN at 800).

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """
    return _mish(_real("mish", x))


@exported_as("jaxrules.nn.gelu")
def gelu(x: ArrayLike, approximate: bool | str = True) -> Array:
    """GELU, ``x Phi(x)`` or its tanh approximation; mirrors ``torch.nn.functional.gelu`` (and
    ``jax.nn.gelu``).

    The tanh approximation ``x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2`` for ``True`` (jax.nn's
    default) or ``"tanh"`` (torch's spelling); the exact ``x Phi(x)`` for ``False`` or ``"none"``
    (torch's default), computed as torch's kernels compute it, ``x (1 + erf(x / sqrt 2)) / 2``
    (in float32 for half precision): in the far negative tail, below about -5.2 in float32, that
    is 0 where jax.nn.gelu's erfc form keeps a tiny negative value. Derivatives: torch's
    ``gelu_backward`` and ``gelu_double_backward``. At +inf the value is +inf (torch 2.13's
    float32 exact kernel gives NaN; float64 +inf).

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).
        approximate: ``True``/``"tanh"`` or ``False``/``"none"`` (any other value: ``ValueError``).

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """
    return _gelu(_real("gelu", x), approximate=_gelu_approximate(approximate))


def _gelu_approximate(approximate) -> bool:
    """``approximate`` as a bool: JAX's booleans or torch's ``"none"`` / ``"tanh"`` (a non-empty
    string must not silently mean True)."""
    if isinstance(approximate, (bool, np.bool_)):
        return bool(approximate)
    if isinstance(approximate, str) and approximate in ("none", "tanh"):
        return approximate == "tanh"
    raise ValueError(f"gelu: approximate must be True, False, 'tanh' or 'none' (torch's spellings), got {approximate!r}")


@exported_as("jaxrules.nn.elu")
def elu(x: ArrayLike, alpha: float | ArrayLike = 1.0) -> Array:
    """ELU, ``x if x > 0 else alpha (exp(x) - 1)``; mirrors ``torch.nn.functional.elu``.

    Torch's derivative at 0 (the alpha branch) and second derivative at 0 (0; JAX gives alpha),
    seeds ``elu_backward`` / ``elu_double_backward``.

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).
        alpha: the negative branch's scale, a number, an array or a tracer (jit, vmap, grad: its
            derivative is ``exp(x) - 1`` for x <= 0, else 0).

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """
    x = _real("elu", x)
    return _elu(x, V.hyperparameter("elu", "alpha", alpha, x), scale=1.0, celu=False)


@exported_as("jaxrules.nn.selu")
def selu(x: ArrayLike) -> Array:
    """SELU, ``scale elu(x, alpha)`` with the SELU constants; mirrors ``torch.nn.functional.selu``.

    Torch's derivatives at 0 (``elu_backward`` with the scales).

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """
    x = _real("selu", x)
    return _elu(x, jnp.asarray(_SELU_ALPHA, x.dtype), scale=_SELU_SCALE, celu=False)


@exported_as("jaxrules.nn.celu")
def celu(x: ArrayLike, alpha: float | ArrayLike = 1.0) -> Array:
    """CELU, ``max(0, x) + min(0, alpha (exp(x/alpha) - 1))``; mirrors ``torch.nn.functional.celu``.

    Torch's second derivative at 0 (0; JAX gives 1/alpha).

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).
        alpha: positive (checked when concrete), a number, an array or a tracer (jit, vmap, grad:
            its derivative is ``exp(x/alpha) - 1 - (x/alpha) exp(x/alpha)`` for x <= 0, else 0).

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """
    x = _real("celu", x)
    return _elu(x, V.hyperparameter("celu", "alpha", alpha, x, low=0), scale=1.0, celu=True)


@exported_as("jaxrules.nn.softplus")
def softplus(x: ArrayLike, *, beta: float | ArrayLike = 1, threshold: float | ArrayLike = 20) -> Array:
    """Softplus, ``log(1 + exp(beta x)) / beta``, ``x`` where ``beta x > threshold``; mirrors
    ``torch.nn.functional.softplus``.

    Derivatives: torch's ``softplus_backward`` (``sigmoid(beta x)``, 1 above the threshold, NaN at
    NaN) and ``softplus_double_backward``.

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).
        beta: positive, torch's extra (keyword-only after ``jax.nn.softplus``'s parameters); a
            number, an array or a tracer (grad: ``(x sigmoid(beta x) - softplus(beta x) / beta) /
            beta`` below the threshold, 0 above).
        threshold: where the linear branch starts (in ``beta x``); a number, an array or a tracer
            (no gradient: a switch point).

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """
    x = _real("softplus", x)
    beta = V.hyperparameter("softplus", "beta", beta, x, low=0)
    threshold = V.hyperparameter("softplus", "threshold", threshold, x)
    return _softplus(x, beta, threshold)


@exported_as("jaxrules.nn.log_sigmoid")
def log_sigmoid(x: ArrayLike) -> Array:
    """``log(sigmoid(x))``; mirrors ``torch.nn.functional.logsigmoid`` (and ``jax.nn.log_sigmoid``).

    Derivative ``sigmoid(-x)``, stable at +-800 (seed ``log_sigmoid_double_backward``).

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """
    return _log_sigmoid(_real("log_sigmoid", x))


def _softmax_args(op, x, axis, where):
    """``(x, axes, mask)``: ``axis`` an int, a tuple or None (all axes), as jax.nn; ``where`` a
    boolean array broadcasting against ``x`` (None: every entry)."""
    x = _real(op, x)
    axes = V.axes(op, x.ndim, axis)
    if where is None:
        return x, axes, None
    mask = jnp.asarray(where)
    if mask.dtype != bool:
        raise ValueError(f"{op}: where must be None or a boolean array, got {mask.dtype}")  # jax.nn's type
    V.broadcast(op, x=x, where=mask)
    return x, axes, jnp.broadcast_to(mask, x.shape)


@exported_as("jaxrules.nn.softmax")
def softmax(x: ArrayLike, axis: int | tuple[int, ...] | None = -1, where: ArrayLike | None = None) -> Array:
    """Softmax, ``exp(x) / sum(exp(x))`` over ``axis``; mirrors ``torch.softmax`` (and ``jax.nn.softmax``).

    VJP torch's ``_softmax_backward_data``, ``y (g - sum(y g))``; double backward seed
    ``softmax_double_backward``; -inf logits are fine.

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).
        axis: an int, a tuple of ints, or None (all axes), as jax.nn (torch's ``dim``).
        where: jax.nn's mask, a boolean array broadcasting against ``x``: the softmax of the
            included entries, 0 elsewhere (0 on a slice with none), and masked entries get no
            gradient (``y`` is 0 off the mask).

    Returns:
        An array of ``x``'s shape and (floating) dtype.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nn as nn
        >>> print(nn.softmax(jnp.array([0.0, jnp.log(3.0)])).round(4))
        [0.25 0.75]
    """
    x, axes, mask = _softmax_args("softmax", x, axis, where)
    if mask is None:
        return softmax_op(x, axis=axes[0] if len(axes) == 1 else axes)
    return masked_softmax_op(x, mask, axis=axes)


@exported_as("jaxrules.nn.log_softmax")
def log_softmax(x: ArrayLike, axis: int | tuple[int, ...] | None = -1, where: ArrayLike | None = None) -> Array:
    """Log-softmax, ``x - log(sum(exp(x)))`` over ``axis``; mirrors ``torch.log_softmax`` (and
    ``jax.nn.log_softmax``).

    VJP torch's ``_log_softmax_backward_data``, ``g - softmax(x) sum(g)``.

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).
        axis: an int, a tuple of ints, or None (all axes).
        where: a boolean mask broadcasting against ``x``: the log-softmax over the included
            entries, -inf elsewhere (as jax.nn), with no gradient to or from the masked entries.

    Returns:
        An array of ``x``'s shape and (floating) dtype.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nn as nn
        >>> print(nn.log_softmax(jnp.array([0.0, 0.0])).round(4))
        [-0.6931 -0.6931]
        >>> print(nn.log_softmax(jnp.array([1000.0, 0.0])))  # no overflow
        [    0. -1000.]
    """
    x, axes, mask = _softmax_args("log_softmax", x, axis, where)
    if mask is None:
        return log_softmax_op(x, axis=axes[0] if len(axes) == 1 else axes)
    return masked_log_softmax_op(x, mask, axis=axes)


@exported_as("jaxrules.nn.glu")
def glu(x: ArrayLike, axis: int = -1) -> Array:
    """Gated linear unit, ``a sigmoid(b)`` with ``a, b`` the halves of ``x`` along ``axis``; mirrors
    ``torch.nn.functional.glu`` (and ``jax.nn.glu``).

    Derivatives torch's ``glu_backward`` and ``glu_double_backward``.

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).
        axis: the axis to split (torch's ``dim``); its size must be even (``ValueError``).

    Returns:
        An array of ``x``'s shape with ``axis`` halved.
    """
    x = _real("glu", x)
    ax = V.single_axis("glu", x.ndim, axis)
    if x.shape[ax] % 2:
        raise ValueError(f"glu: the size of axis {axis} must be even, got {x.shape[ax]}")
    return glu_op(x, axis=ax)


@exported_as("jaxrules.nn.dropout")
def dropout(x: ArrayLike, p: float | ArrayLike = 0.5, training: bool = True, *, key: Array | None = None) -> Array:
    """Dropout, ``x mask / (1 - p)`` with ``mask ~ Bernoulli(1 - p)``; mirrors
    ``torch.nn.functional.dropout`` with an explicit PRNG key.

    Each entry is zeroed with probability ``p`` and the rest scaled by ``1/(1 - p)`` (all zero
    when p = 1); the identity when not training or p = 0. Only the boolean mask is saved (seed
    ``infinitely_differentiable_native_dropout_backward``); a dropped entry is 0 even where ``x``
    is NaN or infinite.

    Args:
        x: the input, a real array (integer and boolean input is promoted to float; complex raises ``TypeError``).
        p: the drop probability in [0, 1] (checked when concrete; at run time when traced), a
            scalar number, array or tracer; it gets no gradient (the mask is sampled: the
            expectation, ``x``, does not depend on p).
        training: apply dropout (else return ``x``).
        key: a ``jax.random`` key, required when training with p > 0 (``ValueError``).

    Returns:
        An array of ``x``'s shape and (floating) dtype.
    """

    x = _real("dropout", x)
    # (in the default float dtype, not x's: the mask must not depend on x's precision)
    host = V.host_value(p)
    p = jax.lax.stop_gradient(V.hyperparameter("dropout", "p", p, low=0, strict=False))
    if p.ndim:
        raise ValueError(f"dropout: p must be a scalar, got shape {p.shape}")
    if host is not None and np.any(host > 1):
        raise ValueError(f"dropout: p must be a probability in [0, 1], got {host!r}")
    if host is None:  # traced: the run-time check (jaxrules.checked raises it)

        runtime_check(p > 1, "dropout: p must be a probability in [0, 1] (a traced value)")
    if not training or (host is not None and np.all(host == 0)):
        return x
    if key is None:
        raise ValueError("dropout: key (a jax.random key) is required when training with p > 0")
    mask = jax.random.bernoulli(key, 1 - p, x.shape)
    return dropout_op(x, mask, jnp.where(p < 1, 1 / jnp.where(p < 1, 1 - p, 1), 0).astype(x.dtype))
