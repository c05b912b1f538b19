"""``torch.nn.functional`` with torch's signatures: ``import jaxrules.torch.nn.functional as F``.

Every function is a thin adapter over the op of ``jaxrules.nn`` (or ``jaxrules.numpy``) with the
same derivative rules: it translates torch's argument names (``input``, ``dim``, ``keepdim``),
defaults (``gelu``'s exact form, ``softmax``'s implicit ``dim``), positional order (the
deprecated ``size_average`` and ``reduce`` of the losses), return values (``batch_norm`` returns
the normalized tensor) and argument forms (one-element tuples for 2-d and 3-d pooling and
convolution, ``pad``'s last-dimension-first list with negative widths cropping). It computes
nothing of its own, but for the functions without a jaxrules op, written with jax.numpy so that
JAX's derivatives are torch's (the shrinks, pixel and channel shuffles, the dropouts' masks, lp
pooling, unpooling, the margin losses of several classes; ``max_unpool*`` differs on purpose at a
repeated index, ``docs/differences.md``). What
cannot be mirrored (``inplace=True``, ``out=``, the in-place update of
running statistics) is listed in ``docs/differences.md``, "Which namespace to use when".
"""

from __future__ import annotations

import math
import numbers
import operator
import warnings
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

import jaxrules.nn as _nn
import jaxrules.numpy as _rnp
from jaxrules import _validate as _V
from jaxrules import partials as _P
from jaxrules.ops import conv as _conv_ops
from jaxrules.ops import linalg as _linalg_ops
from jaxrules.ops import losses as _losses
from jaxrules.ops import shape as _shape

__all__ = [
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
    "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d", "adaptive_max_pool2d_with_indices",
    "adaptive_max_pool3d", "adaptive_max_pool3d_with_indices", "affine_grid", "alpha_dropout", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "batch_norm", "bilinear", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "celu", "channel_shuffle", "conv1d", "conv2d", "conv3d", "conv_tbc",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "cosine_embedding_loss", "cosine_similarity",
    "cross_entropy", "ctc_loss", "dropout", "dropout1d", "dropout2d", "dropout3d", "elu", "embedding",
    "embedding_bag", "feature_alpha_dropout", "fold", "fractional_max_pool2d", "fractional_max_pool3d",
    "gaussian_nll_loss", "gelu", "glu", "grid_sample", "group_norm", "grouped_mm", "gumbel_softmax", "hardshrink",
    "hardsigmoid", "hardswish", "hardtanh", "hinge_embedding_loss", "huber_loss", "instance_norm", "interpolate",
    "kl_div", "l1_loss", "layer_norm", "leaky_relu", "linear", "linear_cross_entropy", "local_response_norm",
    "log_softmax", "logsigmoid", "lp_pool1d", "lp_pool2d", "lp_pool3d", "margin_ranking_loss", "max_pool1d",
    "max_pool1d_with_indices", "max_pool2d", "max_pool2d_with_indices", "max_pool3d", "max_pool3d_with_indices",
    "max_unpool1d", "max_unpool2d", "max_unpool3d", "mish", "mse_loss", "multi_head_attention_forward",
    "multi_margin_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss", "native_channel_shuffle",
    "nll_loss", "normalize", "one_hot", "pad", "pairwise_distance", "pdist", "pixel_shuffle", "pixel_unshuffle",
    "poisson_nll_loss", "prelu", "relu", "relu6", "rms_norm", "rrelu", "scaled_dot_product_attention", "selu",
    "sigmoid", "silu", "smooth_l1_loss", "soft_margin_loss", "softmax", "softmin", "softplus", "softshrink",
    "softsign", "tanh", "tanhshrink", "threshold", "triplet_margin_loss", "triplet_margin_with_distance_loss",
    "unfold", "upsample", "upsample_bilinear", "upsample_nearest",
]

# ---------------------------------------------------------------------------------------------
# Argument translation


def _no_inplace(op, inplace):
    """JAX arrays are immutable: ``inplace=True`` would leave the caller's array unchanged."""
    if inplace:
        raise ValueError(f"{op}: inplace=True cannot be mirrored (JAX arrays are immutable); "
                         "pass inplace=False and use the returned array")


def _reduction(op, size_average, reduce, reduction):
    """torch's ``_Reduction.legacy_get_string``: the deprecated ``size_average``/``reduce``
    (each None meaning True) override ``reduction``: ``reduce=False`` gives ``'none'``,
    else ``size_average`` gives ``'mean'`` or ``'sum'``."""
    if size_average is None and reduce is None:
        return reduction
    for name, value in (("size_average", size_average), ("reduce", reduce)):
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"{op}: {name} must be None or a bool, got {value!r}")
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def _expand(value, n):
    """torch's pooling and convolution arguments: a one-element tuple or list stands for ``n``
    copies of its element (``padding=(1,)`` is ``padding=(1, 1)`` in 2-d)."""
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 1 and n > 1:
        return tuple(value) * n
    return value


def _softmax_dim(op, ndim):
    """torch's ``_get_softmax_dim``: the implicit ``dim`` is 0 for 0-, 1- and 3-d input, else 1."""
    warnings.warn(f"{op}: implicit dimension choice has been deprecated (as in torch); pass dim=",
                  UserWarning, stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def _cast(x, dtype):
    return jnp.asarray(x) if dtype is None else jnp.asarray(x).astype(dtype)


# ---------------------------------------------------------------------------------------------
# Activations


def relu(input, inplace=False):
    """``max(input, 0)``; mirrors ``torch.nn.functional.relu`` (``jaxrules.nn.relu``)."""
    _no_inplace("relu", inplace)
    return _nn.relu(input)


def relu6(input, inplace=False):
    """``min(max(input, 0), 6)``; mirrors ``torch.nn.functional.relu6`` (``jaxrules.nn.relu6``)."""
    _no_inplace("relu6", inplace)
    return _nn.relu6(input)


def elu(input, alpha=1.0, inplace=False):
    """``input`` if positive, else ``alpha (exp(input) - 1)``; mirrors
    ``torch.nn.functional.elu`` (``jaxrules.nn.elu``)."""
    _no_inplace("elu", inplace)
    return _nn.elu(input, alpha)


def celu(input, alpha=1.0, inplace=False):
    """``max(0, input) + min(0, alpha (exp(input / alpha) - 1))``; mirrors
    ``torch.nn.functional.celu`` (``jaxrules.nn.celu``)."""
    _no_inplace("celu", inplace)
    return _nn.celu(input, alpha)


def selu(input, inplace=False):
    """``scale * elu(input, alpha)`` with torch's constants; mirrors ``torch.nn.functional.selu``."""
    _no_inplace("selu", inplace)
    return _nn.selu(input)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """``input`` if positive, else ``negative_slope * input``; mirrors
    ``torch.nn.functional.leaky_relu`` (``jaxrules.nn.leaky_relu``)."""
    _no_inplace("leaky_relu", inplace)
    return _nn.leaky_relu(input, negative_slope)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """``clamp(input, min_val, max_val)``; mirrors ``torch.nn.functional.hardtanh``."""
    _no_inplace("hardtanh", inplace)
    return _nn.hardtanh(input, min_val, max_val)


def hardsigmoid(input, inplace=False):
    """``relu6(input + 3) / 6``; mirrors ``torch.nn.functional.hardsigmoid``."""
    _no_inplace("hardsigmoid", inplace)
    return _nn.hardsigmoid(input)


def hardswish(input, inplace=False):
    """``input * relu6(input + 3) / 6``; mirrors ``torch.nn.functional.hardswish``."""
    _no_inplace("hardswish", inplace)
    return _nn.hardswish(input)


def silu(input, inplace=False):
    """``input * sigmoid(input)``; mirrors ``torch.nn.functional.silu``."""
    _no_inplace("silu", inplace)
    return _nn.silu(input)


def mish(input, inplace=False):
    """``input * tanh(softplus(input))``; mirrors ``torch.nn.functional.mish``."""
    _no_inplace("mish", inplace)
    return _nn.mish(input)


def threshold(input, threshold, value, inplace=False):
    """``input`` where ``input > threshold``, else ``value``; mirrors
    ``torch.nn.functional.threshold``."""
    _no_inplace("threshold", inplace)
    return _nn.threshold(input, threshold, value)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False, *, key=None):
    """The randomized leaky ReLU: ``x`` for ``x > 0``, ``a x`` otherwise, with ``a`` drawn per
    entry from ``U(lower, upper)`` when ``training`` (a ``jax.random`` key as ``key=``), and
    ``a = (lower + upper) / 2`` (``leaky_relu``) when not; mirrors
    ``torch.nn.functional.rrelu``. The derivative is ``a`` for ``x <= 0`` (torch's saved noise),
    1 above. ``lower > upper`` is a ``ValueError`` (torch's ``RuntimeError``)."""
    op = "rrelu"
    _no_inplace(op, inplace)
    low, high = _V.host_value(lower), _V.host_value(upper)
    if low is None or high is None or np.ndim(low) or np.ndim(high):
        raise TypeError(f"{op}: lower and upper must be numbers, got {lower!r} and {upper!r}")
    if low > high:
        raise ValueError(f"{op}: lower ({lower}) must be less than or equal to upper ({upper}), as torch")
    if not training:
        return _nn.leaky_relu(input, (float(low) + float(high)) / 2)
    if key is None:
        raise ValueError(f"{op}: key (a jax.random key) is required when training")
    x = _V.array(op, "input", input)
    slope = jax.random.uniform(key, x.shape, x.dtype, float(low), float(high))
    return jnp.where(x > 0, x, x * slope)


def logsigmoid(input):
    """``log(sigmoid(input))``; mirrors ``torch.nn.functional.logsigmoid`` (``jaxrules.nn.log_sigmoid``)."""
    return _nn.log_sigmoid(input)


def prelu(input, weight):
    """``input`` if positive, else ``weight * input`` (one weight or one per channel, dim 1);
    mirrors ``torch.nn.functional.prelu``."""
    return _nn.prelu(input, weight)


def softplus(input, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta input)) / beta``, ``input`` where ``beta input > threshold``; mirrors
    ``torch.nn.functional.softplus``."""
    return _nn.softplus(input, beta=beta, threshold=threshold)


def gelu(input, approximate="none"):
    """``input * Phi(input)`` with the normal CDF ``Phi`` (torch's default, the exact form), or
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``. Mirrors ``torch.nn.functional.gelu``
    (``jaxrules.nn.gelu``, whose default is jax.nn's tanh form).

    Args:
        input: the array.
        approximate: ``'none'`` (exact) or ``'tanh'``, torch's only spellings.

    Returns:
        The activation, in ``input``'s shape and dtype.

    Raises:
        ValueError: when ``approximate`` is neither (a bool included: jaxrules.nn's spelling).
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _nn.gelu(input, approximate=approximate)


def glu(input, dim=-1):
    """``a * sigmoid(b)`` for the halves ``a, b`` of ``input`` along ``dim``; mirrors
    ``torch.nn.functional.glu``."""
    return _nn.glu(input, axis=dim)


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """``exp(x) / sum(exp(x), dim)`` of ``x = input`` cast to ``dtype``. Mirrors
    ``torch.nn.functional.softmax`` (``jaxrules.nn.softmax``, whose default axis is -1).

    Args:
        input: the array.
        dim: the dim normalized over; None is torch's deprecated implicit choice, 0 for 0-, 1-
            and 3-d input, else 1, with a ``UserWarning``.
        _stacklevel: torch's warning level; ignored.
        dtype: when given, ``input`` is cast to it first (torch's overflow guard).

    Returns:
        The probabilities along ``dim``, in ``input``'s shape.
    """
    x = _cast(input, dtype)
    return _nn.softmax(x, axis=_softmax_dim("softmax", x.ndim) if dim is None else dim)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """``x - logsumexp(x, dim)`` of ``input`` cast to ``dtype``; ``dim=None`` as in
    ``softmax``. Mirrors ``torch.nn.functional.log_softmax``."""
    x = _cast(input, dtype)
    return _nn.log_softmax(x, axis=_softmax_dim("log_softmax", x.ndim) if dim is None else dim)


def sigmoid(input):
    """``1 / (1 + exp(-input))``; mirrors ``torch.nn.functional.sigmoid`` (``jaxrules.nn.sigmoid``)."""
    return _nn.sigmoid(input)


def tanh(input):
    """``tanh(input)``; mirrors ``torch.nn.functional.tanh`` (``jax.numpy.tanh``)."""
    return jnp.tanh(input)


def softsign(input):
    """``input / (1 + |input|)``; mirrors ``torch.nn.functional.softsign`` (``jaxrules.nn.soft_sign``)."""
    return _nn.soft_sign(input)


def hardshrink(input, lambd=0.5):
    """``input`` outside ``[-lambd, lambd]``, 0 inside (the ends included); mirrors
    ``torch.nn.functional.hardshrink``. The derivative is torch's: 0 inside, 1 outside and at NaN
    (which passes through)."""
    x = _V.array("hardshrink", "input", input)
    lambd = _V.static_scalar("hardshrink", "lambd", lambd)
    return jnp.where((x >= -lambd) & (x <= lambd), jnp.zeros_like(x), x)


def softshrink(input, lambd=0.5):
    """``input - sign(input) lambd`` outside ``[-lambd, lambd]``, 0 inside (``input * 0``: -0.0 for
    negative input, as torch); mirrors ``torch.nn.functional.softshrink``. The derivative is
    torch's: 0 inside, 1 outside and at NaN. ``lambd < 0``: ``ValueError`` (torch's
    ``RuntimeError``)."""
    x = _V.array("softshrink", "input", input)
    lambd = _V.static_scalar("softshrink", "lambd", lambd)
    if not lambd >= 0:
        raise ValueError(f"softshrink: lambd must be >= 0, got {lambd!r}")
    return jnp.where((x >= -lambd) & (x <= lambd), x * 0, x - jnp.sign(x) * lambd)


def tanhshrink(input):
    """``input - tanh(input)``; mirrors ``torch.nn.functional.tanhshrink``."""
    x = _V.array("tanhshrink", "input", input)
    return x - jnp.tanh(x)


def one_hot(tensor, num_classes=-1):
    """Integer class indices to one-hot integer rows; mirrors ``torch.nn.functional.one_hot``.
    ``num_classes=-1`` takes ``max(tensor) + 1``, which needs concrete indices (under ``jit`` pass
    ``num_classes``); indices outside ``[0, num_classes)``: ``ValueError`` when concrete and inside
    ``jaxrules.checked`` (torch's "Class values must be smaller than num_classes"), a zero row
    under a plain ``jit``. The result has the indices' integer dtype widened to at least 32 bits
    (torch: int64, JAX's default integers 32 bits without x64)."""
    indices = jnp.asarray(tensor)
    if not jnp.issubdtype(indices.dtype, jnp.integer):
        raise TypeError(f"one_hot: tensor must hold integer class indices, got {indices.dtype}")
    if num_classes == -1:
        host = _V.host_value(indices)
        if host is None:
            raise ValueError("one_hot: num_classes=-1 reads max(tensor) + 1, which needs concrete indices; "
                             "under jit pass num_classes")
        num_classes = int(host.max()) + 1 if host.size else 0
    _V.index_range("one_hot", "class values", indices, num_classes)
    return _nn.one_hot(indices, num_classes, dtype=jnp.promote_types(indices.dtype, jnp.int32))


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """``softmax(-input, dim)``, torch's definition; mirrors ``torch.nn.functional.softmin``."""
    x = _cast(input, dtype)
    return _nn.softmax(-x, axis=_softmax_dim("softmin", x.ndim) if dim is None else dim)


def gumbel_softmax(logits, tau=1, hard=False, eps=1e-10, dim=-1, *, key=None):
    """A sample of the Gumbel-softmax distribution: ``y = softmax((logits + g) / tau, dim)`` with
    ``g`` standard Gumbel noise from ``key`` (a ``jax.random`` key, required); with ``hard``, the
    one-hot of ``argmax(y)`` in the forward pass and ``y``'s derivative (``one_hot - stop_gradient(y)
    + y``, torch's straight-through estimator). Mirrors ``torch.nn.functional.gumbel_softmax``;
    ``eps`` has no effect (deprecated in torch, which warns when it is set, as here)."""
    op = "gumbel_softmax"
    if eps != 1e-10:
        warnings.warn(f"{op}: `eps` parameter is deprecated and has no effect (as in torch)", UserWarning,
                      stacklevel=2)
    if key is None:
        raise ValueError(f"{op}: key (a jax.random key) is required: JAX has no global generator")
    x = _V.array(op, "logits", logits)
    gumbels = jax.random.gumbel(key, x.shape, x.dtype)
    y = _nn.softmax((x + gumbels) / tau, axis=dim)
    if not hard:
        return y
    hot = jax.nn.one_hot(jnp.argmax(y, axis=dim), y.shape[dim], dtype=y.dtype, axis=dim)
    return hot - jax.lax.stop_gradient(y) + y


def dropout(input, p=0.5, training=True, inplace=False, *, key=None):
    """Zeroes each entry with probability ``p`` and scales the rest by ``1 / (1 - p)`` when
    ``training``; mirrors ``torch.nn.functional.dropout``. JAX has no global generator: with
    ``training`` and ``p > 0`` pass a ``jax.random`` key as ``key=`` (``jaxrules.nn.dropout``)."""
    _no_inplace("dropout", inplace)
    return _nn.dropout(input, p, training, key=key)


def _channel_dropout(op, input, p, training, inplace, key, batched):
    """torch's ``feature_dropout`` of ``input`` (batched: ``(N, C, ...)``; else ``(C, ...)``):
    each channel of each example zeroed with probability ``p`` as a whole, the rest scaled by
    ``1 / (1 - p)``: ``input * mask`` with ``mask = jaxrules.nn.dropout(ones(N, C, 1, ...))``, so
    a dropped NaN stays NaN (torch multiplies too) and the gradient is the mask."""
    _no_inplace(op, inplace)
    x = _V.array(op, "input", input)
    host = _V.host_value(p)
    if host is not None and not (np.ndim(host) == 0 and 0 <= host <= 1):
        raise ValueError(f"{op}: p must be a probability in [0, 1], got {p!r}")
    if training and key is None and (host is None or host > 0):
        raise ValueError(f"{op}: key (a jax.random key) is required when training with p > 0")
    if not batched:
        x = x[None]
    if x.ndim < 2:
        raise ValueError(f"{op}: input must have a channel axis, got shape {jnp.shape(input)}")
    mask = _nn.dropout(jnp.ones(x.shape[:2] + (1,) * (x.ndim - 2), x.dtype), p, training, key=key)
    out = x * mask
    return out if batched else out[0]


def dropout1d(input, p=0.5, training=True, inplace=False, *, key=None):
    """Channel-wise dropout of ``(N, C, L)`` or ``(C, L)`` input (``_channel_dropout``); mirrors
    ``torch.nn.functional.dropout1d``. Other ranks: ``ValueError`` (torch's ``RuntimeError``)."""
    ndim = jnp.ndim(input)
    if ndim not in (2, 3):
        raise ValueError(f"dropout1d: input must be 2-D or 3-D, got {ndim}-D")
    return _channel_dropout("dropout1d", input, p, training, inplace, key, batched=ndim == 3)


def dropout2d(input, p=0.5, training=True, inplace=False, *, key=None):
    """Channel-wise dropout of ``(N, C, H, W)`` input (``_channel_dropout``); mirrors
    ``torch.nn.functional.dropout2d``, whose warnings it gives: a 3-D input is read as ``(N, C,
    L)`` (torch's historical behaviour, not ``(C, H, W)``), other ranks are deprecated there."""
    ndim = jnp.ndim(input)
    if ndim not in (3, 4):
        warnings.warn(f"dropout2d: received a {ndim}-D input, which torch deprecates; it expects (N, C, H, W) "
                      "or (C, H, W)", UserWarning, stacklevel=2)
    if ndim == 3:
        warnings.warn("dropout2d: a 3-D input is read as (N, C, L), channel-wise 1-D dropout, as torch does; "
                      "use dropout1d for that", UserWarning, stacklevel=2)
    return _channel_dropout("dropout2d", input, p, training, inplace, key, batched=True)


def dropout3d(input, p=0.5, training=True, inplace=False, *, key=None):
    """Channel-wise dropout of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` input
    (``_channel_dropout``); mirrors ``torch.nn.functional.dropout3d``, which warns on other ranks
    (deprecated there) and reads them as unbatched."""
    ndim = jnp.ndim(input)
    if ndim not in (4, 5):
        warnings.warn(f"dropout3d: received a {ndim}-D input, which torch deprecates; it expects (N, C, D, H, W) "
                      "or (C, D, H, W)", UserWarning, stacklevel=2)
    return _channel_dropout("dropout3d", input, p, training, inplace, key, batched=ndim == 5)


# SELU's ``scale * alpha``: the value alpha dropout gives a dropped entry before its affine map.
_SELU_ALPHA_SCALE = 1.7580993408473766


def _alpha_dropout(op, input, p, training, inplace, key, feature):
    """torch's ``_dropout_impl`` with ``alpha_dropout``: with ``keep`` a Bernoulli(1 - p) mask (per
    entry; per channel of each example for ``feature``) and ``a = ((alpha^2 p + 1)(1 - p))^(-1/2)``,
    ``a x keep + alpha a (keep - 1) + alpha a p``: ``a x + alpha a p`` where kept, ``alpha a (p -
    1)`` where dropped (zero mean and unit variance in, the same out; ``alpha = 1.7580993...``).
    The derivative is ``a keep``. The identity when not ``training``, for ``p = 0`` and zero-size input;
    ``x * 0`` for ``p = 1`` (NaN stays NaN, as torch)."""
    _no_inplace(op, inplace)
    x = _V.array(op, "input", input)
    host = _V.host_value(p)
    if host is None or np.ndim(host):
        raise TypeError(f"{op}: p must be a number, got {p!r}")
    if not 0 <= host <= 1:
        raise ValueError(f"{op}: dropout probability has to be between 0 and 1, but got {p}")
    if not training or host == 0 or x.size == 0:
        return x
    if host == 1:
        return x * jnp.zeros((), x.dtype)
    if feature and x.ndim < 2:  # checked where the mask is drawn, as torch
        raise ValueError(f"{op}: feature dropout requires at least 2 dimensions in the input, got {x.ndim}-D")
    if key is None:
        raise ValueError(f"{op}: key (a jax.random key) is required when training with 0 < p < 1")
    p = float(host)
    shape = x.shape[:2] + (1,) * (x.ndim - 2) if feature else x.shape
    keep = jax.random.bernoulli(key, 1 - p, shape).astype(x.dtype)
    a = 1 / np.sqrt((_SELU_ALPHA_SCALE**2 * p + 1) * (1 - p))
    return x * (keep * a) + (keep - 1) * (_SELU_ALPHA_SCALE * a) + _SELU_ALPHA_SCALE * a * p


def alpha_dropout(input, p=0.5, training=False, inplace=False, *, key=None):
    """Dropout for SELU networks (``_alpha_dropout``): dropped entries take SELU's negative
    saturation value, then an affine map restores the mean and variance; mirrors
    ``torch.nn.functional.alpha_dropout`` (``training`` defaults to False, as torch's)."""
    return _alpha_dropout("alpha_dropout", input, p, training, inplace, key, feature=False)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False, *, key=None):
    """Alpha dropout of whole channels of ``(N, C, ...)`` input (``_alpha_dropout``); mirrors
    ``torch.nn.functional.feature_alpha_dropout``."""
    return _alpha_dropout("feature_alpha_dropout", input, p, training, inplace, key, feature=True)


# ---------------------------------------------------------------------------------------------
# Linear layers, embeddings, attention


def linear(input, weight, bias=None):
    """``input @ weight^T + bias``; mirrors ``torch.nn.functional.linear``."""
    return _nn.linear(input, weight, bias)


def bilinear(input1, input2, weight, bias=None):
    """``x1^T A x2 + b`` per output feature; mirrors ``torch.nn.functional.bilinear``."""
    return _nn.bilinear(input1, input2, weight, bias)


def grouped_mm(mat_a, mat_b, *, offs=None, bias=None, out_dtype=None):
    """Matrix products of groups (a mixture of experts' layers): ``offs`` (int32, increasing)
    ends each group along the jagged dimension of a 2-D operand. Mirrors
    ``torch.nn.functional.grouped_mm``:

    * ``(M, K) x (G, K, N)``: rows ``offs[g-1]:offs[g]`` of ``mat_a`` times ``mat_b[g]``, ``(M, N)``;
      rows past ``offs[-1]`` are 0 (torch leaves them unwritten);
    * ``(G, M, K) x (K, N)``: ``mat_a[g]`` times the columns ``offs[g-1]:offs[g]`` of ``mat_b``, ``(M, N)``;
    * ``(M, K) x (K, N)``: the contraction split at ``offs``, one product per group, ``(G, M, N)``;
    * ``(G, M, K) x (G, K, N)`` (no ``offs``): a batch of products.

    The derivatives are grouped products again (``ops.linalg``'s grouped ops, both formulas),
    of every order, under ``vmap`` too. ``bias`` is refused as torch refuses it;
    ``out_dtype`` is ``mat_a``'s dtype or float32 (accumulation and result). ``offs`` is checked
    when concrete; traced ``offs`` past the jagged length are not.
    """
    op = "grouped_mm"
    a, b = _V.array(op, "mat_a", mat_a), _V.array(op, "mat_b", mat_b)
    if bias is not None:
        raise ValueError(f"{op}: bias is not supported (torch: 'Bias not supported yet')")
    if a.dtype != b.dtype:
        raise TypeError(f"{op}: mat_a and mat_b must have one dtype, got {a.dtype} and {b.dtype}")
    if out_dtype is not None and jnp.dtype(out_dtype) not in (a.dtype, jnp.dtype(jnp.float32)):
        raise TypeError(f"{op}: out_dtype must be mat_a's dtype or float32, got {out_dtype}")
    preferred = None if out_dtype is None else jnp.dtype(out_dtype)
    if a.ndim not in (2, 3) or b.ndim not in (2, 3):
        raise ValueError(f"{op}: mat_a and mat_b must be 2-D or 3-D, got shapes {a.shape} and {b.shape}")
    if a.shape[-1] != b.shape[-2] or (a.ndim == b.ndim == 3 and a.shape[0] != b.shape[0]):
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} do not multiply")
    if a.ndim == b.ndim == 3:
        if offs is not None:
            raise ValueError(f"{op}: offs must be None when both operands are 3-D")
        if preferred is not None:  # float32 products of the (exactly widened) operands
            a, b = a.astype(preferred), b.astype(preferred)
        return _rnp.matmul(a, b)
    if offs is None:
        raise ValueError(f"{op}: offs is required when an operand is 2-D")
    ends = jnp.asarray(offs)
    if ends.dtype != jnp.int32 or ends.ndim != 1:
        raise TypeError(f"{op}: offs must be a 1-D int32 array (torch's), got {ends.dtype} of shape {ends.shape}")
    groups = b.shape[0] if b.ndim == 3 else a.shape[0] if a.ndim == 3 else ends.shape[0]
    jagged = a.shape[0] if b.ndim == 3 else b.shape[1] if a.ndim == 3 else a.shape[1]
    if ends.shape[0] != groups:
        raise ValueError(f"{op}: offs must have one end per group ({groups}), got {ends.shape[0]}")
    host = _V.host_value(ends)
    if host is not None and (np.any(np.diff(host) < 0) or np.any(host < 0) or np.any(host > jagged)):
        raise ValueError(f"{op}: offs must increase within [0, {jagged}], got {host.tolist()}")
    sizes = jnp.diff(ends, prepend=jnp.zeros((1,), jnp.int32))
    if b.ndim == 3:
        return _linalg_ops.rows_grouped_op(a, b, sizes, preferred=preferred)
    if a.ndim == 3:  # columns of b grouped: the transposed row-grouped product
        return _linalg_ops.rows_grouped_op(b.T, jnp.swapaxes(a, 1, 2), sizes, preferred=preferred).T
    return _linalg_ops.contraction_grouped_op(a, b, sizes, preferred=preferred)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """The rows ``weight[input]``, with no gradient to row ``padding_idx``; mirrors
    ``torch.nn.functional.embedding`` (``jaxrules.nn.embedding``).

    ``max_norm`` renormalizes ``weight`` in place in torch, which cannot be mirrored: it must be
    None. ``sparse`` only changes torch's gradient layout; the gradient here is dense.
    """
    if max_norm is not None:
        raise ValueError("embedding: max_norm renormalizes weight in place in torch and cannot be mirrored; "
                         "it must be None (renormalize with jaxrules.linalg.renorm)")
    if not isinstance(sparse, bool):
        raise TypeError(f"embedding: sparse must be a bool, got {sparse!r}")
    return _nn.embedding(input, weight, padding_idx, scale_grad_by_freq=scale_grad_by_freq)


embedding_bag = _nn.embedding_bag


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                                 enable_gqa=False, dropout_key=None):
    """``softmax(q k^T * scale + mask) v``; mirrors
    ``torch.nn.functional.scaled_dot_product_attention``. With ``dropout_p > 0`` pass a
    ``jax.random`` key as ``dropout_key=``."""
    return _nn.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
                                            enable_gqa=enable_gqa, dropout_key=dropout_key)


def _additive_mask(op, name, mask, dtype):
    """An attention mask as torch's ``_canonical_mask`` makes it: a boolean one (True: not
    attended) as ``-inf`` / 0 in ``dtype``, a float one added as it is."""
    if mask is None:
        return None
    m = jnp.asarray(mask)
    if m.dtype == jnp.bool_:
        return jnp.where(m, -jnp.inf, 0).astype(dtype)
    if not jnp.issubdtype(m.dtype, jnp.floating):
        raise TypeError(f"{op}: {name} must be boolean or floating, got {m.dtype}")
    if m.dtype != dtype:
        raise TypeError(f"{op}: a float {name} must have the query's dtype {dtype}, got {m.dtype} (torch: "
                        "'Input dtypes must be the same')")
    return m


def _heads_first(x, heads, head_dim):
    """``(L, N, heads * head_dim)`` -> ``(N * heads, L, head_dim)`` (torch's view and transpose)."""
    return jnp.swapaxes(x.reshape(x.shape[0], x.shape[1] * heads, head_dim), 0, 1)


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                                 training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False, *, dropout_key=None):
    """Multi-head attention (``torch.nn.MultiheadAttention``'s forward): the inputs projected
    (``in_proj_weight`` split in three, or the separate weights), split into ``num_heads`` heads,
    ``softmax(q k^T / sqrt(head_dim) + mask) v`` per head, the heads joined and projected by
    ``out_proj_weight``. Mirrors ``torch.nn.functional.multi_head_attention_forward``: sequence-
    first ``(L, N, E)`` inputs (``(L, E)``: one sequence), boolean masks marking the positions
    *not* attended (float masks are added), ``bias_k``/``bias_v`` and ``add_zero_attn`` appending
    one key position, ``static_k``/``static_v`` ``(N * num_heads, S, head_dim)`` replacing the
    projected keys/values. With ``need_weights`` the weights are computed and returned (averaged
    over the heads with ``average_attn_weights``), else ``scaled_dot_product_attention`` runs and
    the weights are None. A composition of ``jaxrules.nn``'s ``linear``, ``softmax``,
    ``scaled_dot_product_attention`` and ``dropout`` and ``jaxrules.numpy.matmul``, so its
    derivatives are theirs. JAX has no global generator: with ``training`` and ``dropout_p > 0``
    pass a ``jax.random`` key as ``dropout_key=``. Argument errors torch raises as
    ``AssertionError`` / ``RuntimeError`` are ``ValueError`` here.

    Returns:
        ``(attn_output, attn_weights)``: ``(L, N, E_out)`` and ``(N, L, S)`` (averaged) or
        ``(N, num_heads, L, S)``, or None without ``need_weights``.
    """
    op = "multi_head_attention_forward"
    q_in, k_in, v_in = (_V.array(op, n, a) for n, a in (("query", query), ("key", key), ("value", value)))
    if q_in.ndim not in (2, 3) or k_in.ndim != q_in.ndim or v_in.ndim != q_in.ndim:
        raise ValueError(f"{op}: query, key and value must all be (L, N, E) or all (L, E), got shapes "
                         f"{q_in.shape}, {k_in.shape}, {v_in.shape}")
    batched = q_in.ndim == 3
    if not batched:
        q_in, k_in, v_in = q_in[:, None], k_in[:, None], v_in[:, None]
        if key_padding_mask is not None:
            key_padding_mask = jnp.asarray(key_padding_mask)[None]
    tgt_len, bsz, embed_dim = q_in.shape
    dtype = q_in.dtype
    if key_padding_mask is not None and attn_mask is not None and \
            jnp.asarray(key_padding_mask).dtype != jnp.asarray(attn_mask).dtype:
        warnings.warn("Support for mismatched key_padding_mask and attn_mask is deprecated. Use same type for "
                      "both instead.", UserWarning, stacklevel=2)
    key_padding_mask = _additive_mask(op, "key_padding_mask", key_padding_mask, dtype)
    if is_causal and attn_mask is None:
        raise ValueError(f"{op}: is_causal needs attn_mask (torch's hint; pass the causal mask too)")
    attn_mask = _additive_mask(op, "attn_mask", attn_mask, dtype)
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None  # scaled_dot_product_attention's is_causal
    else:
        is_causal = False
    if embed_dim != embed_dim_to_check:
        raise ValueError(f"{op}: expected embedding dimension {embed_dim_to_check}, got {embed_dim}")
    if isinstance(num_heads, bool) or not isinstance(num_heads, int | np.integer) or num_heads < 1 \
            or embed_dim % num_heads:
        raise ValueError(f"{op}: num_heads must be a positive divisor of the embedding dimension {embed_dim}, "
                         f"got {num_heads!r}")
    head_dim = embed_dim // num_heads
    if (k_in.shape[:2] != v_in.shape[:2]) if use_separate_proj_weight else (k_in.shape != v_in.shape):
        raise ValueError(f"{op}: key of shape {k_in.shape} does not match value of shape {v_in.shape}")
    biases = (None,) * 3 if in_proj_bias is None else jnp.split(_V.array(op, "in_proj_bias", in_proj_bias), 3)
    if use_separate_proj_weight:
        weights = (q_proj_weight, k_proj_weight, v_proj_weight)
        if any(w is None for w in weights):
            raise ValueError(f"{op}: use_separate_proj_weight needs q_proj_weight, k_proj_weight and v_proj_weight")
    else:
        if in_proj_weight is None:
            raise ValueError(f"{op}: in_proj_weight is None (and use_separate_proj_weight is False)")
        weights = jnp.split(_V.array(op, "in_proj_weight", in_proj_weight), 3)
    q, k, v = (_nn.linear(x, w, b) for x, w, b in zip((q_in, k_in, v_in), weights, biases, strict=True))
    src_len = k_in.shape[0]
    if attn_mask is not None:
        if attn_mask.ndim == 2 and attn_mask.shape == (tgt_len, src_len):
            attn_mask = attn_mask[None]
        elif attn_mask.ndim != 3 or attn_mask.shape != (bsz * num_heads, tgt_len, src_len):
            raise ValueError(f"{op}: attn_mask must be ({tgt_len}, {src_len}) or ({bsz * num_heads}, {tgt_len}, "
                             f"{src_len}), got shape {attn_mask.shape}")

    def one_more_key(mask):  # a key position appended: attended (0) by every query
        return None if mask is None else jnp.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, 1)])

    if (bias_k is None) != (bias_v is None):
        raise ValueError(f"{op}: bias_k and bias_v must be given together")
    if bias_k is not None:
        if static_k is not None or static_v is not None:
            raise ValueError(f"{op}: bias_k and bias_v cannot be added to static_k / static_v")
        k = jnp.concatenate([k, jnp.broadcast_to(_V.array(op, "bias_k", bias_k), (1, bsz, embed_dim))])
        v = jnp.concatenate([v, jnp.broadcast_to(_V.array(op, "bias_v", bias_v), (1, bsz, embed_dim))])
        attn_mask, key_padding_mask = one_more_key(attn_mask), one_more_key(key_padding_mask)
    q = _heads_first(q, num_heads, head_dim)
    k, v = (_heads_first(x, num_heads, head_dim) if static is None else _V.array(op, name, static)
            for x, static, name in ((k, static_k, "static_k"), (v, static_v, "static_v")))
    for x, name in ((k, "static_k"), (v, "static_v")):
        if x.ndim != 3 or x.shape[0] != bsz * num_heads or x.shape[2] != head_dim:
            raise ValueError(f"{op}: {name} must be ({bsz * num_heads}, S, {head_dim}), got shape {x.shape}")
    if add_zero_attn:
        k, v = (jnp.concatenate([x, jnp.zeros((bsz * num_heads, 1, head_dim), x.dtype)], axis=1) for x in (k, v))
        attn_mask, key_padding_mask = one_more_key(attn_mask), one_more_key(key_padding_mask)
    src_len = k.shape[1]
    if key_padding_mask is not None:
        if key_padding_mask.shape != (bsz, src_len):
            raise ValueError(f"{op}: key_padding_mask must be ({bsz}, {src_len}), got shape {key_padding_mask.shape}")
        per_head = jnp.repeat(key_padding_mask[:, None, None, :], num_heads, axis=1).reshape(bsz * num_heads, 1,
                                                                                              src_len)
        attn_mask = per_head if attn_mask is None else attn_mask + per_head
    if not training:
        dropout_p = 0.0
    if need_weights:
        scores = _rnp.matmul(q * math.sqrt(1.0 / head_dim), jnp.swapaxes(k, -2, -1))
        probs = _nn.softmax(scores if attn_mask is None else scores + attn_mask, axis=-1)
        if dropout_p > 0.0:
            probs = _nn.dropout(probs, dropout_p, True, key=dropout_key)
        out = jnp.swapaxes(_rnp.matmul(probs, v), 0, 1).reshape(tgt_len * bsz, embed_dim)
        attn_weights = probs.reshape(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            attn_weights = _rnp.mean(attn_weights, axis=1)
    else:
        if attn_mask is not None:
            attn_mask = attn_mask[None] if attn_mask.shape[0] == 1 else attn_mask.reshape(bsz, num_heads, -1, src_len)
        heads = [x.reshape(bsz, num_heads, x.shape[1], head_dim) for x in (q, k, v)]
        out = _nn.scaled_dot_product_attention(*heads, attn_mask, dropout_p, is_causal, dropout_key=dropout_key)
        out = jnp.transpose(out, (2, 0, 1, 3)).reshape(bsz * tgt_len, embed_dim)
        attn_weights = None
    out = _nn.linear(out, _V.array(op, "out_proj_weight", out_proj_weight),
                     None if out_proj_bias is None else _V.array(op, "out_proj_bias", out_proj_bias))
    out = out.reshape(tgt_len, bsz, out.shape[-1])
    if not batched:
        out = out[:, 0]
        attn_weights = None if attn_weights is None else attn_weights[0]
    return out, attn_weights


# ---------------------------------------------------------------------------------------------
# Normalization


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-05):
    """``(input - mean) / sqrt(var + eps) * weight + bias`` per channel (dim 1). Mirrors
    ``torch.nn.functional.batch_norm`` and, as it, returns the tensor only.

    Args:
        input: (N, C, ...) array; a zero-size array of rank 0 or 1 is returned as is (times
            ``weight[0]``, plus ``bias[0]``, where given), as torch returns any empty input.
        running_mean: (C,) running mean, or None; read when not ``training``.
        running_var: (C,) running variance, or None.
        weight: (C,) scale, or None.
        bias: (C,) shift, or None.
        training: normalize with the batch's statistics (biased variance) instead of the running
            ones. torch then updates ``running_mean``/``running_var`` in place; JAX arrays are
            immutable and the update is dropped: ``jaxrules.nn.batch_norm`` returns it.
        momentum: the running statistics' update weight (used by that update only).
        eps: added to the variance.

    Returns:
        The normalized array, in ``input``'s shape.
    """
    x = jnp.asarray(input)
    if x.size == 0 and x.ndim < 2:  # torch returns an empty input as is, times weight[0] plus bias[0]
        out = x if weight is None else x * jnp.asarray(weight)[0]
        return out if bias is None else out + jnp.asarray(bias)[0]
    return _nn.batch_norm(input, running_mean, running_var, weight, bias, training=training, momentum=momentum,
                          eps=eps)[0]


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-05):
    """Per-sample, per-channel normalization; mirrors ``torch.nn.functional.instance_norm`` and
    returns the tensor only (the running statistics' update, in place in torch, is dropped:
    ``jaxrules.nn.instance_norm`` returns it)."""
    return _nn.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)[0]


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last ``len(normalized_shape)``
    dims; mirrors ``torch.nn.functional.layer_norm``."""
    return _nn.layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-05):
    """Normalization over each group of ``C / num_groups`` channels and the spatial dims; mirrors
    ``torch.nn.functional.group_norm``."""
    return _nn.group_norm(input, num_groups, weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dims (``eps=None``: the dtype's
    machine epsilon); mirrors ``torch.nn.functional.rms_norm``."""
    return _nn.rms_norm(input, normalized_shape, weight, eps)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """``input / max(||input||_p, eps)`` along ``dim``; mirrors ``torch.nn.functional.normalize``
    (``out`` must be None)."""
    if out is not None:
        raise ValueError("normalize: out= cannot be mirrored (JAX arrays are immutable); it must be None")
    return _nn.normalize(input, p, dim, eps)


def cosine_similarity(x1, x2, dim=1, eps=1e-08):
    """``<x1, x2> / (max(||x1||, eps) max(||x2||, eps))`` along ``dim``; mirrors
    ``torch.nn.functional.cosine_similarity``. Two 0-d inputs act as 1-element vectors along
    ``dim`` 0 (or -1), as in torch: the result is 0-d."""
    a, b = jnp.asarray(x1), jnp.asarray(x2)
    if a.ndim == 0 and b.ndim == 0:
        if isinstance(dim, bool) or dim not in (0, -1):
            raise ValueError(f"cosine_similarity: dim must be 0 or -1 for 0-d inputs, got {dim!r}")
        return _nn.cosine_similarity(a[None], b[None], 0, eps)
    return _nn.cosine_similarity(x1, x2, dim, eps)


def pairwise_distance(x1, x2, p=2.0, eps=1e-06, keepdim=False):
    """``||x1 - x2 + eps||_p`` along the last dim; mirrors ``torch.nn.functional.pairwise_distance``."""
    return _nn.pairwise_distance(x1, x2, p, eps, keepdims=keepdim)


def pdist(input, p=2):
    """The p-norm distances between the rows of ``input``, upper triangle; mirrors
    ``torch.nn.functional.pdist``."""
    return _nn.pdist(input, p)


# ---------------------------------------------------------------------------------------------
# Convolution and pooling


def _unbatched(n, fn, input, *args):
    """``fn`` on a batch of one where ``input`` is an unbatched ``(C, *spatial)`` array of rank
    ``n + 1`` (torch's convolutions and max pooling take both ranks), the batch dim dropped from
    the result (from each of its arrays: max pooling's values and indices)."""
    x = jnp.asarray(input)
    if x.ndim == n + 1:
        return jax.tree.map(lambda o: o[0], fn(x[None], *args))
    return fn(x, *args)


def _conv(n, op, fn, input, weight, bias, stride, padding, dilation, groups):
    return _unbatched(n, fn, input, weight, bias, _expand(stride, n), _expand(padding, n),
                      _expand(dilation, n), groups)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-d cross-correlation; mirrors ``torch.nn.functional.conv1d``."""
    return _conv(1, "conv1d", _nn.conv1d, input, weight, bias, stride, padding, dilation, groups)


def conv_tbc(input, weight, bias, pad=0):
    """1-d cross-correlation of time-batch-channel input: ``input`` ``(T, B, C_in)``, ``weight``
    ``(K, C_in, C_out)``, ``bias`` ``(C_out,)``, ``pad`` steps of zeros at both ends (a negative
    ``pad`` crops, as torch), output ``(T + 2 pad - K + 1, B, C_out)``. Mirrors
    ``torch.conv_tbc`` / ``torch.nn.functional.conv_tbc``: ``conv1d`` on the transposed operands,
    whose derivatives are ``jaxrules.nn.conv1d``'s."""
    op = "conv_tbc"
    x, w, b = (_V.array(op, n, a) for n, a in (("input", input), ("weight", weight), ("bias", bias)))
    if x.ndim != 3 or w.ndim != 3 or b.ndim != 1:
        raise ValueError(f"{op}: input, weight and bias must be 3-D, 3-D and 1-D, got shapes {x.shape}, {w.shape}, "
                         f"{b.shape}")
    if x.shape[2] != w.shape[1]:
        raise ValueError(f"{op}: input has {x.shape[2]} channels, weight's dim 1 is {w.shape[1]}")
    if b.shape[0] != w.shape[2]:
        raise ValueError(f"{op}: bias has {b.shape[0]} entries, weight's dim 2 (output channels) is {w.shape[2]}")
    if isinstance(pad, bool) or not isinstance(pad, int | np.integer):
        raise TypeError(f"{op}: pad must be an int, got {pad!r}")
    steps = x.shape[0] + 2 * pad - w.shape[0] + 1
    if steps < 0:
        raise ValueError(f"{op}: a kernel of {w.shape[0]} steps does not fit {x.shape[0]} steps padded by {pad}")
    if steps == 0:  # torch's empty output
        return jnp.zeros((0, x.shape[1], w.shape[2]), jnp.result_type(x, w, b))
    if pad < 0:
        x, pad = x[-pad:x.shape[0] + pad], 0
    out = _nn.conv1d(jnp.transpose(x, (1, 2, 0)), jnp.transpose(w, (2, 1, 0)), b, padding=int(pad))
    return jnp.transpose(out, (2, 0, 1))


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d cross-correlation; mirrors ``torch.nn.functional.conv2d`` (one-element tuples accepted)."""
    return _conv(2, "conv2d", _nn.conv2d, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-d cross-correlation; mirrors ``torch.nn.functional.conv3d`` (one-element tuples accepted)."""
    return _conv(3, "conv3d", _nn.conv3d, input, weight, bias, stride, padding, dilation, groups)


def _conv_t(n, op, fn, input, weight, bias, stride, padding, output_padding, groups, dilation):
    e = lambda v: _expand(v, n)  # noqa: E731
    return _unbatched(n, fn, input, weight, bias, e(stride), e(padding), e(output_padding),
                      groups, e(dilation))


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The adjoint of ``conv1d``; mirrors ``torch.nn.functional.conv_transpose1d``."""
    return _conv_t(1, "conv_transpose1d", _nn.conv_transpose1d, input, weight, bias, stride, padding,
                   output_padding, groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The adjoint of ``conv2d``; mirrors ``torch.nn.functional.conv_transpose2d``."""
    return _conv_t(2, "conv_transpose2d", _nn.conv_transpose2d, input, weight, bias, stride, padding,
                   output_padding, groups, dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The adjoint of ``conv3d``; mirrors ``torch.nn.functional.conv_transpose3d``."""
    return _conv_t(3, "conv_transpose3d", _nn.conv_transpose3d, input, weight, bias, stride, padding,
                   output_padding, groups, dilation)


def _avg(n, op, fn, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    e = lambda v: _expand(v, n)  # noqa: E731
    return fn(input, e(kernel_size), e(stride), e(padding), ceil_mode,
              count_include_pad, divisor_override)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """The mean of each window; mirrors ``torch.nn.functional.avg_pool1d``."""
    return _avg(1, "avg_pool1d", _nn.avg_pool1d, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """The mean of each window (or its sum over ``divisor_override``); mirrors
    ``torch.nn.functional.avg_pool2d`` (one-element tuples accepted)."""
    return _avg(2, "avg_pool2d", _nn.avg_pool2d, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """The mean of each window; mirrors ``torch.nn.functional.avg_pool3d`` (one-element tuples accepted)."""
    return _avg(3, "avg_pool3d", _nn.avg_pool3d, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                divisor_override)


def _max(n, op, fn, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    """torch's max pooling, of a batched or an unbatched ``(C, *spatial)`` input (``_unbatched``)."""
    e = lambda v: _expand(v, n)  # noqa: E731
    return _unbatched(n, fn, input, e(kernel_size), e(stride), e(padding), e(dilation), ceil_mode, return_indices)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """The maximum of each window; mirrors ``torch.nn.functional.max_pool1d``."""
    return _max(1, "max_pool1d", _nn.max_pool1d, input, kernel_size, stride, padding, dilation, ceil_mode,
                return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """The maximum of each window; mirrors ``torch.nn.functional.max_pool2d`` (one-element tuples accepted)."""
    return _max(2, "max_pool2d", _nn.max_pool2d, input, kernel_size, stride, padding, dilation, ceil_mode,
                return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """The maximum of each window; mirrors ``torch.nn.functional.max_pool3d`` (one-element tuples accepted)."""
    return _max(3, "max_pool3d", _nn.max_pool3d, input, kernel_size, stride, padding, dilation, ceil_mode,
                return_indices)


def _fractional_starts(sample, size, out, pool):
    """torch's ``generate_intervals``: the window starts ``int((i + u) a) - int(u a)`` for
    ``i < out - 1`` with ``a = (size - pool) / (out - 1)``, and ``size - pool`` last; ``sample``
    (``u`` in [0, 1)) is ``(N, C)``, the starts ``(N, C, out)``. Each step is rounded to the
    samples' dtype, as torch computes them in it (XLA would keep a half-precision chain in
    float32)."""
    if out == 1:
        return jnp.full(sample.shape + (1,), size - pool, jnp.int32)
    dtype = sample.dtype
    if dtype in (jnp.bfloat16, jnp.float16):
        info = jnp.finfo(dtype)

        def rounded(v):
            return jax.lax.reduce_precision(v, exponent_bits=info.nexp, mantissa_bits=info.nmant)
    else:
        def rounded(v):
            return v
    wide = jnp.promote_types(dtype, jnp.float32)
    u = sample.astype(wide)[..., None]
    alpha = rounded(rounded(jnp.asarray(size - pool, wide)) / rounded(jnp.asarray(out - 1, wide)))
    steps = rounded(jnp.arange(out - 1, dtype=wide))
    starts = (jnp.trunc(rounded(rounded(steps + u) * alpha)) - jnp.trunc(rounded(u * alpha))).astype(jnp.int32)
    return jnp.concatenate([starts, jnp.full(sample.shape + (1,), size - pool, jnp.int32)], axis=-1)


def _fractional_max_pool(spatial, op, input, kernel_size, output_size, output_ratio, return_indices, samples, key):
    """torch's fractional max pooling in ``spatial`` (2 or 3) dims: per plane, windows of
    ``kernel_size`` at pseudo-random increasing starts (``_fractional_starts``; sample ``d`` of
    a plane drives dim ``d`` in 3-d, and in 2-d sample 0 the width, 1 the height, as torch),
    each giving its maximum and its flat index in the plane (the first maximum; a NaN wins, the
    last one; a window of -inf gives its first entry). The values are read at those indices
    (``jaxrules.numpy.take_along_axis``, whose VJP adds overlapping windows' cotangents)."""
    x = _V.array(op, "input", input)
    if x.ndim not in (spatial + 1, spatial + 2):
        raise ValueError(f"{op}: input must be {spatial + 1}-D or {spatial + 2}-D, got shape {x.shape}")
    pool = _conv_ops._per_axis(op, "kernel_size", _expand(kernel_size, spatial), spatial, 1)
    if (output_size is None) == (output_ratio is None):
        raise ValueError(f"{op}: give exactly one of output_size and output_ratio")
    sizes = x.shape[-spatial:]
    if output_size is not None:
        out = _conv_ops._per_axis(op, "output_size", _expand(output_size, spatial), spatial, 1)
    else:
        ratio = _expand(output_ratio, spatial)
        ratio = (ratio,) * spatial if isinstance(ratio, numbers.Real) else tuple(ratio)
        if len(ratio) != spatial or not all(0 < r < 1 for r in ratio):
            raise ValueError(f"{op}: output_ratio must lie in (0, 1), got {output_ratio!r}")
        out = tuple(int(n * r) for n, r in zip(sizes, ratio, strict=True))
    if any(o < 1 or o + k - 1 > n for o, k, n in zip(out, pool, sizes, strict=True)):
        raise ValueError(f"{op}: output_size {out} with kernel_size {pool} does not fit the input's {sizes}")
    values, indices = _unbatched(spatial, lambda v: _fractional_windows_max(op, v, pool, out, samples, key), x)
    return (values, indices) if return_indices else values


def _fractional_windows_max(op, x, pool, out, samples, key):
    """``_fractional_max_pool``'s values and indices of a batched ``(N, C, *spatial)`` input."""
    sizes, spatial = x.shape[2:], x.ndim - 2
    batch, channels = x.shape[:2]
    if samples is None:
        if key is None:
            raise ValueError(f"{op}: JAX has no global generator: pass a jax.random key as key= "
                             "(or torch's _random_samples)")
        samples = jax.random.uniform(key, (batch, channels, spatial), x.dtype)
    u = _V.array(op, "_random_samples", samples)
    if u.shape != (batch, channels, spatial):
        raise ValueError(f"{op}: _random_samples must be ({batch}, {channels}, {spatial}), got shape {u.shape}")
    order = (1, 0) if spatial == 2 else (0, 1, 2)
    starts = [_fractional_starts(u[..., s], n, o, k) for s, n, o, k in zip(order, sizes, out, pool, strict=True)]
    # every window's entries: (N, C, *out, *pool) flat indices into the plane
    flat = jnp.zeros((batch, channels) + out + pool, jnp.int32)
    for d in range(spatial):
        position = starts[d].reshape((batch, channels) + tuple(o if e == d else 1 for e, o in enumerate(out))
                                     + (1,) * spatial)
        position = position + jnp.arange(pool[d]).reshape((1,) * (2 + spatial) + tuple(
            k if e == d else 1 for e, k in enumerate(pool)))
        flat = flat * sizes[d] + position
    windows = flat.reshape((batch, channels) + out + (-1,))
    plane = x.reshape(batch, channels, -1)
    entries = jnp.take_along_axis(jax.lax.stop_gradient(plane), windows.reshape(batch, channels, -1), axis=2)
    entries = entries.reshape(windows.shape)
    nan = jnp.isnan(entries)
    last_nan = entries.shape[-1] - 1 - jnp.argmax(nan[..., ::-1], axis=-1)
    chosen = jnp.where(jnp.any(nan, axis=-1), last_nan, jnp.argmax(entries, axis=-1))
    indices = jnp.take_along_axis(windows, chosen[..., None], axis=-1)[..., 0]
    values = _rnp.take_along_axis(plane, indices.reshape(batch, channels, -1), axis=2).reshape(indices.shape)
    return values, indices.astype(jnp.zeros((), int).dtype)


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None, *, key=None):
    """Fractional max pooling (Graham 2014) over the last two dims of ``(N, C, H, W)`` or
    ``(C, H, W)``; mirrors ``torch.nn.functional.fractional_max_pool2d`` given the same
    ``_random_samples`` ``(N, C, 2)`` in [0, 1). JAX has no global generator: without
    ``_random_samples`` pass a ``jax.random`` key as ``key=``. ``return_indices``: also the flat
    index ``h W + w`` of each maximum (for ``max_unpool2d``)."""
    return _fractional_max_pool(2, "fractional_max_pool2d", input, kernel_size, output_size, output_ratio,
                                return_indices, _random_samples, key)


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None, *, key=None):
    """Fractional max pooling over the last three dims of ``(N, C, T, H, W)`` or ``(C, T, H, W)``;
    mirrors ``torch.nn.functional.fractional_max_pool3d`` given the same ``_random_samples``
    ``(N, C, 3)``; without them pass a ``jax.random`` key as ``key=``."""
    return _fractional_max_pool(3, "fractional_max_pool3d", input, kernel_size, output_size, output_ratio,
                                return_indices, _random_samples, key)


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """``max_pool1d(..., return_indices=True)``: the maxima and their flat indices in each
    channel's input, whatever ``return_indices`` says; mirrors
    ``torch.nn.functional.max_pool1d_with_indices``."""
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """``max_pool2d(..., return_indices=True)``; mirrors
    ``torch.nn.functional.max_pool2d_with_indices``."""
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """``max_pool3d(..., return_indices=True)``; mirrors
    ``torch.nn.functional.max_pool3d_with_indices``."""
    return max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def _unpool_output_size(op, n, shape, kernel_size, stride, padding, output_size):
    """torch's ``_unpool_output_size``: ``(in - 1) stride + kernel - 2 padding`` per spatial axis,
    or ``output_size`` (its last ``n`` entries when it also names the batch and channel axes),
    which must lie strictly within ``stride`` of that default."""
    default = [(shape[d - n] - 1) * stride[d] + kernel_size[d] - 2 * padding[d] for d in range(n)]
    if output_size is None:
        return default
    size = list(output_size)
    if len(size) == n + 2:
        size = size[2:]
    if len(size) != n:
        raise ValueError(f"{op}: output_size must have {n} or {n + 2} elements, got {len(size)}")
    for d in range(n):
        low, high = default[d] - stride[d], default[d] + stride[d]
        if not low < size[d] < high:
            raise ValueError(f"{op}: invalid output_size {tuple(output_size)} (dim {d} must be between {low} and "
                             f"{high}, exclusive)")
    return [int(v) for v in size]


def _max_unpool(n, op, input, indices, kernel_size, stride, padding, output_size):
    """torch's max unpooling: each channel's output is zero but at ``indices`` (flat positions in
    the channel's ``output_size``, as ``max_pool*d(return_indices=True)`` gives them), which take
    ``input``'s values. Where indices repeat (overlapping windows that chose one position), one of
    their values is kept, unspecified which (as torch); the derivative reaches that value only: the
    output does not depend on the others, whose gradient is 0 (torch's backward gathers the
    gradient into every one of them). An index outside the output is a ``ValueError`` when
    concrete (torch's ``RuntimeError``), checked inside ``jaxrules.checked`` when traced; elsewhere
    that channel's output is NaN."""
    x = _V.array(op, "input", input)
    idx = jnp.asarray(indices)
    if not jnp.issubdtype(idx.dtype, jnp.integer):
        raise TypeError(f"{op}: indices must be integers, got {idx.dtype}")
    if idx.shape != x.shape:
        raise ValueError(f"{op}: indices must have input's shape {x.shape}, got {idx.shape}")
    if x.ndim not in (n + 1, n + 2):
        raise ValueError(f"{op}: input must be {n + 1}-D or {n + 2}-D, got {x.ndim}-D")
    # torch's unpooling reads as many spatial axes as ``kernel_size`` has entries: a one-element
    # tuple is not expanded here (torch then refuses it), unlike pooling's.
    kernel = _conv_ops._per_axis(op, "kernel_size", kernel_size, n, 1)
    step = kernel if stride is None else _conv_ops._per_axis(op, "stride", stride, n, 1)
    pad = _conv_ops._per_axis(op, "padding", padding, n, 0)
    size = _unpool_output_size(op, n, x.shape, kernel, step, pad, output_size)
    plane = math.prod(size)
    _V.index_range(op, "indices", idx, plane)
    rows = x.reshape(-1, math.prod(x.shape[-n:]))
    cols = idx.reshape(rows.shape)
    out = jnp.zeros((rows.shape[0], plane), x.dtype).at[jnp.arange(rows.shape[0])[:, None], cols].set(
        rows, mode="drop")
    bad = jnp.any((cols < 0) | (cols >= plane), axis=1, keepdims=True)
    return jnp.where(bad, jnp.nan, out).reshape(x.shape[:-n] + tuple(size))


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The partial inverse of ``max_pool1d`` (``_max_unpool``); mirrors
    ``torch.nn.functional.max_unpool1d``."""
    return _max_unpool(1, "max_unpool1d", input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The partial inverse of ``max_pool2d`` (``_max_unpool``); mirrors
    ``torch.nn.functional.max_unpool2d``."""
    return _max_unpool(2, "max_unpool2d", input, indices, kernel_size, stride, padding, output_size)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The partial inverse of ``max_pool3d`` (``_max_unpool``); mirrors
    ``torch.nn.functional.max_unpool3d``."""
    return _max_unpool(3, "max_unpool3d", input, indices, kernel_size, stride, padding, output_size)


def _lp_pool(dims, op, input, norm_type, kernel_size, stride, ceil_mode):
    """torch's composite ``lp_pool``: ``(sign(a) relu(|a|) K)^(1/p)`` with ``a`` the average pool
    of ``input^p`` over windows of ``K`` entries (the windows' sums of ``input^p``, their ``p``-th
    root); ``p = +-inf``: the max pool of ``|input|`` (its negated min for ``-inf``). The
    derivatives are this composition's, as torch's."""
    p = _V.static_scalar(op, "norm_type", norm_type)
    if isinstance(p, complex) or p == 0 or p != p:
        raise ValueError(f"{op}: norm_type must be a non-zero real number, got {norm_type!r}")
    avg, pool = {1: (avg_pool1d, max_pool1d), 2: (avg_pool2d, max_pool2d), 3: (avg_pool3d, max_pool3d)}[dims]
    x = jnp.asarray(input)
    if p == float("inf"):
        return pool(jnp.abs(x), kernel_size, stride, 0, 1, ceil_mode)
    if p == -float("inf"):
        return -pool(-jnp.abs(x), kernel_size, stride, 0, 1, ceil_mode)
    sizes = _expand(kernel_size, dims)
    window = int(np.prod(sizes if isinstance(sizes, Sequence) else (sizes,) * dims))
    out = avg(x ** p, kernel_size, stride, 0, ceil_mode)
    return (jnp.sign(out) * _nn.relu(jnp.abs(out)) * window) ** (1.0 / p)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """The ``norm_type``-norm of each window (``_lp_pool``); mirrors ``torch.nn.functional.lp_pool1d``."""
    return _lp_pool(1, "lp_pool1d", input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """The ``norm_type``-norm of each window (``_lp_pool``); mirrors ``torch.nn.functional.lp_pool2d``."""
    return _lp_pool(2, "lp_pool2d", input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """The ``norm_type``-norm of each window (``_lp_pool``); mirrors ``torch.nn.functional.lp_pool3d``."""
    return _lp_pool(3, "lp_pool3d", input, norm_type, kernel_size, stride, ceil_mode)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """``input / (k + alpha mean(input^2 over size neighbouring channels))^beta``, the channels
    zero-padded by ``size // 2`` before and ``(size - 1) // 2`` after (torch's composite of
    ``pad`` and ``avg_pool2d``/``avg_pool3d``, whose derivatives these are); mirrors
    ``torch.nn.functional.local_response_norm``. Input of fewer than 3 dims: ``ValueError``."""
    x = jnp.asarray(input)
    if x.ndim < 3:
        raise ValueError(f"local_response_norm: input must have 3 or more dimensions, got {x.ndim}")
    size = operator.index(size)
    if x.size == 0:
        return x
    div = x * x
    if x.ndim == 3:
        div = pad(div[:, None], (0, 0, size // 2, (size - 1) // 2))
        div = avg_pool2d(div, (size, 1), stride=1)[:, 0]
    else:
        div = div.reshape(x.shape[0], 1, x.shape[1], x.shape[2], -1)
        div = pad(div, (0, 0, 0, 0, size // 2, (size - 1) // 2))
        div = avg_pool3d(div, (size, 1, 1), stride=1)[:, 0].reshape(x.shape)
    return x / (div * alpha + k) ** beta


adaptive_avg_pool1d = _nn.adaptive_avg_pool1d
adaptive_avg_pool2d = _nn.adaptive_avg_pool2d
adaptive_avg_pool3d = _nn.adaptive_avg_pool3d
adaptive_max_pool1d = _nn.adaptive_max_pool1d
adaptive_max_pool2d = _nn.adaptive_max_pool2d
adaptive_max_pool3d = _nn.adaptive_max_pool3d


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=False):
    """``adaptive_max_pool1d(..., return_indices=True)``; mirrors
    ``torch.nn.functional.adaptive_max_pool1d_with_indices``."""
    return adaptive_max_pool1d(input, output_size, True)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=False):
    """``adaptive_max_pool2d(..., return_indices=True)``; mirrors
    ``torch.nn.functional.adaptive_max_pool2d_with_indices``."""
    return adaptive_max_pool2d(input, output_size, True)


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=False):
    """``adaptive_max_pool3d(..., return_indices=True)``; mirrors
    ``torch.nn.functional.adaptive_max_pool3d_with_indices``."""
    return adaptive_max_pool3d(input, output_size, True)


fold = _nn.fold
unfold = _nn.unfold
interpolate = _nn.interpolate


def _deprecated_upsample(op):
    warnings.warn(f"nn.functional.{op} is deprecated (as in torch); use nn.functional.interpolate instead",
                  UserWarning, stacklevel=3)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """``interpolate(input, size, scale_factor, mode, align_corners)`` with torch's deprecation
    warning; mirrors ``torch.nn.functional.upsample``."""
    _deprecated_upsample("upsample")
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """``interpolate(input, size, scale_factor, mode="nearest")`` with torch's deprecation
    warning; mirrors ``torch.nn.functional.upsample_nearest``."""
    _deprecated_upsample("upsample_nearest")
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """``interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)`` (corners
    aligned, as torch's) with torch's deprecation warning; mirrors
    ``torch.nn.functional.upsample_bilinear``."""
    _deprecated_upsample("upsample_bilinear")
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """Samples ``input`` at ``grid``'s normalized coordinates; mirrors
    ``torch.nn.functional.grid_sample`` (``align_corners=None`` is False, as torch)."""
    return _nn.grid_sample(input, grid, mode, padding_mode, bool(align_corners))


def affine_grid(theta, size, align_corners=None):
    """The sampling grid of the affine maps ``theta``; mirrors ``torch.nn.functional.affine_grid``
    (``align_corners=None`` is False, as torch)."""
    return _nn.affine_grid(theta, size, bool(align_corners))


# ---------------------------------------------------------------------------------------------
# Pixel shuffles


def _shuffle_factor(op, name, factor):
    if isinstance(factor, bool) or not isinstance(factor, int | np.integer) or factor < 1:
        raise ValueError(f"{op}: {name} must be a positive int, got {factor!r}")
    return int(factor)


def pixel_shuffle(input, upscale_factor):
    """``(*, C r^2, H, W)`` to ``(*, C, H r, W r)``: output ``[c, h r + i, w r + j]`` is input
    ``[c r^2 + i r + j, h, w]`` (a reshape and a transpose; their derivatives are JAX's, exact);
    mirrors ``torch.nn.functional.pixel_shuffle``."""
    x = jnp.asarray(input)
    r = _shuffle_factor("pixel_shuffle", "upscale_factor", upscale_factor)
    if x.ndim < 3:
        raise ValueError(f"pixel_shuffle: input must have at least 3 dimensions, got shape {x.shape}")
    *batch, c, h, w = x.shape
    if c % (r * r):
        raise ValueError(f"pixel_shuffle: input's channels ({c}) must be divisible by upscale_factor^2 ({r * r})")
    n = len(batch)
    y = x.reshape(*batch, c // (r * r), r, r, h, w)
    y = jnp.transpose(y, (*range(n), n, n + 3, n + 1, n + 4, n + 2))
    return y.reshape(*batch, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor):
    """``(*, C, H r, W r)`` to ``(*, C r^2, H, W)``, the inverse of ``pixel_shuffle``; mirrors
    ``torch.nn.functional.pixel_unshuffle``."""
    x = jnp.asarray(input)
    r = _shuffle_factor("pixel_unshuffle", "downscale_factor", downscale_factor)
    if x.ndim < 3:
        raise ValueError(f"pixel_unshuffle: input must have at least 3 dimensions, got shape {x.shape}")
    *batch, c, h, w = x.shape
    if h % r or w % r:
        raise ValueError(f"pixel_unshuffle: input's height ({h}) and width ({w}) must be divisible by "
                         f"downscale_factor ({r})")
    n = len(batch)
    y = x.reshape(*batch, c, h // r, r, w // r, r)
    y = jnp.transpose(y, (*range(n), n, n + 2, n + 4, n + 1, n + 3))
    return y.reshape(*batch, c * r * r, h // r, w // r)


# ---------------------------------------------------------------------------------------------
# Padding

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def channel_shuffle(input, groups):
    """ShuffleNet's channel shuffle of ``(N, C, *spatial)`` input: the channels split into
    ``groups`` groups of ``C / groups``, read out group-index fastest (``reshape(N, groups, C /
    groups, ...)``, swap those axes, reshape back); mirrors ``torch.nn.functional.channel_shuffle``
    (and ``native_channel_shuffle``). Its derivative is the inverse permutation."""
    op = "channel_shuffle"
    x = _V.array(op, "input", input, inexact=False)
    if isinstance(groups, bool) or not isinstance(groups, int | np.integer):
        raise TypeError(f"{op}: groups must be an int, got {groups!r}")
    if groups <= 0:
        raise ValueError(f"{op}: the number of groups must be positive, got {groups}")
    if x.ndim <= 2:
        raise ValueError(f"{op}: input must have more than 2 dimensions (N, C, *spatial), got shape {x.shape}")
    channels = x.shape[1]
    if channels % groups:
        raise ValueError(f"{op}: the number of channels ({channels}) must be divisible by groups ({groups})")
    split = x.reshape(x.shape[0], groups, channels // groups, *x.shape[2:])
    return jnp.swapaxes(split, 1, 2).reshape(x.shape)


native_channel_shuffle = channel_shuffle


def pad(input, pad, mode="constant", value=None):
    """Pads (or, with a negative width, crops) the last ``len(pad) // 2`` dims; mirrors
    ``torch.nn.functional.pad``.

    Args:
        input: the array.
        pad: torch's flat list, last dim first: ``(left, right, top, bottom, front, back)``;
            a negative width removes that many entries (``constant_pad_nd``'s narrowing).
        mode: ``'constant'`` (``value``, default 0), ``'reflect'``, ``'replicate'`` or
            ``'circular'`` (``jaxrules.numpy.pad``'s ``reflect``, ``edge``, ``wrap``). The
            non-constant modes pad the last 1-3 dims of a (batch,) channel, spatial input, as
            torch; ``reflect`` and ``replicate`` pad before cropping, ``circular`` crops first
            and wraps the cropped array, as torch does.
        value: the fill of ``'constant'``; the other modes take none.

    Returns:
        The padded array; its derivative is the cotangent cropped where padded and zero where
        cropped (seed ``constant_pad_nd_backward``, and ``jaxrules.numpy.pad``'s for the modes).

    Raises:
        ValueError: for an odd-length ``pad``, more pairs than dims, an unknown ``mode``, a
            ``value`` with a non-constant mode, a size cropped below 0, or torch's limits of the
            non-constant modes (reflect: width < size; circular: width <= size).
    """
    op = "pad"
    x = jnp.asarray(input)
    try:
        pad = tuple(operator.index(p) for p in pad)
    except TypeError:
        raise TypeError(f"{op}: pad must be a sequence of ints, got {pad!r}") from None
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(f"{op}: pad must have an even length of at most 2 * input.ndim = {2 * x.ndim}, got {pad!r}")
    if mode not in _PAD_MODES:
        raise ValueError(f"{op}: mode must be one of {', '.join(map(repr, _PAD_MODES))}, got {mode!r}")
    n = len(pad) // 2
    widths = [(0, 0)] * (x.ndim - n) + [(pad[2 * k], pad[2 * k + 1]) for k in reversed(range(n))]
    for d, (lo, hi) in enumerate(widths):
        if x.shape[d] + min(lo, 0) + min(hi, 0) < 0:
            raise ValueError(f"{op}: the widths {(lo, hi)} crop dim {d} of size {x.shape[d]} below 0")
    if mode == "constant":
        fill = 0 if value is None else value
        if not jnp.issubdtype(x.dtype, jnp.inexact):  # no derivative: lax.pad keeps the dtype, either sign
            return jax.lax.pad(x, jnp.asarray(fill, x.dtype), [(lo, hi, 0) for lo, hi in widths])
        return _shape.pad_op(x, widths=tuple(widths), value=fill)
    if value is not None and value != 0:
        raise ValueError(f"{op}: mode={mode!r} takes no value (torch: only 'constant' does), got {value!r}")
    if not 1 <= n <= 3 or x.ndim not in (n + 1, n + 2):
        raise ValueError(f"{op}: mode={mode!r} pads the last 1-3 dims of a {n + 1}-d or {n + 2}-d input, got "
                         f"{len(pad)} widths for a {x.ndim}-d input")
    grow = tuple((max(lo, 0), max(hi, 0)) for lo, hi in widths)
    crop = tuple((min(lo, 0), min(hi, 0)) for lo, hi in widths)
    if mode == "circular":
        x = _crop(x, crop)
    for d, (lo, hi) in enumerate(grow):
        limit = x.shape[d] if mode == "circular" else x.shape[d] - 1
        # a batch dim (of an (n + 2)-d input) may have size 0, as in torch; no other dim may
        if mode != "replicate" and (d > 0 or x.ndim == n + 1) and max(lo, hi) > limit:
            raise ValueError(f"{op}: mode={mode!r} pads dim {d} of size {x.shape[d]} by {(lo, hi)}; torch allows "
                             f"at most {limit}")
    x = _shape.pad(x, grow, _PAD_MODES[mode])
    return x if mode == "circular" else _crop(x, crop)


def _crop(x, crop):
    """``x`` narrowed by the non-positive widths ``crop`` (``pad_op``'s negative widths)."""
    if not any(lo or hi for lo, hi in crop):
        return x
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return x[tuple(slice(-lo, x.shape[d] + hi) for d, (lo, hi) in enumerate(crop))]
    return _shape.pad_op(x, widths=crop, value=0)


# ---------------------------------------------------------------------------------------------
# Losses


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """``-weight[t] input[n, t]``, reduced (``'mean'``: over the weights of the kept targets);
    mirrors ``torch.nn.functional.nll_loss``."""
    return _nn.nll_loss(input, target, weight, ignore_index, _reduction("nll_loss", size_average, reduce, reduction))


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    """``-weight[t] log_softmax(input, 1)[n, t]`` per sample for class indices (or
    ``-sum_c weight[c] p_c log_softmax(input, 1)_c`` for class probabilities), with
    ``label_smoothing`` mixing in the uniform distribution. Mirrors
    ``torch.nn.functional.cross_entropy``.

    Args:
        input: (N, C, ...) or (C,) logits.
        target: class indices (N, ...) or probabilities shaped as ``input``.
        weight: (C,) class weights, or None.
        size_average: torch's deprecated flag (None: True); see ``reduce``.
        ignore_index: the class index that contributes nothing (indices only).
        reduce: torch's deprecated flag (None: True). When either flag is given it overrides
            ``reduction`` as torch's ``legacy_get_string``: ``reduce=False`` gives ``'none'``,
            else ``size_average=False`` gives ``'sum'``, else ``'mean'``.
        reduction: ``'mean'`` (over the weights of the kept targets), ``'sum'`` or ``'none'``.
        label_smoothing: in [0, 1].

    Returns:
        The loss: a scalar, or per sample with ``'none'``.
    """
    return _nn.cross_entropy(input, target, weight, ignore_index,
                             _reduction("cross_entropy", size_average, reduce, reduction), label_smoothing)


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None, reduction="mean",
                         ignore_index=None, label_smoothing=0.0, options=None):
    """``cross_entropy(linear(input, linear_weight, linear_bias), target, weight, ...)``; mirrors
    ``torch.nn.functional.linear_cross_entropy`` (torch 2.13). ``input`` is ``(N, in_features)``
    or ``(in_features,)``; ``linear_weight`` is ``(C, in_features)``, or ``(C, d_1, ..., d_K,
    in_features)`` for a K-dimensional loss over logits ``(N, C, d_1, ..., d_K)``. A ``target``
    of the logits' shape holds probabilities (torch's rule; ``ignore_index`` must then be None),
    any other class indices (``ignore_index`` None means -100). Class indices with a 2-D
    ``linear_weight`` run the fused head, ``jaxrules.nn.linear_cross_entropy``, which never holds
    the logits (and takes any leading axes); the other cases run the two functions composed,
    torch's reference path. ``options`` (torch's chunking strategy) is accepted and has no
    effect: the fused head always works in chunks of the vocabulary."""
    op = "linear_cross_entropy"
    x = _V.array(op, "input", input)
    w = _V.array(op, "linear_weight", linear_weight)
    if x.ndim not in (1, 2):
        raise ValueError(f"{op}: input must be 1-D or 2-D, as torch's, got {x.ndim}-D "
                         "(jaxrules.nn.linear_cross_entropy takes any leading axes)")
    if w.ndim < 2 or w.shape[-1] != x.shape[-1]:
        raise ValueError(f"{op}: linear_weight must be (classes, ..., in_features) with in_features = "
                         f"{x.shape[-1]} (input's last axis), got shape {w.shape}")
    classes, out_features = w.shape[0], w.shape[1:-1]
    if linear_bias is not None and jnp.shape(linear_bias) != (classes, *out_features):
        raise ValueError(f"{op}: linear_bias must have shape {(classes, *out_features)}, got "
                         f"{jnp.shape(linear_bias)}")
    if out_features and x.ndim == 1:
        raise ValueError(f"{op}: a K-dimensional loss (linear_weight of shape {w.shape}) needs batched "
                         f"(N, {x.shape[-1]}) input, got shape {x.shape}")
    t = jnp.asarray(target)
    logits_shape = (*x.shape[:-1], classes, *out_features)
    probabilities = t.shape == logits_shape
    if probabilities and ignore_index is not None:
        raise ValueError(f"{op}: ignore_index cannot be given when target holds probabilities (target of the "
                         f"logits' shape {logits_shape})")
    index = -100 if ignore_index is None else ignore_index
    if not probabilities and not out_features:
        return _nn.linear_cross_entropy(x, w, t, linear_bias, class_weight=weight, ignore_index=index,
                                        label_smoothing=label_smoothing, reduction=reduction)
    rows = math.prod(w.shape[:-1])
    bias = None if linear_bias is None else jnp.reshape(linear_bias, rows)
    logits = linear(x, w.reshape(rows, w.shape[-1]), bias).reshape(logits_shape)
    return cross_entropy(logits, t, weight, ignore_index=index, reduction=reduction, label_smoothing=label_smoothing)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """``-weight (t log x + (1 - t) log(1 - x))`` with torch's log clamp at -100; mirrors
    ``torch.nn.functional.binary_cross_entropy``."""
    return _nn.binary_cross_entropy(input, target, weight,
                                    _reduction("binary_cross_entropy", size_average, reduce, reduction))


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """``binary_cross_entropy(sigmoid(input), target)`` in a stable form, ``pos_weight`` on the
    positive term; mirrors ``torch.nn.functional.binary_cross_entropy_with_logits``."""
    r = _reduction("binary_cross_entropy_with_logits", size_average, reduce, reduction)
    return _nn.binary_cross_entropy_with_logits(input, target, weight, pos_weight, r)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """``target (log target - input)`` (log-space ``input``); mirrors ``torch.nn.functional.kl_div``."""
    return _nn.kl_div(input, target, _reduction("kl_div", size_average, reduce, reduction), log_target)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-08, reduce=None,
                     reduction="mean"):
    """``exp(input) - target input`` (``log_input``) or ``input - target log(input + eps)``,
    plus Stirling's term when ``full``; mirrors ``torch.nn.functional.poisson_nll_loss``."""
    return _nn.poisson_nll_loss(input, target, log_input, full, eps,
                                _reduction("poisson_nll_loss", size_average, reduce, reduction))


def gaussian_nll_loss(input, target, var, full=False, eps=1e-06, reduction="mean"):
    """``(log max(var, eps) + (input - target)^2 / max(var, eps)) / 2``; mirrors
    ``torch.nn.functional.gaussian_nll_loss``."""
    return _nn.gaussian_nll_loss(input, target, var, full, eps, reduction)


def _unweighted(op, weight):
    """torch 2.13's elementwise ``weight`` of l1, mse and huber losses has no jaxrules op."""
    if weight is not None:
        raise ValueError(f"{op}: weight is not supported (multiply {op}(..., reduction='none') by it)")


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """``|input - target|``, reduced; mirrors ``torch.nn.functional.l1_loss`` (``weight`` must be None)."""
    _unweighted("l1_loss", weight)
    return _nn.l1_loss(input, target, _reduction("l1_loss", size_average, reduce, reduction))


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """``(input - target)^2``, reduced; mirrors ``torch.nn.functional.mse_loss`` (``weight`` must be None)."""
    _unweighted("mse_loss", weight)
    return _nn.mse_loss(input, target, _reduction("mse_loss", size_average, reduce, reduction))


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """``d^2 / 2`` for ``|d| < delta``, else ``delta (|d| - delta / 2)``; mirrors
    ``torch.nn.functional.huber_loss`` (``weight`` must be None)."""
    _unweighted("huber_loss", weight)
    return _nn.huber_loss(input, target, reduction, delta)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """``d^2 / (2 beta)`` for ``|d| < beta``, else ``|d| - beta / 2``; mirrors
    ``torch.nn.functional.smooth_l1_loss``."""
    return _nn.smooth_l1_loss(input, target, _reduction("smooth_l1_loss", size_average, reduce, reduction), beta)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """``log(1 + exp(-target input))``; mirrors ``torch.nn.functional.soft_margin_loss``."""
    return _nn.soft_margin_loss(input, target, _reduction("soft_margin_loss", size_average, reduce, reduction))


def _lengths(op, name, value, count):
    """``input_lengths`` / ``target_lengths`` as an integer vector of ``count`` entries."""
    v = jnp.asarray(value)
    if not jnp.issubdtype(v.dtype, jnp.integer):
        raise TypeError(f"{op}: {name} must hold integers, got {v.dtype}")
    if v.size != count or v.ndim > 1:
        raise ValueError(f"{op}: {name} must have one entry per sequence ({count}), got shape {v.shape}")
    return v.reshape(count)


def _padded_targets(op, targets, target_lengths, count):
    """Targets ``(N, S)`` from padded ones (as they are) or from torch's concatenated 1-D form
    (split at the concrete ``target_lengths``)."""
    t = jnp.asarray(targets)
    if not jnp.issubdtype(t.dtype, jnp.integer):
        raise TypeError(f"{op}: targets must hold integer class indices, got {t.dtype}")
    if t.ndim == 2:
        if t.shape[0] != count:
            raise ValueError(f"{op}: targets of shape {t.shape} must have one row per sequence ({count})")
        return t
    if t.ndim != 1:
        raise ValueError(f"{op}: targets must be (N, S) or the concatenated 1-D targets, got shape {t.shape}")
    lengths = np.asarray(target_lengths) if isinstance(target_lengths, list | tuple) else \
        _V.host_value(target_lengths)
    if lengths is None:
        raise TypeError(f"{op}: concatenated 1-D targets need concrete target_lengths (pass (N, S) padded "
                        "targets under jit)")
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    if lengths.sum() != t.shape[0]:
        raise ValueError(f"{op}: the target lengths sum to {int(lengths.sum())}, but targets has {t.shape[0]} entries")
    width = int(lengths.max()) if lengths.size else 0
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    index = np.minimum(offsets[:, None] + np.arange(width)[None], max(t.shape[0] - 1, 0))
    return jnp.where(np.arange(width)[None] < lengths[:, None], t[index] if t.shape[0] else 0, 0).astype(t.dtype)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """The connectionist temporal classification loss: per sequence ``-log p(target | x)``, the
    probability summed over every alignment of the target (blanks between, repeats merged) to
    ``input_lengths[n]`` steps of ``log_probs``, then ``reduction`` (``"mean"``: each loss over
    its target length, at least 1, then the mean; torch's). Mirrors
    ``torch.nn.functional.ctc_loss``.

    The derivative with respect to ``log_probs`` is the derivative of this function: minus the
    expected visits of each class at each step (``partials.ctc_occupancy``). torch's backward
    adds ``exp(log_probs)`` at the steps inside each sequence, which is not part of the
    derivative with respect to ``log_probs``; after a ``log_softmax`` (its usual input) the two
    give the same gradient of the logits. A sequence without an alignment (a target too long for
    its input) has an infinite loss and NaN gradients, or 0 and 0 with ``zero_infinity`` (torch's).
    Lengths and targets out of range (or a target holding the blank) are a ``ValueError`` when
    concrete; traced, they are checked inside ``jaxrules.checked`` only (elsewhere an input length
    past T counts as T, and an out-of-range target or length gives a NaN or infinite loss).

    Args:
        log_probs: ``(T, N, C)`` log-probabilities (``(T, C)``: one sequence); half precision
            computes in float32.
        targets: ``(N, S)`` class indices padded past each target's length, or the targets
            concatenated (1-D, with concrete ``target_lengths``); in ``[0, C)``.
        input_lengths: ``(N,)`` integers in ``[0, T]``.
        target_lengths: ``(N,)`` integers in ``[0, S]``.
        blank: the blank class, in ``[0, C)``.
        reduction: ``"none"`` (``(N,)``), ``"mean"`` or ``"sum"``.
        zero_infinity: infinite losses and their gradients become 0.
    """
    op = "ctc_loss"
    reduction = _reduction(op, None, None, reduction)
    _losses._check_reduction(op, reduction)
    zero_infinity = _V.flag(op, "zero_infinity", zero_infinity)
    lp = _V.array(op, "log_probs", log_probs)
    if lp.ndim not in (2, 3):
        raise ValueError(f"{op}: log_probs must be (T, N, C) or (T, C), got shape {lp.shape}")
    if lp.size == 0:
        raise ValueError(f"{op}: log_probs must not be empty (torch's refusal), got shape {lp.shape}")
    unbatched = lp.ndim == 2
    if unbatched:
        lp = lp[:, None]
        targets = jnp.asarray(targets)[None] if jnp.ndim(targets) == 1 else targets
    steps, count, classes = lp.shape
    if isinstance(blank, bool) or not isinstance(blank, int | np.integer) or not 0 <= blank < classes:
        raise ValueError(f"{op}: blank must be an int in [0, {classes}), got {blank!r}")
    input_lengths = _lengths(op, "input_lengths", input_lengths, count)
    target_lengths = _lengths(op, "target_lengths", target_lengths, count)
    padded = _padded_targets(op, targets, target_lengths, count)
    _V.index_range(op, "input_lengths", input_lengths, steps + 1)
    _V.index_range(op, "target_lengths", target_lengths, padded.shape[1] + 1)
    read = jnp.arange(padded.shape[1])[None] < target_lengths[:, None]  # the entries of each target
    _V.index_range(op, "targets", jnp.where(read, padded, 0), classes)
    blanks = _V.host_value(read & (padded == blank))
    if blanks is not None and np.any(blanks):
        raise ValueError(f"{op}: targets must not contain the blank class {blank} (torch's documented rule)")
    compute = _P.stat_dtype(lp.dtype)  # float32 for half precision
    ext, skip = _P.ctc_extended(padded, target_lengths, blank)
    nll = _losses._ctc_nll(lp.astype(compute), ext, skip, input_lengths, target_lengths, zero_infinity=zero_infinity)
    if zero_infinity:
        nll = jnp.where(jnp.isinf(nll), 0, nll)
    if reduction == "mean":
        nll = nll / jnp.maximum(target_lengths, 1).astype(compute)
    elif unbatched:
        nll = nll[0]
    return _losses._reduce(op, nll, reduction).astype(lp.dtype)


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                      reduction="mean"):
    """The multi-class hinge loss: per example ``sum_{d != y} w[y] max(0, margin - x[y] + x[d])^p
    / C`` (``y`` the target class, ``C`` the classes, ``p`` 1 or 2), then ``reduction``; mirrors
    ``torch.nn.functional.multi_margin_loss``. The derivative is torch's: 0 where the hinge is
    exactly 0. ``input`` is ``(N, C)``, ``(C,)`` or 0-d (one class; with a 0-d or one-element
    target); a target outside ``[0, C)`` is a ``ValueError`` when concrete (inside ``jaxrules.checked`` when traced;
    elsewhere that example's loss is NaN). The mean over an empty batch is NaN (torch 2.13
    returns uninitialized memory)."""
    op = "multi_margin_loss"
    reduction = _reduction(op, size_average, reduce, reduction)
    _losses._check_reduction(op, reduction)
    if isinstance(p, bool) or p not in (1, 2):
        raise ValueError(f"{op}: p must be 1 or 2 (torch's only p), got {p!r}")
    x = _V.array(op, "input", input)
    if x.ndim > 2 or (x.ndim and x.shape[-1] == 0):
        raise ValueError(f"{op}: input must be a non-empty vector or matrix, got shape {x.shape}")
    t = jnp.asarray(target)
    if not jnp.issubdtype(t.dtype, jnp.integer):
        raise TypeError(f"{op}: target must hold integer class indices, got {t.dtype}")
    rows = x.reshape(-1, x.shape[-1] if x.ndim else 1)
    classes = rows.shape[1]
    if t.size != rows.shape[0] or (x.ndim == 2 and t.ndim != 1) or t.ndim > 1:
        raise ValueError(f"{op}: target of shape {t.shape} does not match input of shape {x.shape}")
    _V.index_range(op, "target", t, classes)
    labels = t.reshape(-1)
    z = margin - jnp.take_along_axis(rows, jnp.clip(labels, 0, classes - 1)[:, None], axis=1) + rows
    hinge = jnp.where(z > 0, z if p == 1 else z * z, 0)
    hinge = jnp.where(jnp.arange(classes) == labels[:, None], 0, hinge)
    if weight is not None:
        w = _V.array(op, "weight", weight)
        if w.shape != (classes,):
            raise ValueError(f"{op}: weight must be one-dimensional with {classes} entries, got shape {w.shape}")
        hinge = hinge * w[jnp.clip(labels, 0, classes - 1)][:, None]
    per = jnp.sum(hinge, axis=1) / classes
    per = jnp.where((labels < 0) | (labels >= classes), jnp.nan, per).reshape(t.shape)
    return _losses._reduce(op, per, reduction)


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """The multi-class multi-label hinge loss: per example ``sum_j sum_{i not a target}
    max(0, 1 - (x[y_j] - x[i])) / C`` over the target classes ``y_j``, the entries of ``target``
    before its first -1 (a repeated class counts twice, as torch), then ``reduction``; mirrors
    ``torch.nn.functional.multilabel_margin_loss``. ``input`` is ``(N, C)``, ``(C,)`` or 0-d;
    ``target`` has its shape and integer entries in ``[-1, C)``: others are a ``ValueError`` when
    concrete (inside ``jaxrules.checked`` when traced; elsewhere that example's loss is NaN). The
    derivative is torch's: 0 where a hinge is exactly 0."""
    op = "multilabel_margin_loss"
    reduction = _reduction(op, size_average, reduce, reduction)
    _losses._check_reduction(op, reduction)
    x = _V.array(op, "input", input)
    t = jnp.asarray(target)
    if not jnp.issubdtype(t.dtype, jnp.integer):
        raise TypeError(f"{op}: target must hold integer class indices, got {t.dtype}")
    if x.ndim > 2 or t.shape != x.shape:
        raise ValueError(f"{op}: input must be 0-D, 1-D or 2-D and target of its shape, got {x.shape} and {t.shape}")
    classes = x.shape[-1] if x.ndim else 1
    _V.index_range(op, "target", t, classes, low=-1)
    rows, labels = x.reshape(-1, classes), t.reshape(-1, classes)
    listed = jnp.cumprod(labels >= 0, axis=1).astype(bool)  # the entries before the first -1
    safe = jnp.clip(labels, 0, classes - 1)
    is_target = jnp.any(listed[:, :, None] & (safe[:, :, None] == jnp.arange(classes)), axis=1)
    z = 1 - jnp.take_along_axis(rows, safe, axis=1)[:, :, None] + rows[:, None, :]
    counted = listed[:, :, None] & ~is_target[:, None, :] & (z > 0)
    per = jnp.sum(jnp.where(counted, z, 0), axis=(1, 2)) / classes
    per = jnp.where(jnp.any((labels < -1) | (labels >= classes), axis=1), jnp.nan, per)
    return _losses._reduce(op, per.reshape(x.shape[:-1]), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """The mean over classes of the binary cross entropy with logits; mirrors
    ``torch.nn.functional.multilabel_soft_margin_loss``."""
    r = _reduction("multilabel_soft_margin_loss", size_average, reduce, reduction)
    return _nn.multilabel_soft_margin_loss(input, target, weight, r)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    """``input`` where ``target == 1``, ``max(0, margin - input)`` where -1; mirrors
    ``torch.nn.functional.hinge_embedding_loss``."""
    r = _reduction("hinge_embedding_loss", size_average, reduce, reduction)
    return _nn.hinge_embedding_loss(input, target, margin, r)


def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """``max(0, -target (input1 - input2) + margin)``; mirrors
    ``torch.nn.functional.margin_ranking_loss``."""
    r = _reduction("margin_ranking_loss", size_average, reduce, reduction)
    return _nn.margin_ranking_loss(input1, input2, target, margin, r)


def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """``1 - cos`` where ``target == 1``, ``max(0, cos - margin)`` where -1; mirrors
    ``torch.nn.functional.cosine_embedding_loss``."""
    r = _reduction("cosine_embedding_loss", size_average, reduce, reduction)
    return _nn.cosine_embedding_loss(input1, input2, target, margin, r)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-06, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``pairwise_distance``; mirrors
    ``torch.nn.functional.triplet_margin_loss``."""
    r = _reduction("triplet_margin_loss", size_average, reduce, reduction)
    return _nn.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap, r)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None, margin=1.0, swap=False,
                                      reduction="mean"):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``d = distance_function`` (default
    ``pairwise_distance``; with ``swap``, ``d(a, n)`` is ``min(d(a, n), d(p, n))``), then
    ``reduction``; mirrors ``torch.nn.functional.triplet_margin_with_distance_loss``, whose
    composite form it is: the derivative at a zero hinge passes (torch's ``clamp_min``), at a tie
    of the swap's ``minimum`` it is split evenly. ``margin <= 0`` and arguments of different
    ranks are a ``ValueError``, as torch."""
    op = "triplet_margin_with_distance_loss"
    _losses._check_reduction(op, reduction)
    host = _V.host_value(margin)
    if host is not None and not np.all(host > 0):
        raise ValueError(f"{op}: margin must be greater than 0, got {margin!r}")
    a, p, n = (_V.array(op, name, v) for name, v in (("anchor", anchor), ("positive", positive),
                                                       ("negative", negative)))
    if not a.ndim == p.ndim == n.ndim:
        raise ValueError(f"{op}: anchor, positive and negative must have the same number of dimensions, got "
                         f"{a.ndim}-D, {p.ndim}-D and {n.ndim}-D")
    distance = pairwise_distance if distance_function is None else distance_function
    d_pos, d_neg = distance(a, p), distance(a, n)
    if swap:
        d_neg = jnp.minimum(d_neg, distance(p, n))
    z = margin + d_pos - d_neg
    return _losses._reduce(op, jnp.where(z >= 0, z, 0), reduction)
