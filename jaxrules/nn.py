"""Drop-in replacements for ``jax.nn`` functions, plus torch.nn.functional ops JAX lacks
(normalization with torch's signatures, channels at axis 1)."""

from jaxrules.ops.normalization import batch_norm, group_norm, layer_norm
from jaxrules.ops.reductions import logsumexp

__all__ = ["batch_norm", "group_norm", "layer_norm", "logsumexp"]
