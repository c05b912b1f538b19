"""Drop-in replacements for ``jax.nn`` functions, plus torch.nn.functional ops JAX lacks."""

from jaxrules.ops.reductions import logsumexp

__all__ = ["logsumexp"]
