"""Activations: ``d f / dx`` from the saved input. Part of ``jaxrules.partials``."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

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
