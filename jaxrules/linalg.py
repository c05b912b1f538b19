"""torch.linalg-style ops that ``jax.numpy.linalg`` lacks, and torch's signatures of the others
(``solve(A, B, *, left)``, ``solve_triangular(A, B, *, upper, left, unitriangular)``,
``cholesky_solve(B, L, upper)``)."""

import typing as _typing

from jaxrules import _namespace
from jaxrules import ops as _ops

if _typing.TYPE_CHECKING:  # static tools (mypy, pyright) see the names build binds as Any

    def __getattr__(name: str) -> _typing.Any: ...


_namespace.build(globals(), _ops)
