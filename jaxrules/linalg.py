"""torch.linalg-style ops that ``jax.numpy.linalg`` lacks, with torch's names and argument
order."""

from jaxrules.ops.norms import cdist, dist, renorm, vector_norm

__all__ = ["cdist", "dist", "renorm", "vector_norm"]
