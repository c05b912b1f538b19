"""Registry records of ``jaxrules.ops.losses``, in that module's order: samples, singular points,
torch references. Only ``registry.load_records()`` imports them (``import jaxrules`` and its
namespaces never do)."""

from __future__ import annotations

import numpy as np

from jaxrules.ops._sampling import f64, normal, uniform
from jaxrules.ops.activations import log_softmax
from jaxrules.ops.losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cosine_embedding_loss,
    cross_entropy,
    gaussian_nll_loss,
    hinge_embedding_loss,
    huber_loss,
    kl_div,
    l1_loss,
    linear_cross_entropy,
    margin_ranking_loss,
    mse_loss,
    multilabel_soft_margin_loss,
    nll_loss,
    poisson_nll_loss,
    smooth_l1_loss,
    soft_margin_loss,
    triplet_margin_loss,
)
from jaxrules.registry import Sample, SingularPoint, record
from jaxrules.torch.nn import functional as F

_NN = "jaxrules.nn."
_F = "torch.nn.functional."


def _reductions(make):
    def samples(rng, dt):
        x, y = make(rng, dt)
        return [Sample((x, y)), Sample((x, y), {"reduction": "sum"}), Sample((x, y), {"reduction": "none"})]

    return samples


record(
    "binary_cross_entropy", fn=binary_cross_entropy, public=(_NN + "binary_cross_entropy",),
    formula_ops=("bce", "mean", "sum"),
    seed=("binary_cross_entropy_target_backward", "binary_cross_entropy_double_backward",
          "binary_cross_entropy_double_backward_target"),
    samples=lambda rng, dt: [
        Sample((uniform(rng, dt, 0.1, 0.9, 3, 4), uniform(rng, dt, 0, 1, 3, 4))),
        Sample((uniform(rng, dt, 0.1, 0.9, 5), uniform(rng, dt, 0, 1, 5), uniform(rng, dt, 0.5, 2, 5)), {"reduction": "sum"}),
        Sample((uniform(rng, dt, 0.1, 0.9, 4), uniform(rng, dt, 0, 1, 4)), {"reduction": "none"}),
    ],
    torch_fn=lambda t, x, y, w=None, reduction="mean": t.nn.functional.binary_cross_entropy(x, y, w, reduction=reduction),
    torch_name=_F + "binary_cross_entropy",
    singular=(SingularPoint(
        "probability 0", (f64(0.0, 0.5), f64(0.2, 0.5)), (f64(0.8, 0.0) / 2, f64(100.0, 0.0) / 2),
        torch_differs="torch's target gradient is -logit(0) = +inf and its input gradient divides by "
        "1e-12; the clamped forward is locally constant in the clamped log, so jaxrules gives its "
        "exact derivative (target: 100, input: the unclamped term only)."),),
    deviations="Both derivatives are those of the clamped forward at x in {0, 1} (torch: inf and 1e12-scale).",
    torch_no_grad_args=(2,),
)
record(
    "binary_cross_entropy_with_logits", fn=binary_cross_entropy_with_logits,
    public=(_NN + "binary_cross_entropy_with_logits",), formula_ops=("bce_with_logits", "mean", "sum"),
    seed=("binary_cross_entropy_with_logits_backward", "binary_cross_entropy_with_logits_target_backward"),
    samples=lambda rng, dt: [
        Sample((2 * normal(rng, dt, 3, 4), uniform(rng, dt, 0, 1, 3, 4))),
        Sample((2 * normal(rng, dt, 3, 4), uniform(rng, dt, 0, 1, 3, 4), None, uniform(rng, dt, 0.5, 3, 4))),
        Sample((2 * normal(rng, dt, 5), uniform(rng, dt, 0, 1, 5), uniform(rng, dt, 0.5, 2, 5)), {"reduction": "none"}),
    ],
    torch_fn=lambda t, x, y, w=None, pw=None, reduction="mean": t.nn.functional.binary_cross_entropy_with_logits(
        x, y, w, pos_weight=pw, reduction=reduction),
    torch_name=_F + "binary_cross_entropy_with_logits",
    singular=(SingularPoint("saturation", (f64(-800.0, 800.0), f64(1.0, 0.0)), (f64(-0.5, 0.5), f64(400.0, -400.0))),),
    torch_no_grad_args=(2, 3),
)
record(
    "mse_loss", fn=mse_loss, public=(_NN + "mse_loss",), formula_ops=("mse", "mean", "sum"),
    seed=("mse_loss_double_backward",),
    samples=_reductions(lambda rng, dt: (normal(rng, dt, 3, 4), normal(rng, dt, 3, 4))),
    torch_fn=lambda t, x, y, reduction="mean": t.nn.functional.mse_loss(x, y, reduction=reduction),
    torch_name=_F + "mse_loss",
)
record(
    "l1_loss", fn=l1_loss, public=(_NN + "l1_loss",), formula_ops=("l1", "mean", "sum"),
    seed=("sgn backward (derivatives.yaml l1_loss via abs)",),
    samples=_reductions(lambda rng, dt: (normal(rng, dt, 3, 4), normal(rng, dt, 3, 4))),
    torch_fn=lambda t, x, y, reduction="mean": t.nn.functional.l1_loss(x, y, reduction=reduction),
    torch_name=_F + "l1_loss",
    singular=(SingularPoint("x == y", (f64(1.0, 2.0), f64(1.0, 0.0)), (f64(0, 0.5), f64(0, -0.5))),),
)
record(
    "kl_div", fn=kl_div, public=(_NN + "kl_div",), formula_ops=("kl_div", "mean", "sum"),
    seed=("kl_div (derivatives.yaml)",),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 3, 4), uniform(rng, dt, 0.1, 1, 3, 4))),
        Sample((normal(rng, dt, 3, 4), uniform(rng, dt, 0.1, 1, 3, 4)), {"reduction": "batchmean"}),
        Sample((normal(rng, dt, 5), normal(rng, dt, 5)), {"reduction": "sum", "log_target": True}),
        Sample((normal(rng, dt, 4), uniform(rng, dt, 0.1, 1, 4)), {"reduction": "none"}),
    ],
    torch_fn=lambda t, x, y, reduction="mean", log_target=False: t.nn.functional.kl_div(
        x, y, reduction=reduction, log_target=log_target),
    torch_name=_F + "kl_div",
    singular=(SingularPoint(
        "target 0", (f64(0.5, -1.0), f64(0.0, 0.5)), (f64(0.0, -0.25), f64(-np.inf, (np.log(0.5) + 2) / 2)),
        finite_second=False,
        torch_differs="torch's target gradient at target 0 is NaN; the one-sided derivative of t log t "
        "there is -inf (log t + 1 - input)."),),
    deviations="The target's gradient at target 0 is -inf (torch: NaN). At target 0 the term is 0 also for an "
    "infinite input (torch: 0 inf = NaN).",
)
record(
    "margin_ranking_loss", fn=margin_ranking_loss, public=(_NN + "margin_ranking_loss",),
    formula_ops=("margin_ranking", "mean", "sum"), seed=("clamp_min backward (derivatives.yaml)",),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 6), normal(rng, dt, 6), np.sign(normal(rng, dt, 6)))),
        Sample((normal(rng, dt, 3, 4), normal(rng, dt, 3, 4), np.sign(normal(rng, dt, 3, 4)), 0.5),
               {"reduction": "sum"}),
    ],
    torch_fn=lambda t, x1, x2, y, margin=0.0, reduction="mean": t.nn.functional.margin_ranking_loss(
        x1, x2, y, margin, reduction=reduction),
    torch_name=_F + "margin_ranking_loss",
    singular=(SingularPoint("at the bound", (f64(1.0, 2.0), f64(1.0, 0.0), f64(1.0, 1.0)),
                            (f64(-0.5, 0), f64(0.5, 0), f64(0, 0))),),
    torch_no_grad_args=(2,),
)
record(
    "hinge_embedding_loss", fn=hinge_embedding_loss, public=(_NN + "hinge_embedding_loss",),
    formula_ops=("hinge_embedding", "mean", "sum"), seed=("clamp_min backward (derivatives.yaml)",),
    samples=lambda rng, dt: [
        Sample((2 * normal(rng, dt, 6), np.where(normal(rng, dt, 6).real > 0, 1, -1))),
        Sample((2 * normal(rng, dt, 3, 4), np.where(normal(rng, dt, 3, 4).real > 0, 1, -1), 0.5), {"reduction": "sum"}),
    ],
    torch_fn=lambda t, x, y, margin=1.0, reduction="mean": t.nn.functional.hinge_embedding_loss(
        x, y, margin, reduction=reduction),
    torch_name=_F + "hinge_embedding_loss",
    singular=(SingularPoint("at the margin", (f64(1.0, 0.5), np.array([-1, -1])), (f64(-0.5, -0.5),)),),
)
record(
    "huber_loss", fn=huber_loss, public=(_NN + "huber_loss",), formula_ops=("huber", "mean", "sum"),
    seed=("huber_loss_double_backward", "huber_loss_double_backward_grad_output"),
    samples=_reductions(lambda rng, dt: (2 * normal(rng, dt, 3, 4), normal(rng, dt, 3, 4))),
    torch_fn=lambda t, x, y, reduction="mean", delta=1.0: t.nn.functional.huber_loss(x, y, reduction=reduction, delta=delta),
    torch_name=_F + "huber_loss",
    singular=(SingularPoint("on the boundary", (f64(1.0, -1.0), f64(0.0, 0.0)), (f64(0.5, -0.5), f64(-0.5, 0.5))),),
)
record(
    "smooth_l1_loss", fn=smooth_l1_loss, public=(_NN + "smooth_l1_loss",), formula_ops=("smooth_l1", "mean", "sum"),
    seed=("smooth_l1_loss_double_backward",),
    samples=lambda rng, dt: [
        Sample((2 * normal(rng, dt, 3, 4), normal(rng, dt, 3, 4))),
        Sample((2 * normal(rng, dt, 5), normal(rng, dt, 5)), {"beta": 0.5, "reduction": "sum"}),
        Sample((2 * normal(rng, dt, 5), normal(rng, dt, 5)), {"beta": 0.0, "reduction": "none"}),
    ],
    torch_fn=lambda t, x, y, reduction="mean", beta=1.0: t.nn.functional.smooth_l1_loss(x, y, reduction=reduction, beta=beta),
    torch_name=_F + "smooth_l1_loss",
    singular=(SingularPoint("beta = 0", (f64(1.0, -2.0), f64(0.0, 0.0)), (f64(0.5, -0.5), f64(-0.5, 0.5)), {"beta": 0.0}),),
)
record(
    "soft_margin_loss", fn=soft_margin_loss, public=(_NN + "soft_margin_loss",),
    formula_ops=("soft_margin", "mean", "sum"),
    seed=("soft_margin_loss_double_backward", "soft_margin_loss_double_backward_grad_output"),
    samples=_reductions(lambda rng, dt: (2 * normal(rng, dt, 3, 4), np.sign(normal(rng, dt, 3, 4)))),
    torch_fn=lambda t, x, y, reduction="mean": t.nn.functional.soft_margin_loss(x, y, reduction=reduction),
    torch_name=_F + "soft_margin_loss",
    singular=(SingularPoint(
        "|x| = 800", (f64(-800.0, 800.0), f64(1.0, 1.0)), (f64(-0.5, 0.0), f64(400.0, 0.0)),
        torch_differs="torch's backward overflows to NaN at x = -800; softplus(-y x) has derivative -y "
        "sigmoid(-y x) = -1 there."),),
    deviations="Finite derivatives at |x| = 800 (torch: NaN).", torch_no_grad_args=(1,),
)


def _gaussian_nll_samples(rng, dt):
    x, y = normal(rng, dt, 3, 4), normal(rng, dt, 3, 4)
    return [Sample((x, y, uniform(rng, dt, 0.5, 2, 3, 4))),
            Sample((x, y, uniform(rng, dt, 0.5, 2, 3)), {"full": True, "reduction": "sum"}),
            Sample((x, y, uniform(rng, dt, 0.5, 2, 3, 1)), {"reduction": "none"}),
            Sample((x, y, uniform(rng, dt, 0.5, 2, 1, 4)), {"eps": 1e-3}),
            Sample((x, y, 0.7))]


record(
    "gaussian_nll_loss", fn=gaussian_nll_loss, public=(_NN + "gaussian_nll_loss",),
    formula_ops=("gaussian_nll", "mean", "sum"), seed=("log backward, div backward (gaussian_nll_loss)",),
    samples=_gaussian_nll_samples,
    torch_fn=lambda t, x, y, v, full=False, eps=1e-6, reduction="mean": t.nn.functional.gaussian_nll_loss(
        x, y, v, full=full, eps=eps, reduction=reduction),
    torch_name=_F + "gaussian_nll_loss",
    singular=(
        # var below eps: d = 1, v = eps = 1e-6; straight through (torch): dvar = (1/eps - 1/eps^2)/2.
        SingularPoint("var below eps (straight-through clamp)", (f64(1.0, 2.0), f64(0.0, 0.0), f64(1e-8, 2.0)),
                      (f64(1e6, 1.0) / 2, f64(-1e6, -1.0) / 2, f64((1e6 - 1e12) / 2, (0.5 - 1.0) / 2) / 2)),
        SingularPoint("var 0", (f64(1.0,), f64(3.0,), f64(0.0,)),
                      (f64(-2e6,), f64(2e6,), f64((1e6 - 4e12) / 2,))),
    ),
    deviations="None at first or second order: var's clamp at eps passes the gradient straight through, as "
    "torch 2.13's no_grad clamp (the forward is constant in var there).",
)


def _poisson_samples(rng, dt):
    x, t = normal(rng, dt, 3, 4), uniform(rng, dt, 0, 4, 3, 4)
    pos = uniform(rng, dt, 0.2, 3, 3, 4)
    return [Sample((x, t)), Sample((x, t), {"full": True, "reduction": "sum"}),
            Sample((pos, t), {"log_input": False, "reduction": "none"}),
            Sample((pos, t), {"log_input": False, "full": True, "eps": 1e-3})]


record(
    "poisson_nll_loss", fn=poisson_nll_loss, public=(_NN + "poisson_nll_loss",),
    formula_ops=("poisson_nll", "mean", "sum"), seed=("poisson_nll_loss (Loss.cpp, composite)",),
    samples=_poisson_samples,
    torch_fn=lambda t, x, y, log_input=True, full=False, eps=1e-8, reduction="mean": t.nn.functional.poisson_nll_loss(
        x, y, log_input=log_input, full=full, eps=eps, reduction=reduction),
    torch_name=_F + "poisson_nll_loss",
    singular=(
        SingularPoint("target 0 and 1 with full", (f64(0.5, 0.5, 0.5), f64(0.0, 1.0, 2.0)),
                      (f64(np.exp(0.5), np.exp(0.5) - 1, np.exp(0.5) - 2) / 3,
                       f64(-0.5, -0.5, -0.5 + np.log(2.0) + 0.25) / 3), {"full": True},
                      torch_differs="torch's target gradient at target 0 is NaN (0 * log 0 in the masked "
                      "Stirling term's backward); the term is 0 for t <= 1, so jaxrules gives -input."),
        SingularPoint("input 0 without log_input", (f64(0.0, 1.0), f64(2.0, 0.0)),
                      (f64(1 - 2 / 1e-8, 1.0) / 2, f64(-np.log(1e-8), -np.log(1 + 1e-8)) / 2), {"log_input": False}),
    ),
    deviations="With full=True the target's gradient at target 0 is -input (torch: NaN).",
)


def _multilabel_samples(rng, dt):
    x, y = 2 * normal(rng, dt, 3, 4), uniform(rng, dt, 0, 1, 3, 4)
    return [Sample((x, y)), Sample((x, y, uniform(rng, dt, 0.5, 2, 4)), {"reduction": "sum"}),
            Sample((x, y, uniform(rng, dt, 0.5, 2, 3, 4)), {"reduction": "none"}),
            Sample((2 * normal(rng, dt, 5), uniform(rng, dt, 0, 1, 5)))]


record(
    "multilabel_soft_margin_loss", fn=multilabel_soft_margin_loss, public=(_NN + "multilabel_soft_margin_loss",),
    formula_ops=("bce_with_logits", "sum", "mean"), seed=("binary_cross_entropy_with_logits_backward", "sum_backward"),
    samples=_multilabel_samples,
    torch_fn=lambda t, x, y, w=None, reduction="mean": t.nn.functional.multilabel_soft_margin_loss(
        x, y, w, reduction=reduction),
    torch_name=_F + "multilabel_soft_margin_loss",
    # One row of two classes: d/dx = (sigmoid(x) - y) / 2, d/dy = (logsigmoid(-x) - logsigmoid(x)) / 2.
    singular=(SingularPoint("saturation", (f64(-800.0, 800.0), f64(1.0, 0.0)), (f64(-0.5, 0.5), f64(400.0, -400.0))),),
)


def _cosine_embedding_samples(rng, dt):
    x1, x2 = normal(rng, dt, 5, 3), normal(rng, dt, 5, 3)
    y = np.array([1, -1, 1, -1, -1])
    return [Sample((x1, x2, y)), Sample((x1, x2, y, -0.5), {"reduction": "sum"}),
            Sample((x1, x2, y, 0.2), {"reduction": "none"}), Sample((x1[0], x2[0], np.asarray(-1)))]


record(
    "cosine_embedding_loss", fn=cosine_embedding_loss, public=(_NN + "cosine_embedding_loss",),
    formula_ops=("sum", "clip", "mean"), seed=("sum_backward", "clamp_min backward (derivatives.yaml)"),
    samples=_cosine_embedding_samples,
    torch_fn=lambda t, x1, x2, y, margin=0.0, reduction="mean": t.nn.functional.cosine_embedding_loss(
        x1, x2, y, margin, reduction=reduction),
    torch_name=_F + "cosine_embedding_loss",
    singular=(
        # cos = 0 = margin: clamp_min passes; d cos/dx1 = x2 / (1 + e), d cos/dx2 = x1 / (1 + e),
        # e = float32(1e-12) (torch's EPSILON).
        SingularPoint("at the margin", (f64(1.0, 0.0), f64(0.0, 1.0), np.asarray(-1)),
                      (f64(0.0, 1 / (1 + 9.99999996e-13)), f64(1 / (1 + 9.99999996e-13), 0.0))),
        # input1 = 0: 1 - cos has gradient -x2 / sqrt(e (25 + e)) in x1 and 0 in x2.
        SingularPoint("zero input1", (f64(0.0, 0.0), f64(3.0, 4.0), np.asarray(1)),
                      (-f64(3.0, 4.0) / np.sqrt(9.99999996e-13 * (25 + 9.99999996e-13)), f64(0.0, 0.0))),
    ),
)
record(
    "triplet_margin_loss", fn=triplet_margin_loss, public=(_NN + "triplet_margin_loss",),
    formula_ops=("vector_norm", "clip", "mean", "sum"),
    seed=("norm_backward", "clamp_min backward (derivatives.yaml)", "min backward (derivatives.yaml)"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 5, 3), normal(rng, dt, 5, 3), normal(rng, dt, 5, 3))),
        Sample((normal(rng, dt, 5, 3), normal(rng, dt, 5, 3), normal(rng, dt, 5, 3), 2.0, 1.0), {"reduction": "sum"}),
        Sample((normal(rng, dt, 5, 3), normal(rng, dt, 5, 3), normal(rng, dt, 5, 3), 3.0, 3.0, 1e-6, True),
               {"reduction": "none"}),
        Sample((normal(rng, dt, 4), normal(rng, dt, 4), normal(rng, dt, 4)), {"swap": True, "margin": 4.0}),
    ],
    torch_fn=lambda t, a, p_, n, margin=1.0, p=2.0, eps=1e-6, swap=False, reduction="mean": t.nn.functional.triplet_margin_loss(
        a, p_, n, margin, p, eps, swap, reduction=reduction),
    torch_name=_F + "triplet_margin_loss",
    singular=(
        # anchor = positive (eps = 0): d(a, p) has the zero subgradient; d(a, n) = 1 = margin: the
        # bound, where the gradient passes: -(a - n)/|a - n| to a, +(a - n)/|a - n| to n.
        SingularPoint("anchor on positive, at the bound", (f64(0.0, 0.0), f64(0.0, 0.0), f64(1.0, 0.0)),
                      (f64(1.0, 0.0), f64(0.0, 0.0), f64(-1.0, 0.0)), {"eps": 0.0}),
        # swap with d(a, n) = d(p, n) = 5: the min's gradient is shared, half to each distance.
        SingularPoint("swap tie", (f64(0.0, 0.0), f64(6.0, 0.0), f64(3.0, 4.0)),
                      (f64(-1.0, 0.0) + f64(0.3, 0.4), f64(1.0, 0.0) + f64(-0.3, 0.4), f64(-0.3, -0.4) + f64(0.3, -0.4)),
                      {"eps": 0.0, "swap": True, "margin": 10.0}),
    ),
)



def _class_samples(rng, dt):
    """Logits (N, C, d) and (N, C), class indices with one ignored entry, class weights."""
    x3, x2 = 2 * normal(rng, dt, 4, 5, 3), 2 * normal(rng, dt, 6, 4)
    t3, t2 = rng.integers(0, 5, (4, 3)), rng.integers(0, 4, 6)
    t3[1, 2] = -100
    w = uniform(rng, dt, 0.5, 2, 5)
    return x3, t3, x2, t2, w


def _nll_samples(rng, dt):
    x3, t3, x2, t2, w = _class_samples(rng, dt)
    return [Sample((x3, t3)), Sample((x3, t3, w), {"reduction": "sum"}), Sample((x2, t2), {"reduction": "none"}),
            Sample((x2[0], np.asarray(t2[0])),)]


def _cross_entropy_samples(rng, dt):
    x3, t3, x2, t2, w = _class_samples(rng, dt)
    probs = uniform(rng, dt, 0, 1, 6, 4)
    probs = probs / probs.sum(1, keepdims=True)
    return [Sample((x3, t3)), Sample((x3, t3, w), {"reduction": "sum", "label_smoothing": 0.1}),
            Sample((x2, t2, w[:4]), {"label_smoothing": 0.2}), Sample((x2, probs), {"reduction": "none"}),
            Sample((x2, probs, w[:4]), {"label_smoothing": 0.1}), Sample((x2[0], np.asarray(t2[0])),)]


record(
    "nll_loss", fn=nll_loss, public=(_NN + "nll_loss",), formula_ops=("take_along_axis", "sum"),
    seed=("nll_loss_backward (derivatives.yaml)",), samples=_nll_samples,
    torch_fn=lambda t, x, y, w=None, reduction="mean": t.nn.functional.nll_loss(x, y, w, reduction=reduction),
    torch_name=_F + "nll_loss", low_precision=("float32", "bfloat16"), torch_no_grad_args=(2,),
    singular=(SingularPoint("an ignored target", (np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -3.0]]), np.array([1, -100])),
                            (np.array([[0.0, -1.0, 0.0], [0.0, 0.0, 0.0]]),)),),
    deviations="The class weights are differentiable (torch refuses a gradient for them).",
)
record(
    "cross_entropy", fn=cross_entropy, public=(_NN + "cross_entropy",),
    formula_ops=("log_softmax", "take_along_axis", "sum"),
    seed=("_log_softmax_backward_data", "nll_loss_backward (derivatives.yaml)"), samples=_cross_entropy_samples,
    torch_fn=lambda t, x, y, w=None, reduction="mean", label_smoothing=0.0: t.nn.functional.cross_entropy(
        x, y, w, reduction=reduction, label_smoothing=label_smoothing),
    torch_name=_F + "cross_entropy", low_precision=("float32", "bfloat16"), torch_no_grad_args=(2,),
    # Saturated logits: softmax - one_hot exactly, finite at second order (no exp overflow).
    singular=(SingularPoint("saturated logits", (np.array([[800.0, 0.0, 0.0], [0.0, -800.0, 0.0]]), np.array([1, 2])),
                            (np.array([[0.5, -0.5, 0.0], [0.25, 0.0, -0.25]]),)),),
    deviations="The class weights are differentiable (torch refuses a gradient for them).",
)


def _linear_cross_entropy_samples(rng, dt):
    """Activations (2, 3, 4) and (5, 4), a (7, 4) weight (chunks of 3: a scan over two, then a
    tail of one class; chunks of 4: no scan, a tail of three), one ignored target each, class weights, label smoothing, z-loss,
    every reduction, a 1-D input."""
    x3, x2, w, b = normal(rng, dt, 2, 3, 4), normal(rng, dt, 5, 4), normal(rng, dt, 7, 4), normal(rng, dt, 7)
    t3, t2 = rng.integers(0, 7, (2, 3)), rng.integers(0, 7, 5)
    t3[1, 2], t2[3] = -100, 2
    cw = np.asarray(uniform(rng, dt, 0.5, 2, 7), np.float64)
    return [Sample((x3, w, t3), {"chunk_size": 3}),
            Sample((x3, w, t3, b), {"reduction": "sum", "label_smoothing": 0.1, "class_weight": cw, "chunk_size": 3}),
            Sample((x2, w, t2, b), {"reduction": "none", "ignore_index": 2, "chunk_size": 4}),
            Sample((x2, w, t2), {"z_loss": 0.05, "class_weight": cw, "label_smoothing": 0.2, "chunk_size": 3}),
            Sample((x3[0, 0], w, np.asarray(t3[0, 0]), b), {"z_loss": 0.1})]


def _linear_cross_entropy_empty(rng, dt):
    """No tokens (each reduction) and no features (the logits are the bias)."""
    w, b = normal(rng, dt, 7, 4), normal(rng, dt, 7)
    none = np.zeros((0,), np.int64)
    return [Sample((normal(rng, dt, 0, 4), w, none)), Sample((normal(rng, dt, 0, 4), w, none, b), {"reduction": "sum"}),
            Sample((normal(rng, dt, 2, 0, 4), w, np.zeros((2, 0), np.int64)), {"reduction": "none"}),
            Sample((normal(rng, dt, 3, 0), normal(rng, dt, 7, 0), rng.integers(0, 7, 3), b), {"chunk_size": 3})]


def _torch_linear_cross_entropy(t, x, w, target, b=None, *, class_weight=None, ignore_index=-100,
                                label_smoothing=0.0, reduction="mean", z_loss=0.0, chunk_size=None):
    """torch's ``cross_entropy(linear(x, w, b), target)`` over the flattened tokens; the z-loss
    (torch has none) added to torch's per-token losses and reduced with torch's denominator."""
    logits = t.nn.functional.linear(x, w, b)
    flat, flat_target = logits.reshape(-1, w.shape[0]), target.reshape(-1)
    cw = None if class_weight is None else t.as_tensor(class_weight, dtype=logits.dtype)
    if not z_loss:
        out = t.nn.functional.cross_entropy(flat, flat_target, weight=cw, ignore_index=ignore_index,
                                            label_smoothing=label_smoothing, reduction=reduction)
        return out.reshape(target.shape) if reduction == "none" else out
    losses = t.nn.functional.cross_entropy(flat, flat_target, weight=cw, ignore_index=ignore_index,
                                           label_smoothing=label_smoothing, reduction="none")
    kept = flat_target != ignore_index
    losses = losses + z_loss * t.where(kept, t.logsumexp(flat, -1) ** 2, 0)
    if reduction == "none":
        return losses.reshape(target.shape)
    if reduction == "sum":
        return losses.sum()
    w_t = t.ones_like(losses) if cw is None else cw[t.where(kept, flat_target, 0)]
    return losses.sum() / t.where(kept, w_t, 0).sum()


record(
    "linear_cross_entropy", fn=linear_cross_entropy, public=(_NN + "linear_cross_entropy",),
    formula_ops=("linear_cross_entropy",),
    seed=("_log_softmax_backward_data", "nll_loss_backward (derivatives.yaml)", "linear (mm backward)"),
    samples=_linear_cross_entropy_samples, empty_samples=_linear_cross_entropy_empty,
    torch_fn=_torch_linear_cross_entropy,
    torch_name=_F + "cross_entropy(" + _F + "linear(input, weight, bias), target)",
    low_precision=("float32", "bfloat16"),
    singular=(SingularPoint("every target ignored", (np.array([[0.5, -1.0], [1.0, 2.0]]), np.array(
        [[1.0, 0.0], [0.5, -0.5], [0.0, 2.0]]), np.array([-100, -100])), (np.zeros((2, 2)), np.zeros((3, 2)))),),
    deviations="z_loss (torch has none). The loss is NaN when every target is ignored (torch's 0 / 0) with zero "
    "gradients (as torch).",
)


def _ctc_of_logits(logits, targets, input_lengths, target_lengths, **kwargs):
    """``ctc_loss`` of ``log_softmax(logits)``, its usual input: there torch's backward (which
    adds ``exp(log_probs)`` to the derivative with respect to ``log_probs``) gives the logits the
    same gradient (``tests/test_ctc_loss.py`` pins the ``log_probs`` derivative)."""
    return F.ctc_loss(log_softmax(logits, axis=-1), targets, input_lengths, target_lengths, **kwargs)


_CTC_ONE_PATH_LOGITS = np.array([[[0.5, 2.0, -1.0]], [[1.0, 0.0, 0.5]], [[-0.5, 1.5, 0.0]]])


def _ctc_singular_points():
    """Targets that fix the alignment or forbid every one: three steps for the target ``[1, 1]``
    leave one path (1, blank, 1), so the loss is ``-sum_t log softmax(z_t)[path_t]`` and its
    gradient ``softmax(z_t) - onehot(path_t)`` (from NumPy's softmax, not the recursion); with two
    steps no path exists, and ``zero_infinity`` makes the loss the constant 0."""
    z = _CTC_ONE_PATH_LOGITS
    softmax = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    path = np.eye(3)[[1, 0, 1]][:, None, :]
    return (
        SingularPoint("one alignment (a repeat filling every step)", (z, np.array([[1, 1]]), np.array([3]),
                      np.array([2])), (softmax - path,), {"reduction": "sum"}),
        SingularPoint("no alignment, zero_infinity", (z[:2], np.array([[1, 1]]), np.array([2]), np.array([2])),
                      (np.zeros((2, 1, 3)),), {"reduction": "sum", "zero_infinity": True}),
    )


def _ctc_samples(rng, dt):
    """(T, N, C) logits; padded targets with a repeat (a blank between) and an empty one, one
    sequence shorter than T; another blank; one sequence. (Concatenated targets need concrete
    lengths, which the harness traces: ``tests/test_ctc_loss.py`` covers them.)"""
    logits, targets = normal(rng, dt, 6, 3, 4), np.array([[1, 2, 2], [3, 1, 0], [0, 0, 0]])
    lengths, target_lengths = np.array([6, 4, 5]), np.array([3, 2, 0])
    return [Sample((logits, targets, lengths, target_lengths)),
            Sample((logits, targets, lengths, target_lengths), {"reduction": "sum"}),
            Sample((logits, np.where(targets == 3, 1, targets), lengths, target_lengths),
                   {"reduction": "none", "blank": 3}),
            Sample((logits[:, 0], targets[0], np.array(6), np.array(3)), {"reduction": "none"})]


def _torch_ctc_of_logits(t, logits, targets, input_lengths, target_lengths, **kwargs):
    return t.nn.functional.ctc_loss(t.log_softmax(logits, -1), targets, input_lengths, target_lengths, **kwargs)


record(
    "ctc_loss", fn=_ctc_of_logits, public=("jaxrules.torch.nn.functional.ctc_loss",),
    formula_ops=("ctc_loss", "log_softmax"),
    seed=("ctc_loss_cpu_template / ctc_loss_backward_cpu_template (LossCTC.cpp)", "_log_softmax_backward_data"),
    samples=_ctc_samples, torch_fn=_torch_ctc_of_logits,
    torch_name=_F + "ctc_loss(log_softmax(logits))", low_precision=("float32",), singular=_ctc_singular_points(),
    no_empty="torch refuses empty log_probs ('log_probs tensor must not be empty'), and so does jaxrules",
    deviations="The derivative with respect to log_probs is the function's; torch's backward adds exp(log_probs) "
    "at each sequence's steps (the same logits' gradient after log_softmax).",
)
