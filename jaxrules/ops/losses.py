"""Losses with torch.nn.functional's signatures (``jaxrules.nn``): a pointwise op per loss (its
derivative factors in ``partials``), then torch's reduction (seed ``apply_loss_reduction``)
through the ``mean``/``sum`` ops."""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from jaxrules import _validate as V
from jaxrules import partials as P
from jaxrules._namespace import exported_as
from jaxrules.checking import runtime_check
from jaxrules.mechanism import define_op
from jaxrules.ops import reductions
from jaxrules.ops.activations import log_softmax, pointwise_op
from jaxrules.ops.elementwise import abs_op, clip
from jaxrules.ops.norms import _check_ord, pairwise_distance
from jaxrules.ops.shape import take_along_axis

# ----------------------------------------------------------------------------------------------
# Ops

def _bce_primal(x, y, **_):
    log_x = jnp.maximum(jnp.log(x), -100.0)
    log_1mx = jnp.maximum(jnp.log1p(-x), -100.0)
    return -(y * log_x + (1 - y) * log_1mx)


def _bce_logits_primal(x, y, pos_weight, **_):
    """``-(p y logsigmoid(x) + (1 - y) logsigmoid(-x))``. For finite x as ``-logsigmoid(-x) - y (x +
    (p - 1) logsigmoid(x))`` (at p = 1 torch's ``(1 - y) x - logsigmoid(x)``), linear in y: a +-inf
    target gives +-inf, not inf - inf. At x = +-inf the limit in x: the term whose log-sigmoid
    vanishes drops, the other is ``(1 - y) x`` (x = +inf) or ``-p y x`` (x = -inf), 0 where its
    coefficient is 0 (a confident right prediction; torch's form gives inf - inf or 0 inf)."""
    linear = -jax.nn.log_sigmoid(-x) - y * (x + (pos_weight - 1) * jax.nn.log_sigmoid(x))
    coef = jnp.where(x > 0, 1 - y, -pos_weight * y)
    return jnp.where(jnp.isinf(x), jnp.where(coef == 0, 0, coef * x), linear)


def _kl_div_primal(x, t, *, log_target, **_):
    """torch's pointwise KL term: ``exp(t) (t - x)`` with ``log_target``, else ``t (log t - x)``:
    NaN at a negative or NaN target (torch's ``xlogy(t, t) - t x``); at t == 0 the limit 0, also
    at x = +-inf (torch: ``0 inf = NaN``; a -inf log-probability where the target is 0 is common),
    and NaN at x = NaN (as torch)."""
    if log_target:
        return jnp.exp(t) * (t - x)
    return jnp.where(t == 0, jnp.where(jnp.isnan(x), x, 0), t * (jnp.log(jnp.where(t == 0, 1, t)) - x))


def _huber_primal(x, y, delta, **_):
    d = jnp.abs(x - y)
    return jnp.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))


def _smooth_l1_primal(x, y, beta, **_):
    d = jnp.abs(x - y)
    inside = d < beta  # never where beta == 0 (the L1 loss)
    return jnp.where(inside, 0.5 * d * d / jnp.where(inside, beta, 1), d - 0.5 * beta)


_bce = pointwise_op("bce", _bce_primal, P.bce_derivatives)
_bce_logits = pointwise_op("bce_with_logits", _bce_logits_primal, P.bce_with_logits_derivatives)
_mse = pointwise_op("mse", lambda x, y, **_: jnp.square(x - y), P.mse_derivatives)
_huber = pointwise_op("huber", _huber_primal, P.huber_derivatives)
_smooth_l1 = pointwise_op("smooth_l1", _smooth_l1_primal, P.smooth_l1_derivatives)
_l1 = pointwise_op("l1", lambda x, y, **_: jnp.abs(x - y), P.l1_derivatives)
_kl_div = pointwise_op("kl_div", _kl_div_primal, P.kl_div_derivatives)
_margin_ranking = pointwise_op("margin_ranking", lambda x1, x2, y, margin, **_: jnp.maximum(-y * (x1 - x2) + margin, 0),
                               P.margin_ranking_derivatives)
_hinge_embedding = pointwise_op("hinge_embedding", lambda x, y, margin, **_: (
    jnp.where(y != 1, jnp.maximum(margin - x, 0), 0) + jnp.where(y != -1, x, 0)), P.hinge_embedding_derivatives)
_soft_margin = pointwise_op("soft_margin", lambda x, y, **_: jax.nn.softplus(-y * x), P.soft_margin_derivatives)


def _gaussian_nll_primal(x, y, var, eps, *, full, **_):
    v = P.clamped_var(var, eps)
    loss = 0.5 * (jnp.log(v) + jnp.square(x - y) / v)
    return loss + 0.5 * math.log(2 * math.pi) if full else loss


def _poisson_nll_primal(x, t, eps, *, log_input, full, **_):
    loss = jnp.exp(x) - t * x if log_input else x - t * jnp.log(x + eps)
    if full:
        big = t > 1
        safe = jnp.where(big, t, 2)
        loss = loss + jnp.where(big, safe * jnp.log(safe) - safe + 0.5 * jnp.log(2 * math.pi * safe), 0)
    return loss


_gaussian_nll = pointwise_op("gaussian_nll", _gaussian_nll_primal, P.gaussian_nll_derivatives)
_poisson_nll = pointwise_op("poisson_nll", _poisson_nll_primal, P.poisson_nll_derivatives)


def _linear_cross_entropy_primal(*arrays, reduction, ignore_index, label_smoothing, z_loss, chunk, has_bias,
                                 has_class_weight):
    """``(loss, lse)``: the loss (torch's per-token ``cross_entropy`` of ``x W^T + b`` plus ``z
    lse^2``, reduced) in x's dtype and the logsumexp per token (accumulation dtype), from one
    chunked pass over the vocabulary (``P.lce_forward``)."""
    x, weight, target, bias, class_weight = P.lce_unpack(arrays, has_bias, has_class_weight)
    vocab = weight.shape[0]
    lse, picked, weighted = P.lce_forward(x, weight, bias, target, class_weight, chunk=chunk, smoothing=label_smoothing)
    kept, w_t = P.lce_token_weights(target, class_weight, vocab=vocab, ignore_index=ignore_index, dtype=lse.dtype)
    loss = (1 - label_smoothing) * w_t * (lse - picked)
    if label_smoothing:
        total = vocab if class_weight is None else jnp.sum(class_weight.astype(lse.dtype))
        loss = loss + label_smoothing / vocab * (total * lse - weighted)
    if z_loss:
        loss = loss + z_loss * jnp.square(lse)
    loss = jnp.where(kept, loss, 0)
    if reduction == "sum":
        loss = jnp.sum(loss)
    elif reduction == "mean":  # torch's denominator; 0 / 0 = NaN when every target is ignored (as torch)
        loss = jnp.sum(loss) / jnp.sum(w_t)
    return loss.astype(x.dtype), lse


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


_linear_cross_entropy = define_op(
    "linear_cross_entropy",
    _linear_cross_entropy_primal,
    linear_cross_entropy_jvp,
    linear_cross_entropy_vjp,
    lambda out, *arrays, has_bias, has_class_weight, **_: (*P.lce_unpack(arrays, has_bias, has_class_weight), out[1]),
    none_for_zero_cotangents=True,
)


def _ctc_primal(lp, ext, skip, input_lengths, target_lengths, **_):
    """The loss per sequence, ``-log p(target | lp)`` (``P.ctc_alpha_beta``), ``(N,)``."""
    return P.ctc_alpha_beta(lp, ext, skip, input_lengths, target_lengths)[2]


def _ctc_save(out, lp, ext, skip, input_lengths, target_lengths, *, zero_infinity):
    """The occupancy ``(T, N, C)`` (``P.ctc_occupancy``; 0 for a sequence without a path with
    ``zero_infinity``)."""
    nll, occupancy = P.ctc_occupancy(lp, ext, skip, input_lengths, target_lengths)
    return jnp.where(zero_infinity & jnp.isinf(nll)[None, :, None], 0, occupancy)


def ctc_jvp(occupancy, tlp, *_, **__):
    """``d nll_n = -sum_{t,c} occupancy[t, n, c] tlp[t, n, c]``: the derivative with respect to
    the log-probabilities themselves. torch's ``ctc_loss_backward`` adds ``exp(lp[t, n, c])``
    for ``t < T_n``, the part of the derivative that a ``log_softmax`` before the loss removes
    (its backward maps ``exp(lp)`` to 0), so the logits' gradients agree."""
    return None if tlp is None else -jnp.sum(occupancy * tlp, axis=(0, 2))


def ctc_vjp(occupancy, ct, **_):
    """``d lp = -occupancy ct_n`` (the transpose of ``ctc_jvp``); the labels and lengths take none."""
    return -occupancy * ct[None, :, None], None, None, None, None


_ctc_nll = define_op("ctc_loss", _ctc_primal, ctc_jvp, ctc_vjp, _ctc_save)


# ----------------------------------------------------------------------------------------------
# Public functions

_REDUCTIONS = ("none", "mean", "sum")


def _reduce(op, loss, reduction):
    """torch's ``apply_loss_reduction``."""
    if reduction == "mean":
        return reductions.mean(loss)
    if reduction == "sum":
        return reductions.sum(loss)
    return loss


def _quotient(total, count, empty: bool):
    """``total / count``, a mean's division. Over no elements (``empty``: a zero-size loss; 0 / 0
    = NaN, as torch) the quotient is a constant, whose derivatives are 0 as for every zero-size
    input (the map from an empty space), not the NaN that 0 / 0 would give them."""
    quotient = total / count
    return jax.lax.stop_gradient(quotient) if empty else quotient


def _pair(op, input, target, reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    x, y = V.array(op, "input", input), V.array(op, "target", target)
    if x.shape != y.shape:
        raise ValueError(f"{op}: input and target must have the same shape, got {x.shape} and {y.shape}")
    dtype = P.promoted_dtype(x, y)  # torch's losses promote input and target together
    return x.astype(dtype), y.astype(dtype)


def _weighted(op, loss, weight, *, keep_shape=False):
    """``loss * weight``; with ``keep_shape`` the weight must broadcast to the losses' shape, not
    widen it (torch's BCE losses weigh in place: "output with shape [3, 4] doesn't match the
    broadcast shape [2, 3, 4]")."""
    if weight is None:
        return loss
    w = V.array(op, "weight", weight)
    shape = V.broadcast(op, loss=loss, weight=w)
    if keep_shape and tuple(shape) != loss.shape:
        raise ValueError(f"{op}: weight of shape {w.shape} must broadcast to the losses' shape {loss.shape}, "
                         f"not widen it to {tuple(shape)}")
    rank = max(loss.ndim, w.ndim)
    return P.with_rank(loss, rank) * P.with_rank(w, rank)


@exported_as("jaxrules.nn.binary_cross_entropy")
def binary_cross_entropy(input: ArrayLike, target: ArrayLike, weight: ArrayLike | None = None, reduction: str = "mean") -> Array:
    """Binary cross entropy on probabilities, ``-(y log x + (1 - y) log(1 - x))``, the logs clamped
    at -100; mirrors ``torch.nn.functional.binary_cross_entropy``.

    Both derivatives are those of the clamped forward (torch's target gradient is ``-logit(x)``,
    infinite at x in {0, 1}; its input gradient divides by ``max(x (1 - x), 1e-12)``).

    Args:
        input: the probabilities ``x``, in [0, 1]. An element outside (or NaN), as in ``target``:
            ``ValueError`` when concrete (torch's error; logits belong to
            ``binary_cross_entropy_with_logits``) and inside ``jaxrules.checked``; under plain
            ``jit`` (no check runs) the loss is NaN.
        target: the targets in [0, 1], ``input``'s shape (``ValueError`` otherwise); the dtypes
            are promoted.
        weight: per-element weights broadcasting against the losses, or None.
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).

    Returns:
        The pointwise losses (the inputs' shape) for ``"none"``, else a 0-d array.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nn as nn
        >>> p, y = jnp.array([0.5, 0.25]), jnp.array([1.0, 0.0])
        >>> print(nn.binary_cross_entropy(p, y, reduction="none").round(4))  # -log 0.5, -log 0.75
        [0.6931 0.2877]
    """
    x, y = _pair("binary_cross_entropy", input, target, reduction)
    V.unit_interval("binary_cross_entropy", "input", x, " (for logits: binary_cross_entropy_with_logits)")
    V.unit_interval("binary_cross_entropy", "target", y)
    return _reduce("binary_cross_entropy", _weighted("binary_cross_entropy", _bce(x, y), weight, keep_shape=True),
                   reduction)


@exported_as("jaxrules.nn.binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(input: ArrayLike, target: ArrayLike, weight: ArrayLike | None = None, pos_weight: ArrayLike | None = None, reduction: str = "mean") -> Array:
    """Binary cross entropy on logits, ``-(p y logsigmoid(x) + (1 - y) logsigmoid(-x))``; mirrors
    ``torch.nn.functional.binary_cross_entropy_with_logits``.

    Stable at ``|x| = 800``, linear in the target (an infinite target gives +-inf, as torch's); at an
    infinite logit the limit (0 for y = 0 at x = -inf and y = 1 at x = +inf, +-inf otherwise;
    torch's form gives NaN at x = -inf and at x = +inf with y = 1). Seeds
    ``binary_cross_entropy_with_logits_backward`` and ``..._target_backward``.

    Args:
        input: the logits ``x``.
        target: the targets, ``input``'s shape (``ValueError`` otherwise); the dtypes are promoted.
        weight: per-element weights broadcasting against the losses, or None.
        pos_weight: ``p``, the positive class's weight, broadcasting over the last axis (None: 1).
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).

    Returns:
        The pointwise losses (the inputs' shape) for ``"none"``, else a 0-d array.

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.nn as nn
        >>> x, y = jnp.array([800.0]), jnp.array([0.0])
        >>> print(nn.binary_cross_entropy_with_logits(x, y), jax.grad(nn.binary_cross_entropy_with_logits)(x, y))
        800.0 [1.]
    """
    op = "binary_cross_entropy_with_logits"
    x, y = _pair(op, input, target, reduction)
    pw = jnp.ones((), x.dtype) if pos_weight is None else V.array(op, "pos_weight", pos_weight).astype(x.dtype)
    V.broadcast(op, input=x, pos_weight=pw)
    pw = P.with_rank(pw, x.ndim) if pw.ndim else pw  # the formulas broadcast pw against x at equal ranks
    return _reduce(op, _weighted(op, _bce_logits(x, y, pw), weight, keep_shape=True), reduction)


@exported_as("jaxrules.nn.mse_loss")
def mse_loss(input: ArrayLike, target: ArrayLike, reduction: str = "mean") -> Array:
    """Mean squared error, ``(x - y)^2``; mirrors ``torch.nn.functional.mse_loss``.

    Seed ``mse_loss_double_backward``.

    Args:
        input: the predictions ``x``.
        target: the targets, ``input``'s shape (``ValueError`` otherwise); the dtypes are promoted.
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).

    Returns:
        The pointwise losses (the inputs' shape) for ``"none"``, else a 0-d array.

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.nn as nn
        >>> x, y = jnp.array([1.0, 2.0]), jnp.array([1.0, 4.0])
        >>> print(nn.mse_loss(x, y), jax.grad(nn.mse_loss)(x, y))
        2.0 [ 0. -2.]
    """
    x, y = _pair("mse_loss", input, target, reduction)
    return _reduce("mse_loss", _mse(x, y), reduction)


@exported_as("jaxrules.nn.l1_loss")
def l1_loss(input: ArrayLike, target: ArrayLike, reduction: str = "mean") -> Array:
    """Absolute error, ``|x - y|``; mirrors ``torch.nn.functional.l1_loss``.

    Derivative ``sgn(x - y)``: 0 where x == y and where the difference is NaN (torch's ``sgn``
    backward; torch.sign(NaN) = 0). Complex input: the loss ``|x - y|`` is real, its gradient
    ``conj(sgn(x - y))`` (``abs``'s rule: torch's ``(x - y) / |x - y|`` in JAX's convention).

    Args:
        input: the predictions ``x``.
        target: the targets, ``input``'s shape (``ValueError`` otherwise); the dtypes are promoted.
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).

    Returns:
        The pointwise losses (the inputs' shape) for ``"none"``, else a 0-d array.

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.nn as nn
        >>> x, y = jnp.array([0.0, 1.0, 3.0]), jnp.array([1.0, 1.0, 1.0])
        >>> print(nn.l1_loss(x, y), jax.grad(nn.l1_loss)(x, y).round(4))  # sign(0) = 0 at the tie, as torch
        1.0 [-0.3333  0.      0.3333]
    """
    x, y = _pair("l1_loss", input, target, reduction)
    return _reduce("l1_loss", abs_op(x - y) if jnp.iscomplexobj(x) else _l1(x, y), reduction)


@exported_as("jaxrules.nn.kl_div")
def kl_div(input: ArrayLike, target: ArrayLike, reduction: str = "mean", log_target: bool = False) -> Array:
    """Kullback-Leibler divergence, ``t (log t - x)`` with ``input`` log-probabilities ``x``; mirrors
    ``torch.nn.functional.kl_div``.

    NaN at a negative or NaN target (torch's ``xlogy(t, t) - t x``); 0 where t == 0, also at an
    infinite input (torch: ``0 inf = NaN``); with ``log_target``, ``exp(t) (t - x)``. The
    target's derivative at t == 0 is ``-inf``, the one-sided slope of ``t log t`` (torch: NaN).

    Args:
        input: the log-probabilities ``x``.
        target: the probabilities ``t`` (log-probabilities with ``log_target``), ``input``'s shape.
        reduction: ``"none"``, ``"sum"``, ``"mean"`` (over every element, torch's default) or
            ``"batchmean"`` (the sum divided by input's first dimension).
        log_target: whether ``target`` holds log-probabilities.

    Returns:
        The pointwise terms (the inputs' shape) for ``"none"``, else a 0-d array.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nn as nn
        >>> p = jnp.array([0.25, 0.75])
        >>> print(nn.kl_div(jnp.log(p), p, reduction="sum"))  # KL(p || p)
        0.0
    """
    batchmean = reduction == "batchmean"
    x, t = _pair("kl_div", input, target, "sum" if batchmean else reduction)
    loss = _kl_div(x, t, log_target=bool(log_target))
    if batchmean:
        return _quotient(reductions.sum(loss), x.shape[0] if x.ndim else 1, loss.size == 0)
    return _reduce("kl_div", loss, reduction)


def _margin(op, margin, like=None, **checks):
    """The margin as an array in ``like``'s dtype: a number, an array or a tracer (jit, vmap,
    grad)."""
    return V.hyperparameter(op, "margin", margin, like, **checks)


@exported_as("jaxrules.nn.margin_ranking_loss")
def margin_ranking_loss(input1: ArrayLike, input2: ArrayLike, target: ArrayLike, margin: float | ArrayLike = 0.0, reduction: str = "mean") -> Array:
    """Margin ranking loss, ``max(0, -y (x1 - x2) + margin)``; mirrors
    ``torch.nn.functional.margin_ranking_loss``.

    At the hinge's bound the gradient passes (torch's ``clamp_min`` backward); where the hinge is
    inactive it is 0, also at an infinite target; NaN at a NaN target (as torch).

    Args:
        input1: the first scores ``x1``.
        input2: the second scores ``x2``.
        target: the labels ``y`` (1 or -1). The three broadcast together and have the same
            number of dimensions (torch's rule; ``ValueError`` otherwise).
        margin: a number, an array or a tracer; its derivative is 1 where the hinge is active.
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).

    Returns:
        The pointwise losses (the broadcast shape) for ``"none"``, else a 0-d array.
    """
    op = "margin_ranking_loss"
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    x1, x2, y = V.array(op, "input1", input1), V.array(op, "input2", input2), V.array(op, "target", target)
    if not x1.ndim == x2.ndim == y.ndim:
        raise ValueError(f"{op}: input1, input2 and target must have the same number of dimensions (torch's rule), "
                         f"got shapes {x1.shape}, {x2.shape} and {y.shape}")
    V.broadcast(op, input1=x1, input2=x2, target=y)
    dtype = P.promoted_dtype(x1, x2)
    x1, x2 = x1.astype(dtype), x2.astype(dtype)
    margin = _margin(op, margin, x1)
    return _reduce(op, _margin_ranking(x1, x2, y.astype(dtype), margin), reduction)


@exported_as("jaxrules.nn.hinge_embedding_loss")
def hinge_embedding_loss(input: ArrayLike, target: ArrayLike, margin: float | ArrayLike = 1.0, reduction: str = "mean") -> Array:
    """Hinge embedding loss, ``x`` where y = 1, ``max(0, margin - x)`` where y = -1; mirrors
    ``torch.nn.functional.hinge_embedding_loss``.

    For other labels torch's sum of both masks; the target gets no gradient; at the margin the
    gradient passes (``clamp_min``).

    Args:
        input: the distances ``x``.
        target: the targets, ``input``'s shape (``ValueError`` otherwise); the dtypes are promoted.
        margin: a number, an array or a tracer; its derivative is 1 where the hinge is active.
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).

    Returns:
        The pointwise losses (the inputs' shape) for ``"none"``, else a 0-d array.
    """
    x, y = _pair("hinge_embedding_loss", input, target, reduction)
    x, y = V.array("hinge_embedding_loss", "input", input), jax.lax.stop_gradient(y)  # labels: x's dtype
    margin = _margin("hinge_embedding_loss", margin, x)
    return _reduce("hinge_embedding_loss", _hinge_embedding(x, y.astype(x.dtype), margin), reduction)


@exported_as("jaxrules.nn.huber_loss")
def huber_loss(input: ArrayLike, target: ArrayLike, reduction: str = "mean", delta: float | ArrayLike = 1.0) -> Array:
    """Huber loss, ``d^2 / 2`` for ``|d| < delta``, else ``delta (|d| - delta / 2)``, ``d = x - y``;
    mirrors ``torch.nn.functional.huber_loss``.

    Second derivative ``[|d| < delta]`` (seed ``huber_loss_double_backward``).

    Args:
        input: the predictions ``x``.
        target: the targets, ``input``'s shape (``ValueError`` otherwise); the dtypes are promoted.
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).
        delta: positive (checked when concrete), a number, an array or a tracer; its derivative is
            ``|d| - delta`` outside ``|d| < delta``, 0 inside.

    Returns:
        The pointwise losses (the inputs' shape) for ``"none"``, else a 0-d array.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nn as nn
        >>> print(nn.huber_loss(jnp.array([0.5, 3.0]), jnp.zeros(2), reduction="none"))  # 0.5 d^2, then |d| - 0.5
        [0.125 2.5  ]
    """
    x, y = _pair("huber_loss", input, target, reduction)
    delta = V.hyperparameter("huber_loss", "delta", delta, x, low=0)
    return _reduce("huber_loss", _huber(x, y, delta), reduction)


@exported_as("jaxrules.nn.smooth_l1_loss")
def smooth_l1_loss(input: ArrayLike, target: ArrayLike, reduction: str = "mean", beta: float | ArrayLike = 1.0) -> Array:
    """Smooth L1 loss, ``d^2 / (2 beta)`` for ``|d| < beta``, else ``|d| - beta / 2``, ``d = x - y``;
    mirrors ``torch.nn.functional.smooth_l1_loss``.

    ``beta = 0`` is the L1 loss (seed ``smooth_l1_loss_double_backward``).

    Args:
        input: the predictions ``x``.
        target: the targets, ``input``'s shape (``ValueError`` otherwise); the dtypes are promoted.
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).
        beta: non-negative (checked when concrete), a number, an array or a tracer; its derivative
            is ``-d^2 / (2 beta^2)`` inside ``|d| < beta``, ``-1/2`` outside.

    Returns:
        The pointwise losses (the inputs' shape) for ``"none"``, else a 0-d array.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nn as nn
        >>> print(nn.smooth_l1_loss(jnp.array([0.5, 3.0]), jnp.zeros(2), reduction="none"))  # 0.5 d^2, then |d| - 0.5
        [0.125 2.5  ]
    """
    x, y = _pair("smooth_l1_loss", input, target, reduction)
    beta = V.hyperparameter("smooth_l1_loss", "beta", beta, x, low=0, strict=False)
    return _reduce("smooth_l1_loss", _smooth_l1(x, y, beta), reduction)


@exported_as("jaxrules.nn.soft_margin_loss")
def soft_margin_loss(input: ArrayLike, target: ArrayLike, reduction: str = "mean") -> Array:
    """Soft margin loss, ``log(1 + exp(-y x))``; mirrors ``torch.nn.functional.soft_margin_loss``.

    Computed as ``softplus(-y x)``: no overflow at ``|x| = 800`` (torch's backward gives NaN there);
    seed ``soft_margin_loss_double_backward``.

    Args:
        input: the scores ``x``.
        target: the labels ``y`` (1 or -1), ``input``'s shape.
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).

    Returns:
        The pointwise losses (the inputs' shape) for ``"none"``, else a 0-d array.
    """
    x, y = _pair("soft_margin_loss", input, target, reduction)
    return _reduce("soft_margin_loss", _soft_margin(x, y), reduction)


def _check_reduction(op, reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _real_number(op, name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(f"{op}: {name} must be a finite real number, got {value!r}")
    return float(value)


@exported_as("jaxrules.nn.gaussian_nll_loss")
def gaussian_nll_loss(input: ArrayLike, target: ArrayLike, var: ArrayLike | float, full: bool = False, eps: float | ArrayLike = 1e-6, reduction: str = "mean") -> Array:
    """Gaussian negative log-likelihood, ``(log v + (x - y)^2 / v) / 2``, ``v = max(var, eps)``;
    mirrors ``torch.nn.functional.gaussian_nll_loss``.

    As torch 2.13 (``var.clamp_(min=eps)`` under ``no_grad``), the clamp passes the gradient
    straight through: below ``eps`` var's derivative is ``(1 / eps - d^2 / eps^2) / 2`` at every
    order, not 0. At var = +inf the gradients are their limits, 0.

    Args:
        input: the means ``x``.
        target: the samples ``y``, broadcasting against ``input``.
        var: the variances: input's shape, input's shape without the last axis (then unsqueezed),
            the same rank with the mismatched axes of total size 1 (torch's test), or a Python
            float (a constant, weakly typed: at the dtype of input and target together; torch
            takes input's dtype). A negative var raises ``ValueError`` when concrete and gives NaN
            when traced (jit, vmap).
        full: add the constant ``log(2 pi) / 2``.
        eps: the clamp's floor, a number, an array or a tracer.
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).

    Returns:
        The pointwise losses (the inputs' shape) for ``"none"``, else a 0-d array.
    """
    op = "gaussian_nll_loss"
    _check_reduction(op, reduction)
    x, y = V.array(op, "input", input), V.array(op, "target", target)
    V.broadcast(op, input=x, target=y)
    if isinstance(var, numbers.Real) and not isinstance(var, bool):
        if var < 0:
            raise ValueError(f"{op}: var must be non-negative, got {var!r}")
        v = jnp.full(x.shape, float(var), jnp.result_type(x, y))  # a Python scalar: weakly typed, as in JAX
    else:
        v = V.array(op, "var", var)
        if v.shape != x.shape:
            if x.shape[:-1] == v.shape:
                v = v[..., None]
            elif not (v.ndim == x.ndim and sum(b for a, b in zip(x.shape, v.shape) if a != b) == 1):
                raise ValueError(f"{op}: var must have input's shape {x.shape}, that shape without the last axis, "
                                 f"or one axis of size 1 where input's differs; got {v.shape}")
        try:
            negative = bool(jnp.any(v < 0))
        except jax.errors.ConcretizationTypeError:  # traced: not checkable
            negative = False
        if negative:
            raise ValueError(f"{op}: var has negative entries")
    dtype = jnp.result_type(x, y, v)
    eps = V.hyperparameter(op, "eps", eps, jnp.zeros((), dtype))
    loss = _gaussian_nll(x.astype(dtype), y.astype(dtype), v.astype(dtype), eps, full=bool(full))
    return _reduce(op, loss, reduction)


@exported_as("jaxrules.nn.poisson_nll_loss")
def poisson_nll_loss(input: ArrayLike, target: ArrayLike, log_input: bool = True, full: bool = False, eps: float | ArrayLike = 1e-8, reduction: str = "mean") -> Array:
    """Poisson negative log-likelihood, ``exp(x) - t x``; mirrors ``torch.nn.functional.poisson_nll_loss``.

    ``x - t log(x + eps)`` without ``log_input``; with ``full`` plus the Stirling term ``t log t - t
    + log(2 pi t) / 2`` where ``t > 1``. Both arguments are differentiable; with ``full`` the
    target's derivative at t = 0 is that of the unmasked part, ``-input`` (torch: NaN, from ``0 *
    log 0`` in the masked term's backward).

    Args:
        input: the log-rates ``x`` (the rates with ``log_input=False``).
        target: the counts ``t``, ``input``'s shape.
        log_input: whether ``input`` is the log-rate.
        full: add the Stirling term.
        eps: added to the rate inside the log (without ``log_input``), a number, an array or a tracer.
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).

    Returns:
        The pointwise losses (the inputs' shape) for ``"none"``, else a 0-d array.
    """
    op = "poisson_nll_loss"
    x, t = _pair(op, input, target, reduction)
    loss = _poisson_nll(x, t, V.hyperparameter(op, "eps", eps, x), log_input=bool(log_input), full=bool(full))
    return _reduce(op, loss, reduction)


@exported_as("jaxrules.nn.multilabel_soft_margin_loss")
def multilabel_soft_margin_loss(input: ArrayLike, target: ArrayLike, weight: ArrayLike | None = None, reduction: str = "mean") -> Array:
    """Multi-label soft margin loss, ``-(y logsigmoid(x) + (1 - y) logsigmoid(-x))`` times ``weight``
    averaged over the last (class) axis; mirrors ``torch.nn.functional.multilabel_soft_margin_loss``.

    Composed of the ``bce_with_logits`` op (pos_weight 1: linear in the target, so an infinite
    target gives +-inf where torch's two-term form gives NaN), ``sum`` and ``mean``.

    Args:
        input: the logits ``x``, rank >= 1 (``ValueError`` for 0-d), classes on the last axis.
        target: the targets, ``input``'s shape (``ValueError`` otherwise); the dtypes are promoted.
        weight: per-class (or per-element) weights broadcasting against the losses, or None.
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).

    Returns:
        The per-sample losses (``input``'s shape without the last axis) for ``"none"``, else a 0-d
        array.
    """
    op = "multilabel_soft_margin_loss"
    x, y = _pair(op, input, target, reduction)
    if x.ndim == 0:
        raise ValueError(f"{op}: input must have a class axis (rank >= 1), got a 0-d array")
    loss = _weighted(op, _bce_logits(x, y, jnp.ones((), x.dtype)), weight)
    return _reduce(op, _quotient(reductions.sum(loss, axis=-1), x.shape[-1], x.shape[-1] == 0), reduction)


_COS_EPS = float(np.float32(1e-12))  # torch's Loss.cpp EPSILON, a float


@exported_as("jaxrules.nn.cosine_embedding_loss")
def cosine_embedding_loss(input1: ArrayLike, input2: ArrayLike, target: ArrayLike, margin: float | ArrayLike = 0.0, reduction: str = "mean") -> Array:
    """Cosine embedding loss, ``1 - cos`` where y = 1, ``max(0, cos - margin)`` where y = -1; mirrors
    ``torch.nn.functional.cosine_embedding_loss``.

    0 for other labels; ``cos = sum(x1 x2) / sqrt((sum(x1^2) + e) (sum(x2^2) + e))`` with torch's
    ``EPSILON`` e, the float32 1e-12 = 9.99999996e-13 exactly (a zero input has a finite gradient,
    ~1e6 times the other input's direction). At the margin the gradient passes (``clamp_min``).
    Composed of ``sum``, ``clip`` and ``mean``/``sum``; the products, square root and quotient are
    differentiated by JAX.

    Args:
        input1: (N, D) vectors, or (D,) with a 0-d target.
        input2: vectors broadcasting against ``input1``.
        target: the labels ``y``, (N,) or 0-d integers (1 or -1).
        margin: a number, an array or a tracer.
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).

    Returns:
        The (N,) losses for ``"none"`` (0-d for a 0-d target), else a 0-d array.
    """

    op = "cosine_embedding_loss"
    _check_reduction(op, reduction)
    x1, x2 = V.array(op, "input1", input1), V.array(op, "input2", input2)
    t = V.array(op, "target", target, inexact=False)
    if t.ndim not in (0, 1):
        raise ValueError(f"{op}: target must be 0-d or 1-d, got shape {t.shape}")
    if x1.ndim != t.ndim + 1 or x2.ndim != t.ndim + 1:
        raise ValueError(f"{op}: a {t.ndim}-d target needs {t.ndim + 1}-d input1 and input2, "
                         f"got {x1.shape} and {x2.shape}")
    V.broadcast(op, input1=x1, input2=x2)
    dtype = jnp.result_type(x1, x2)
    x1, x2, axis = x1.astype(dtype), x2.astype(dtype), t.ndim
    margin = _margin(op, margin, jnp.zeros((), dtype))
    cos = reductions.sum(x1 * x2, axis=axis) / jnp.sqrt(
        (reductions.sum(x1 * x1, axis=axis) + _COS_EPS) * (reductions.sum(x2 * x2, axis=axis) + _COS_EPS))
    V.broadcast(op, cosine=cos, target=t)
    t = jax.lax.stop_gradient(t)
    out = jnp.where(t == 1, 1 - cos, 0) + jnp.where(t == -1, clip(cos - margin, jnp.zeros((), dtype), None), 0)
    return _reduce(op, out.astype(dtype), reduction)


@exported_as("jaxrules.nn.triplet_margin_loss")
def triplet_margin_loss(anchor: ArrayLike, positive: ArrayLike, negative: ArrayLike, margin: float | ArrayLike = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False, reduction: str = "mean") -> Array:
    """Triplet margin loss, ``max(0, margin + d(a, p) - d(a, n))``, ``d = pairwise_distance(., ., p,
    eps)``; mirrors ``torch.nn.functional.triplet_margin_loss``.

    With ``swap``, ``d(a, n)`` is ``min(d(a, n), d(p, n))`` (ties share the gradient, as torch's
    ``min`` backward). At the bound the gradient passes (``clamp_min``); coincident points
    (``eps=0``) get ``vector_norm``'s zero subgradient. Composed of ``vector_norm`` (through
    ``pairwise_distance``), ``clip`` and ``mean``/``sum``.

    Args:
        anchor: the anchors ``a``, vectors on the last axis.
        positive: the positives, the same rank, broadcasting against ``anchor``.
        negative: the negatives, the same rank, broadcasting against ``anchor``.
        margin: positive (torch's check), a number, an array or a tracer.
        p: the norm's order.
        eps: added to the differences, a finite real number.
        swap: use the distance swap.
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).

    Returns:
        The losses (the broadcast shape without the last axis) for ``"none"``, else a 0-d array.
    """

    op = "triplet_margin_loss"
    margin = _margin(op, margin, low=0)  # torch: "margin must be greater than 0"
    _check_reduction(op, reduction)
    a, pos, neg = (V.array(op, n, v) for n, v in (("anchor", anchor), ("positive", positive), ("negative", negative)))
    if not a.ndim == pos.ndim == neg.ndim:
        raise ValueError(f"{op}: anchor, positive and negative must have the same rank, "
                         f"got {a.shape}, {pos.shape} and {neg.shape}")
    V.broadcast(op, anchor=a, positive=pos, negative=neg)
    p, eps = _check_ord(op, p, "p"), _real_number(op, "eps", eps)
    dist_pos = pairwise_distance(a, pos, p, eps)
    dist_neg = pairwise_distance(a, neg, p, eps)
    if swap:
        dist_neg = jnp.minimum(dist_neg, pairwise_distance(pos, neg, p, eps))
    hinge = margin.astype(dist_pos.dtype) + dist_pos - dist_neg
    return _reduce(op, clip(hinge, jnp.zeros((), hinge.dtype), None), reduction)

def _class_inputs(op, input, target, weight, reduction, ignore_index):
    """``(x, target, weight)`` checked for the class-index losses: x (C,) with a 0-d target, or
    ``(N, C, *)`` with target ``(N, *)``; weight (C,) (ones when None; differentiable here, where
    torch refuses a gradient for it); ``ignore_index`` an integer (torch's ``TypeError`` otherwise)."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    integral = isinstance(ignore_index, numbers.Integral) or (
        jnp.ndim(ignore_index) == 0 and jnp.issubdtype(jnp.result_type(ignore_index), jnp.integer))
    if isinstance(ignore_index, bool | np.bool_) or not integral:
        raise TypeError(f"{op}: ignore_index must be an integer, got {ignore_index!r}")
    x = V.array(op, "input", input)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"{op}: input must be floating point, got {x.dtype}")
    t = jnp.asarray(target)
    if x.ndim == 0:
        raise ValueError(f"{op}: input must have a class axis (shape (C,) or (N, C, *)), got a 0-d array")
    channels = x.shape[0] if x.ndim == 1 else x.shape[1]
    w = jnp.ones(channels, x.dtype) if weight is None else V.array(op, "weight", weight).astype(x.dtype)
    if w.shape != (channels,):
        raise ValueError(f"{op}: weight must have shape ({channels},), one per class, got {w.shape}")
    return x, t, w


def _kept_mean(total, count, kept):
    """``total / count``, the mean over the kept elements (``kept``: the mask of them). With none
    kept the value is torch's 0 / 0 = NaN and the derivatives are 0, as torch's (its
    ``nll_loss_backward`` writes nothing for an ignored target), not the NaN of ``0 * (1 / 0)``:
    the quotient is taken with a count of 1 there and replaced by a constant NaN."""
    any_kept = jnp.any(kept)
    return jnp.where(any_kept, total / jnp.where(any_kept, count, 1), jnp.nan)


def _nll(x, t, w, ignore_index, reduction):
    """torch's ``nll_loss``: ``-w[t] x[t]`` per element (0 where ``t == ignore_index``, also at an
    infinite ``x``, with a zero derivative); "mean" divides the sum by the sum of ``w[t]`` over the
    kept elements (``_kept_mean``: NaN with zero derivatives when none is kept, as torch). The pick
    is the ``take_along_axis`` op (its VJP scatters, seed ``gather_backward``)."""

    axis = 0 if x.ndim == 1 else 1
    t = V.wide_indices(t)
    kept = t != ignore_index
    in_range = (t >= 0) & (t < x.shape[axis])
    safe = jnp.where(kept & in_range, t, 0).astype(jnp.int32)
    picked = jnp.squeeze(take_along_axis(x, jnp.expand_dims(safe, axis), axis), axis)
    w_t = jnp.where(kept, w[safe], 0) * P.nan_factor(kept & ~in_range, x.dtype)  # a traced bad target: NaN
    losses = jnp.where(kept, -w_t * picked, 0)
    if reduction == "none":
        return losses
    total = reductions.sum(losses)
    return _kept_mean(total, jnp.sum(w_t), kept) if reduction == "mean" else total


def _check_targets(op, x, t):
    axis_shape = x.shape[:1] + x.shape[2:] if x.ndim > 1 else ()
    if not jnp.issubdtype(t.dtype, jnp.integer) or t.shape != axis_shape:
        raise ValueError(f"{op}: class-index target must be integers of shape {axis_shape}, got {t.dtype}{t.shape}")
    if t.size and x.shape[0 if x.ndim == 1 else 1] == 0:  # (torch: "Target 1 is out of bounds"; ignored targets only: NaN)
        raise ValueError(f"{op}: input has an empty class axis (C = 0): no class-index target is in range")


def _check_target_range(op, x, t, ignore_index):
    """Class indices in ``[0, C)`` or ``ignore_index`` (torch: "Target 5 is out of bounds")."""
    V.index_range(op, "target", t, x.shape[0 if x.ndim == 1 else 1], allowed=ignore_index)


@exported_as("jaxrules.nn.nll_loss")
def nll_loss(input: ArrayLike, target: ArrayLike, weight: ArrayLike | None = None, ignore_index: int = -100, reduction: str = "mean") -> Array:
    """Negative log-likelihood, ``-weight[t] input[t]`` for class indices ``t``; mirrors
    ``torch.nn.functional.nll_loss``.

    ``"mean"`` is the weighted mean over the kept elements (NaN when none is kept, as torch). Seed
    ``nll_loss_backward`` through the pick's scatter; composed of ``take_along_axis`` and ``sum``.
    The class weights are differentiable (torch refuses a gradient for them).

    Args:
        input: log-probabilities, (C,) or ``(N, C, *)`` with the classes at axis 1.
        target: integer class indices in ``[0, C)`` (or ``ignore_index``), 0-d for a (C,) input,
            else ``(N, *)``. Out of range: ``ValueError`` when concrete and inside
            ``jaxrules.checked``; under plain ``jit`` (no check runs) that element's loss, the
            reduced loss and the gradient of its row are NaN.
        weight: (C,) class weights, or None (ones).
        ignore_index: a class index that contributes nothing.
        reduction: ``"none"`` (the pointwise losses), ``"mean"`` or ``"sum"`` (torch's
            ``apply_loss_reduction``; anything else: ``ValueError``).

    Returns:
        The ``(N, *)`` losses for ``"none"`` (0-d for a (C,) input), else a 0-d array.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nn as nn
        >>> logp = jnp.log(jnp.array([[0.25, 0.75], [0.5, 0.5]]))
        >>> print(nn.nll_loss(logp, jnp.array([1, 0]), reduction="none").round(4))  # -log p[target]
        [0.2877 0.6931]
    """
    x, t, w = _class_inputs("nll_loss", input, target, weight, reduction, ignore_index)
    _check_targets("nll_loss", x, t)
    _check_target_range("nll_loss", x, t, ignore_index)
    return _nll(x, t, w, ignore_index, reduction)


@exported_as("jaxrules.nn.cross_entropy")
def cross_entropy(input: ArrayLike, target: ArrayLike, weight: ArrayLike | None = None, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float | ArrayLike = 0.0) -> Array:
    """Cross entropy, ``nll_loss(log_softmax(input))``; mirrors ``torch.nn.functional.cross_entropy``.

    Over the class axis 1 (axis 0 for a (C,) input). For class-probability targets (input's shape)
    ``-sum_c weight_c target_c log_softmax(input)_c``. Torch's ``label_smoothing``: class indices
    give ``(1 - e) nll + e / C`` times the weighted sum of ``-log p``; probabilities are mixed with
    the uniform distribution. Composed of ``log_softmax`` (VJP ``g - softmax sum(g)``),
    ``take_along_axis`` and ``sum``.

    Args:
        input: logits, (C,) or ``(N, C, *)``.
        target: integer class indices in ``[0, C)`` (or ``ignore_index``; ``(N, *)``, or 0-d for a
            (C,) input) or class probabilities (floating, ``input``'s shape). An index out of
            range: ``ValueError`` when concrete and inside ``jaxrules.checked``; under plain
            ``jit`` (no check runs) that element's loss, the reduced loss and the gradient of its
            row are NaN.
        weight: (C,) class weights, or None (ones); differentiable (torch refuses a gradient).
        ignore_index: an integer, a class index that contributes nothing (class-index targets;
            with probability targets only its default, -100: torch's rule).
        reduction: ``"none"``, ``"mean"`` or ``"sum"`` (``ValueError`` otherwise).
        label_smoothing: in [0, 1] (checked when concrete; at run time when traced), a number, an
            array or a tracer (differentiated through the composition).

    Returns:
        The per-sample losses for ``"none"``, else a 0-d array.

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.nn as nn
        >>> logits, target = jnp.zeros((2, 4)), jnp.array([0, 3])
        >>> print(nn.cross_entropy(logits, target).round(4))  # log 4
        1.3863
        >>> print(jax.grad(nn.cross_entropy)(logits, target)[0])  # (softmax - one_hot) / N
        [-0.375  0.125  0.125  0.125]
    """

    x, t, w = _class_inputs("cross_entropy", input, target, weight, reduction, ignore_index)
    # (a number, an array or a tracer: jit, vmap, grad through the composition below)
    fixed = not isinstance(label_smoothing, jax.core.Tracer)  # no tangent: a 0 can drop the smoothing term
    host = V.host_value(label_smoothing)
    label_smoothing = V.hyperparameter("cross_entropy", "label_smoothing", label_smoothing, jnp.zeros((), x.dtype),
                                       low=0, strict=False)
    if host is not None and host > 1:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {host!r}")
    if host is None:
        runtime_check(label_smoothing > 1, "cross_entropy: label_smoothing must be in [0, 1] (a traced value)")
    axis = 0 if x.ndim == 1 else 1
    logp = log_softmax(x, axis=axis)
    classes = x.shape[axis]
    view = (-1,) + (1,) * (x.ndim - axis - 1)
    if jnp.issubdtype(t.dtype, jnp.floating):  # class probabilities
        if t.shape != x.shape:
            raise ValueError(f"cross_entropy: probability targets must have input's shape {x.shape}, got {t.shape}")
        if not isinstance(ignore_index, jax.core.Tracer) and int(ignore_index) != -100:
            raise ValueError(f"cross_entropy: ignore_index ({ignore_index}) is not supported for probability "
                             "targets (torch's rule)")
        p = t.astype(x.dtype) * (1 - label_smoothing) + label_smoothing / classes
        losses = -reductions.sum(logp * p * P.with_rank(w.reshape(view), logp.ndim), axis=axis)
        if reduction == "none":
            return losses
        return reductions.mean(losses) if reduction == "mean" else reductions.sum(losses)
    _check_targets("cross_entropy", x, t)
    _check_target_range("cross_entropy", x, t, ignore_index)
    nll = _nll(logp, t, w, ignore_index, reduction)
    if fixed and host is not None and host == 0:
        return nll
    t = V.wide_indices(t)
    kept = t != ignore_index
    smooth = jnp.where(kept, -reductions.sum(logp * P.with_rank(w.reshape(view), logp.ndim), axis=axis), 0)
    if reduction == "mean":
        safe = jnp.where(kept & (t >= 0) & (t < classes), t, 0)
        smooth = _kept_mean(reductions.sum(smooth), jnp.sum(jnp.where(kept, w[safe], 0)), kept)
    elif reduction == "sum":
        smooth = reductions.sum(smooth)
    term = smooth * (label_smoothing / classes)
    if not (fixed and host is not None):  # a traced 0: no 0 * inf from the term at a -inf logit
        term = jnp.where((label_smoothing == 0) & jnp.isinf(smooth), 0, term)
    return (1 - label_smoothing) * nll + term


def _static_number(op, name, value, high=None):
    value = V.static_scalar(op, name, value)
    if isinstance(value, complex) or not math.isfinite(value) or value < 0 or (high is not None and value > high):
        bound = f"in [0, {high}]" if high is not None else "a finite number >= 0"
        raise ValueError(f"{op}: {name} must be {bound}, got {value!r}")
    return float(value)


def _class_vector(op, name, value, vocab):
    if value is None:
        return None
    v = V.array(op, name, value)
    if not jnp.issubdtype(v.dtype, jnp.floating):
        raise TypeError(f"{op}: {name} must be real floating point, got {v.dtype}")
    if v.shape != (vocab,):
        raise ValueError(f"{op}: {name} must have shape ({vocab},), one per class, got {v.shape}")
    return v


@exported_as("jaxrules.nn.linear_cross_entropy")
def linear_cross_entropy(input: ArrayLike, weight: ArrayLike, target: ArrayLike, bias: ArrayLike | None = None, *, class_weight: ArrayLike | None = None, ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = "mean", z_loss: float = 0.0, chunk_size: int | None = None) -> Array:
    """A fused language-model head: ``cross_entropy(linear(input, weight, bias), target)`` that
    never holds the logits (tokens x vocabulary) whole; mirrors
    ``torch.nn.functional.cross_entropy(torch.nn.functional.linear(input, weight, bias), target,
    weight=class_weight, ignore_index=..., label_smoothing=..., reduction=...)``.

    Per token ``i`` with logits ``l = x_i W^T + b`` (V classes), ``lse = logsumexp(l)`` and target
    ``t`` (class weights ``w``, smoothing ``s``), the loss is torch's ``(1 - s) w_t (lse - l_t) +
    (s / V) sum_c w_c (lse - l_c)`` plus ``z_loss * lse^2`` (the auxiliary "z-loss" of large-model
    training recipes; torch has none), 0 for an ignored token; ``"mean"`` divides the sum by the
    kept tokens' ``sum w_t`` (torch's denominator: NaN when every target is ignored, as torch,
    with zero gradients). The vocabulary is processed in chunks of ``chunk_size`` classes (a scan):
    the forward pass keeps a running logsumexp and saves only it per token (float32); the
    backward pass recomputes each chunk's logits, ``G = d loss / d l`` (``a p - b onehot - e w``,
    seeds ``_log_softmax_backward_data`` and ``nll_loss_backward``), adds ``G W`` into the input's
    gradient and writes ``G^T x`` as the chunk's rows of the weight's gradient (torch's ``linear``
    backward). Temporary memory is one chunk's logits, not tokens x vocabulary. bfloat16/float16
    inputs run their matmuls in that dtype with float32 accumulation
    (``preferred_element_type``) and keep every statistic in float32; the loss has the inputs'
    dtype. Derivatives: ``input``, ``weight`` and ``bias`` (JVP and VJP formulas, each chunked);
    second order is JAX's derivative of those formulas (their scans). ``class_weight`` is held
    fixed (torch refuses its gradient) and ``target`` has none.

    A target outside ``[0, V)`` that is not ``ignore_index`` is an error: a ``ValueError`` when
    the target is concrete, and inside ``jaxrules.checked`` when traced. Under plain ``jit`` no
    check runs (a host callback every step would stall a GPU): the values are NaN there (that
    token's loss, the reduced loss and the gradients), never a finite wrong value.

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.nn as nn
        >>> x = jax.random.normal(jax.random.PRNGKey(0), (4, 8, 16))      # (batch, seq, features)
        >>> w = jax.random.normal(jax.random.PRNGKey(1), (1000, 16)) / 4  # (vocabulary, features)
        >>> t = jax.random.randint(jax.random.PRNGKey(2), (4, 8), 0, 1000)
        >>> loss, (dx, dw) = jax.value_and_grad(nn.linear_cross_entropy, (0, 1))(x, w, t, chunk_size=256)
        >>> dx.shape, dw.shape
        ((4, 8, 16), (1000, 16))

    Args:
        input: (..., features) activations, floating point.
        weight: (vocabulary, features), as ``torch.nn.functional.linear``'s.
        target: integer class indices of shape ``input.shape[:-1]``.
        bias: (vocabulary,) or None.
        class_weight: (vocabulary,) class weights (torch's ``weight``), or None (ones); held fixed.
        ignore_index: a target value that contributes nothing (an int).
        label_smoothing: torch's, a static number in [0, 1].
        reduction: ``"none"`` (one loss per target, ``target``'s shape), ``"mean"`` or ``"sum"``.
        z_loss: a static number >= 0: adds ``z_loss * logsumexp^2`` per kept token.
        chunk_size: classes per chunk (a positive int); None picks the largest power of two
            with at most 2^25 logits per chunk (128 MiB in float32), at least 256 classes.

    Returns:
        The loss in the inputs' dtype: 0-d for ``"mean"``/``"sum"``, ``target``'s shape for
        ``"none"``.

    Raises:
        ValueError: on shapes that do not match, an unknown reduction, a hyperparameter out of
            range, a concrete target out of range.
        TypeError: on non-floating inputs, non-integer targets, non-number hyperparameters.
    """
    op = "linear_cross_entropy"
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    x, w = V.array(op, "input", input), V.array(op, "weight", weight)
    b = None if bias is None else V.array(op, "bias", bias)
    for name, arr in (("input", x), ("weight", w), ("bias", b)):
        if arr is not None and not jnp.issubdtype(arr.dtype, jnp.floating):
            raise TypeError(f"{op}: {name} must be real floating point, got {arr.dtype}")
    if x.ndim == 0:
        raise ValueError(f"{op}: input must have a features axis (shape (..., features)), got a 0-d array")
    if w.ndim != 2 or w.shape[1] != x.shape[-1]:
        raise ValueError(f"{op}: weight must have shape (vocabulary, {x.shape[-1]}) for input {x.shape}, got {w.shape}")
    vocab = w.shape[0]
    b = _class_vector(op, "bias", b, vocab)
    cw = _class_vector(op, "class_weight", class_weight, vocab)
    t = jnp.asarray(target)
    if not jnp.issubdtype(t.dtype, jnp.integer):
        raise TypeError(f"{op}: target must be integer class indices, got {t.dtype}")
    if t.shape != x.shape[:-1]:
        raise ValueError(f"{op}: target must have shape {x.shape[:-1]} (input's without features), got {t.shape}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int | np.integer):
        raise TypeError(f"{op}: ignore_index must be an int, got {ignore_index!r}")
    ignore_index = int(ignore_index)
    label_smoothing = _static_number(op, "label_smoothing", label_smoothing, high=1)
    z_loss = _static_number(op, "z_loss", z_loss)
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int | np.integer)
                                   or chunk_size < 1):
        raise ValueError(f"{op}: chunk_size must be None or a positive int, got {chunk_size!r}")
    if t.size and vocab == 0:
        raise ValueError(f"{op}: weight has an empty vocabulary (0 classes): no class-index target is in range")
    V.index_range(op, "target", t, vocab, allowed=ignore_index)  # traced: inside jaxrules.checked only
    dtype = jnp.result_type(*(a for a in (x, w, b) if a is not None))
    tokens = math.prod(t.shape)
    arrays = (x.reshape(tokens, x.shape[-1]).astype(dtype), w.astype(dtype), t.reshape(tokens))
    arrays += (() if b is None else (b.astype(dtype),)) + (() if cw is None else (jax.lax.stop_gradient(cw),))
    loss, _ = _linear_cross_entropy(
        *arrays, reduction=reduction, ignore_index=ignore_index, label_smoothing=label_smoothing, z_loss=z_loss,
        chunk=P.lce_chunk_size(tokens, vocab, None if chunk_size is None else int(chunk_size)),
        has_bias=b is not None, has_class_weight=cw is not None)
    return loss.reshape(t.shape) if reduction == "none" else loss
