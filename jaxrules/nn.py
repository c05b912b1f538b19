"""Drop-in replacements for ``jax.nn`` functions, plus torch.nn.functional ops JAX lacks
(normalization and losses with torch's signatures, channels at axis 1; softplus with torch's
``beta`` and ``threshold``; dropout with an explicit key)."""

# ruff: noqa: F401 (every name imported here is exported: __all__ is derived from them)

import jax.nn as _jax_namespace

from jaxrules import _namespace
from jaxrules.ops.activations import (
    celu,
    dropout,
    elu,
    gelu,
    glu,
    hard_sigmoid,
    hard_swish,
    hard_tanh,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    mish,
    prelu,
    relu,
    relu6,
    selu,
    silu,
    softmax,
    softplus,
    swish,
    threshold,
)
from jaxrules.ops.attention import bilinear, scaled_dot_product_attention
from jaxrules.ops.conv import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    adaptive_max_pool3d,
    avg_pool,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    conv,
    conv1d,
    conv2d,
    conv3d,
    conv_transpose,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    fold,
    max_pool,
    max_pool1d,
    max_pool2d,
    max_pool3d,
    unfold,
)
from jaxrules.ops.indexing import embedding, embedding_bag
from jaxrules.ops.linalg import linear
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
from jaxrules.ops.normalization import batch_norm, group_norm, instance_norm, layer_norm, rms_norm
from jaxrules.ops.norms import cosine_similarity, normalize, pairwise_distance, pdist
from jaxrules.ops.reductions import logsumexp
from jaxrules.ops.resampling import affine_grid, grid_sample, interpolate

# jaxrules' own names: every public name imported above (forward_jax_names then adds JAX's others).
__all__ = sorted(name for name in globals() if not name.startswith("_"))

_namespace.forward_jax_names(globals(), _jax_namespace)
