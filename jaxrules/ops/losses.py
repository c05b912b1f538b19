"""Losses with torch.nn.functional's signatures (``jaxrules.nn``): a pointwise op per loss (its
derivative factors in ``partials``), then torch's reduction (seed ``apply_loss_reduction``)
through the ``mean``/``sum`` ops."""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules import _validate as V
from jaxrules import partials as P
from jaxrules.ops import reductions
from jaxrules.ops._sampling import f64, normal, uniform
from jaxrules.ops.activations import pointwise_op
from jaxrules.registry import OpRecord, Sample, SingularPoint, register


def _bce_primal(x, y, **_):
    log_x = jnp.maximum(jnp.log(x), -100.0)
    log_1mx = jnp.maximum(jnp.log1p(-x), -100.0)
    return -(y * log_x + (1 - y) * log_1mx)


def _bce_logits_primal(x, y, pos_weight, **_):
    return -(pos_weight * y * jax.nn.log_sigmoid(x) + (1 - y) * jax.nn.log_sigmoid(-x))


def _huber_primal(x, y, *, delta, **_):
    d = jnp.abs(x - y)
    return jnp.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))


def _smooth_l1_primal(x, y, *, beta, **_):
    d = jnp.abs(x - y)
    if beta == 0:
        return d
    return jnp.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)


_bce = pointwise_op("bce", _bce_primal, P.bce_derivatives)
_bce_logits = pointwise_op("bce_with_logits", _bce_logits_primal, P.bce_with_logits_derivatives)
_mse = pointwise_op("mse", lambda x, y, **_: jnp.square(x - y), P.mse_derivatives)
_huber = pointwise_op("huber", _huber_primal, P.huber_derivatives)
_smooth_l1 = pointwise_op("smooth_l1", _smooth_l1_primal, P.smooth_l1_derivatives)
_soft_margin = pointwise_op("soft_margin", lambda x, y, **_: jax.nn.softplus(-y * x), P.soft_margin_derivatives)

_REDUCTIONS = ("none", "mean", "sum")


def _reduce(op, loss, reduction):
    """torch's ``apply_loss_reduction``."""
    if reduction == "mean":
        return reductions.mean(loss)
    if reduction == "sum":
        return reductions.sum(loss)
    return loss


def _pair(op, input, target, reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    x, y = V.array(op, "input", input), V.array(op, "target", target)
    if x.shape != y.shape:
        raise ValueError(f"{op}: input and target must have the same shape, got {x.shape} and {y.shape}")
    dtype = jnp.result_type(x, y)
    return x.astype(dtype), y.astype(dtype)


def _weighted(op, loss, weight):
    if weight is None:
        return loss
    w = V.array(op, "weight", weight)
    V.broadcast(op, loss=loss, weight=w)
    return loss * w


def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    """torch's BCE on probabilities, logs clamped at -100. Both derivatives are those of the
    clamped forward (torch's target gradient is ``-logit(x)``, infinite at x in {0, 1}; its input
    gradient divides by ``max(x(1 - x), 1e-12)``)."""
    x, y = _pair("binary_cross_entropy", input, target, reduction)
    return _reduce("binary_cross_entropy", _weighted("binary_cross_entropy", _bce(x, y), weight), reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction="mean"):
    """torch's BCE on logits with ``pos_weight`` (broadcast over the last axis), stable at |x| =
    800; seed ``binary_cross_entropy_with_logits_backward`` and ``..._target_backward``."""
    op = "binary_cross_entropy_with_logits"
    x, y = _pair(op, input, target, reduction)
    pw = jnp.ones((), x.dtype) if pos_weight is None else V.array(op, "pos_weight", pos_weight).astype(x.dtype)
    V.broadcast(op, input=x, pos_weight=pw)
    return _reduce(op, _weighted(op, _bce_logits(x, y, pw), weight), reduction)


def mse_loss(input, target, reduction="mean"):
    """``(x - y)^2``; seed ``mse_loss_double_backward``."""
    x, y = _pair("mse_loss", input, target, reduction)
    return _reduce("mse_loss", _mse(x, y), reduction)


def huber_loss(input, target, reduction="mean", delta=1.0):
    """torch's huber loss; second derivative ``[|x - y| < delta]`` (seed
    ``huber_loss_double_backward``)."""
    x, y = _pair("huber_loss", input, target, reduction)
    if not isinstance(delta, numbers.Real) or delta <= 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta!r}")
    return _reduce("huber_loss", _huber(x, y, delta=float(delta)), reduction)


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """torch's smooth L1 loss; ``beta=0`` is the L1 loss (seed ``smooth_l1_loss_double_backward``)."""
    x, y = _pair("smooth_l1_loss", input, target, reduction)
    if not isinstance(beta, numbers.Real) or beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta!r}")
    return _reduce("smooth_l1_loss", _smooth_l1(x, y, beta=float(beta)), reduction)


def soft_margin_loss(input, target, reduction="mean"):
    """``log(1 + exp(-y x))`` as ``softplus(-y x)``: no overflow at |x| = 800 (torch's backward
    gives NaN there); seed ``soft_margin_loss_double_backward``."""
    x, y = _pair("soft_margin_loss", input, target, reduction)
    return _reduce("soft_margin_loss", _soft_margin(x, y), reduction)


# ----------------------------------------------------------------------------------------------
# Records

_NN = "jaxrules.nn."
_F = "torch.nn.functional."


def _record(name, fn, formula, seed, samples, torch_fn, **kw):
    return register(OpRecord(name, fn, (_NN + name,), (formula, "mean", "sum"), seed, samples, torch_fn,
                             _F + name, **kw))


def _reductions(make):
    def samples(rng, dt):
        x, y = make(rng, dt)
        return [Sample((x, y)), Sample((x, y), {"reduction": "sum"}), Sample((x, y), {"reduction": "none"})]

    return samples


_record("binary_cross_entropy", binary_cross_entropy, "bce",
        ("binary_cross_entropy_target_backward", "binary_cross_entropy_double_backward",
         "binary_cross_entropy_double_backward_target"),
        lambda rng, dt: [
            Sample((uniform(rng, dt, 0.1, 0.9, 3, 4), uniform(rng, dt, 0, 1, 3, 4))),
            Sample((uniform(rng, dt, 0.1, 0.9, 5), uniform(rng, dt, 0, 1, 5), uniform(rng, dt, 0.5, 2, 5)), {"reduction": "sum"}),
            Sample((uniform(rng, dt, 0.1, 0.9, 4), uniform(rng, dt, 0, 1, 4)), {"reduction": "none"}),
        ],
        lambda t, x, y, w=None, reduction="mean": t.nn.functional.binary_cross_entropy(x, y, w, reduction=reduction),
        singular=(SingularPoint(
            "probability 0", (f64(0.0, 0.5), f64(0.2, 0.5)), (f64(0.8, 0.0) / 2, f64(100.0, 0.0) / 2),
            torch_differs="torch's target gradient is -logit(0) = +inf and its input gradient divides by "
            "1e-12; the clamped forward is locally constant in the clamped log, so jaxrules gives its "
            "exact derivative (target: 100, input: the unclamped term only)."),),
        deviations="Both derivatives are those of the clamped forward at x in {0, 1} (torch: inf and 1e12-scale).",
        torch_no_grad_args=(2,))
_record("binary_cross_entropy_with_logits", binary_cross_entropy_with_logits, "bce_with_logits",
        ("binary_cross_entropy_with_logits_backward", "binary_cross_entropy_with_logits_target_backward"),
        lambda rng, dt: [
            Sample((2 * normal(rng, dt, 3, 4), uniform(rng, dt, 0, 1, 3, 4))),
            Sample((2 * normal(rng, dt, 3, 4), uniform(rng, dt, 0, 1, 3, 4), None, uniform(rng, dt, 0.5, 3, 4))),
            Sample((2 * normal(rng, dt, 5), uniform(rng, dt, 0, 1, 5), uniform(rng, dt, 0.5, 2, 5)), {"reduction": "none"}),
        ],
        lambda t, x, y, w=None, pw=None, reduction="mean": t.nn.functional.binary_cross_entropy_with_logits(
            x, y, w, pos_weight=pw, reduction=reduction),
        singular=(SingularPoint("saturation", (f64(-800.0, 800.0), f64(1.0, 0.0)), (f64(-0.5, 0.5), f64(400.0, -400.0))),),
        torch_no_grad_args=(2, 3))
_record("mse_loss", mse_loss, "mse", ("mse_loss_double_backward",),
        _reductions(lambda rng, dt: (normal(rng, dt, 3, 4), normal(rng, dt, 3, 4))),
        lambda t, x, y, reduction="mean": t.nn.functional.mse_loss(x, y, reduction=reduction))
_record("huber_loss", huber_loss, "huber", ("huber_loss_double_backward", "huber_loss_double_backward_grad_output"),
        _reductions(lambda rng, dt: (2 * normal(rng, dt, 3, 4), normal(rng, dt, 3, 4))),
        lambda t, x, y, reduction="mean", delta=1.0: t.nn.functional.huber_loss(x, y, reduction=reduction, delta=delta),
        singular=(SingularPoint("on the boundary", (f64(1.0, -1.0), f64(0.0, 0.0)), (f64(0.5, -0.5), f64(-0.5, 0.5))),))
_record("smooth_l1_loss", smooth_l1_loss, "smooth_l1", ("smooth_l1_loss_double_backward",),
        lambda rng, dt: [
            Sample((2 * normal(rng, dt, 3, 4), normal(rng, dt, 3, 4))),
            Sample((2 * normal(rng, dt, 5), normal(rng, dt, 5)), {"beta": 0.5, "reduction": "sum"}),
            Sample((2 * normal(rng, dt, 5), normal(rng, dt, 5)), {"beta": 0.0, "reduction": "none"}),
        ],
        lambda t, x, y, reduction="mean", beta=1.0: t.nn.functional.smooth_l1_loss(x, y, reduction=reduction, beta=beta),
        singular=(SingularPoint("beta = 0", (f64(1.0, -2.0), f64(0.0, 0.0)), (f64(0.5, -0.5), f64(-0.5, 0.5)), {"beta": 0.0}),))
_record("soft_margin_loss", soft_margin_loss, "soft_margin",
        ("soft_margin_loss_double_backward", "soft_margin_loss_double_backward_grad_output"),
        _reductions(lambda rng, dt: (2 * normal(rng, dt, 3, 4), np.sign(normal(rng, dt, 3, 4)))),
        lambda t, x, y, reduction="mean": t.nn.functional.soft_margin_loss(x, y, reduction=reduction),
        singular=(SingularPoint(
            "|x| = 800", (f64(-800.0, 800.0), f64(1.0, 1.0)), (f64(-0.5, 0.0), f64(400.0, 0.0)),
            torch_differs="torch's backward overflows to NaN at x = -800; softplus(-y x) has derivative -y "
            "sigmoid(-y x) = -1 there."),),
        deviations="Finite derivatives at |x| = 800 (torch: NaN).",
        torch_no_grad_args=(1,))

