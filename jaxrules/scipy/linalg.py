"""Drop-in replacements for ``jax.scipy.linalg`` functions."""

from jaxrules.ops.linalg import cho_solve, expm, lu, lu_factor, lu_solve, solve_triangular

__all__ = ["cho_solve", "expm", "lu", "lu_factor", "lu_solve", "solve_triangular"]
