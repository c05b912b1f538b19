"""Drop-in replacements for ``jax.numpy.linalg`` functions."""

from jaxrules.ops.norms import norm, vector_norm

__all__ = ["norm", "vector_norm"]
