"""Drop-in replacements for ``jax.scipy.linalg`` functions."""

import jax.scipy.linalg as _jax_namespace

from jaxrules import _namespace
from jaxrules.ops.linalg import cho_solve, expm, lu, lu_factor, lu_solve, solve_triangular
from jaxrules.ops.shape import block_diag

__all__ = ["block_diag", "cho_solve", "expm", "lu", "lu_factor", "lu_solve", "solve_triangular"]

_namespace.forward_jax_names(globals(), _jax_namespace)
