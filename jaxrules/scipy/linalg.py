"""Drop-in replacements for ``jax.scipy.linalg`` functions."""

from jaxrules.ops.linalg import cho_solve, solve_triangular

__all__ = ["cho_solve", "solve_triangular"]
