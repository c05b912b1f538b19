"""Pointwise losses: the partial derivatives with respect to each input. Part of
``jaxrules.partials``."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxrules.partials.elementwise import safe_reciprocal

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
    ``(sigmoid(x) - y (1 + (p - 1) sigmoid(-x)), logsigmoid(-x) - p logsigmoid(x), -y
    logsigmoid(x))``. d/dx is ``(p y + 1 - y) sigmoid(x) - p y`` written linear in y: -+inf at a
    +-inf target with p = 1, as torch's ``sigmoid(x) - y``, not inf - inf."""
    dx = jax.nn.sigmoid(x) - y * (1 + (pos_weight - 1) * jax.nn.sigmoid(-x))
    dy = jax.nn.log_sigmoid(-x) - pos_weight * jax.nn.log_sigmoid(x)
    return dx, dy, -y * jax.nn.log_sigmoid(x)


def l1_derivatives(x, y):
    """Of ``|x - y|``: ``(sgn(x - y), -sgn(x - y))``, 0 where x == y and where the difference is
    NaN (torch's ``sgn`` backward, derivatives.yaml's l1_loss through abs: torch.sign(NaN) = 0;
    jnp.sign gives NaN)."""
    d = x - y
    s = jnp.where(d > 0, 1, jnp.where(d < 0, -1, 0)).astype(d.dtype)
    return s, -s


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
    elsewhere, also at an infinite target; the last is the margin's. At a NaN target all are NaN
    (whether the hinge is active is undefined; torch: NaN, its chain rule's ``0 * NaN``)."""
    active = (-y * (x1 - x2) + margin >= 0).astype(x1.dtype)
    nan_target = jnp.isnan(y)
    return tuple(jnp.where(nan_target, jnp.nan, d).astype(d.dtype)
                 for d in (-y * active, y * active, -(x1 - x2) * active, active))


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


def clamped_var(var, eps):
    """``max(var, eps)`` passing var's gradient straight through (torch 2.13's ``var.clamp_(min=eps)``
    under ``no_grad`` in ``gaussian_nll_loss``: the clamp's own derivative is 1 at every order),
    +inf at var = +inf, and NaN at a negative var (torch raises; that check needs a concrete
    var)."""
    clamped = jnp.where(var < eps, var + jax.lax.stop_gradient(eps - var), var)
    return jnp.where(var < 0, jnp.nan, clamped)


def gaussian_nll_derivatives(x, y, var, eps, **_):
    """Of ``(log v + (x - y)^2 / v) / 2`` with ``v`` the clamped var (``clamped_var``): ``(d / v, -d
    / v, (1 / v - d^2 / v^2) / 2, 0)`` with ``d = x - y`` (torch's ``gaussian_nll_loss`` through
    ``log`` and ``div`` backward; 0 at var = +inf, their limit); eps (an argument: it may be
    traced) gets 0, the clamp's gradient going to var."""
    v = clamped_var(var, eps)
    d = x - y
    return d / v, -d / v, 0.5 * (1 / v - d * d / (v * v)), jnp.zeros_like(d)
