"""torch.linalg-style ops that ``jax.numpy.linalg`` lacks, and torch's signatures of the others
(``solve(A, B, *, left)``, ``solve_triangular(A, B, *, upper, left, unitriangular)``,
``cholesky_solve(B, L, upper)``)."""

from jaxrules import _namespace
from jaxrules import ops as _ops

_namespace.build(globals(), _ops)
