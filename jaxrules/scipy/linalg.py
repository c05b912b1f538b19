"""Drop-in replacements for ``jax.scipy.linalg`` functions."""

from jaxrules.ops.linalg import cho_solve, expm, lu, lu_factor, lu_solve, solve_triangular
from jaxrules.ops.shape import block_diag

__all__ = ["block_diag", "cho_solve", "expm", "lu", "lu_factor", "lu_solve", "solve_triangular"]
