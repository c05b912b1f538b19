"""Activations: ``d f / dx`` from the saved input. Part of ``jaxrules.partials``."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

__all__ = [  # the helpers jaxrules.partials re-exports (formulas write P.<name>)
    "elu_derivatives", "gelu_derivative", "hardswish_derivative",
    "hardtanh_derivatives", "log_sigmoid_derivative", "mish_derivative", "silu_derivative", "slope_derivatives",
    "softplus_derivatives", "threshold_derivatives"
]

# ----------------------------------------------------------------------------------------------
# Activations: d f / dx from the saved input (seed ``infinitely_differentiable_*_backward``).
# Where torch's double backward uses a strict mask that its first derivative does not (elu
# family and softplus at their kinks), the value at the kink is wrapped in ``stop_gradient`` so
# that the second derivative there is torch's 0.


def _kink(x, at, value_below, value_above, value_at):
    """``value_above`` for x > at, ``value_at`` (with zero derivative) at x == at, ``value_below``
    for x < at and at a NaN x: the branch computed from x, so a NaN input gives a NaN derivative
    (as torch's vectorized CPU kernels and JAX's autodiff), never the constant branch's value."""
    return jnp.where(x > at, value_above, jnp.where(x == at, lax.stop_gradient(value_at), value_below))


def silu_derivative(x):
    """``s (1 + x (1 - s))``, ``s = sigmoid(x)`` (seed ``infinitely_differentiable_silu_backward``)."""
    s = jax.nn.sigmoid(x)
    return s * (1 + x * (1 - s))


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
    second derivative 0 at 0 (seed ``elu_double_backward``'s strict mask), NaN at NaN. d/dalpha: 0 for
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
    ``softplus_double_backward``'s strict mask), and ``sigmoid(NaN) = NaN`` at a NaN ``beta x``
    (torch's ``beta x > threshold`` test for the linear branch is false there), not the linear
    branch's 1. d/dbeta: ``(x sigmoid(beta x) - softplus(beta x) / beta) / beta`` below, 0 above.
    d/dthreshold: 0 (the switch point moves a discontinuity of size ``softplus(t)/beta - t/beta``,
    ~2e-9 at torch's default 20; no gradient, as for a step)."""
    bx = x * beta
    s = jax.nn.sigmoid(bx)
    below = bx <= threshold
    dbeta = jnp.where(below, (x * s - jax.nn.softplus(jnp.minimum(bx, threshold)) / beta) / beta, 0)
    dx = _kink(bx, threshold, s, jnp.ones_like(s), s)
    return dx, dbeta.astype(x.dtype), jnp.zeros_like(x)


def log_sigmoid_derivative(x):
    """``sigmoid(-x)`` (stable at +-800; seed ``log_sigmoid_double_backward``)."""
    return jax.nn.sigmoid(-x)


# ----------------------------------------------------------------------------------------------
# Switch-like activations. Their derivative factors use torch's kernels' comparisons, so that a
# NaN input takes torch's branch: ``x <= threshold`` is false at NaN (threshold and relu pass the
# gradient: NaN in, NaN out), ``x > 0`` is false (leaky_relu and prelu take the slope branch),
# ``min_val < x < max_val`` is false (hardtanh's gradient is 0, its vectorized kernel's).


def threshold_derivatives(x, threshold, value):
    """``(d/dx, d/dthreshold, d/dvalue)`` of torch's ``x <= threshold ? value : x``: ``[not x <=
    threshold]`` (``threshold_backward``: 0 at the threshold, so relu'(0) = 0, and 1 at NaN), 0
    (a switch point: no gradient, as for a step), ``[x <= threshold]``."""
    below = x <= threshold
    return jnp.logical_not(below).astype(x.dtype), jnp.zeros_like(x), below.astype(x.dtype)


def hardtanh_derivatives(x, min_val, max_val):
    """``(d/dx, d/dmin_val, d/dmax_val)`` of ``clip(x, min_val, max_val)``: ``[min_val < x <
    max_val]`` (torch's ``hardtanh_backward``: 0 at the bounds, so relu6'(0) = relu6'(6) = 0, and
    0 at NaN; JAX's ``hard_tanh`` gives 1 at +-1), ``[x <= min_val]``, ``[x >= max_val]`` (the
    bounds take the gradient where x does not: the three sum to 1 except at NaN)."""
    low, high = x <= min_val, x >= max_val
    inside = (x > min_val) & (x < max_val)
    return inside.astype(x.dtype), low.astype(x.dtype), (high & jnp.logical_not(low)).astype(x.dtype)


def slope_derivatives(x, slope):
    """``(d/dx, d/dslope)`` of ``x > 0 ? x : slope x`` (leaky_relu, prelu): 1 for x > 0, ``slope``
    otherwise, also at 0 and NaN (torch's ``leaky_relu_backward`` and ``_prelu_kernel_backward``;
    JAX gives 1 at 0); 0 for x > 0, ``x`` otherwise (NaN at NaN)."""
    positive = x > 0
    return jnp.where(positive, 1, slope).astype(x.dtype), jnp.where(positive, 0, x).astype(x.dtype)
