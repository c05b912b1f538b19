"""torch.linalg-style ops that ``jax.numpy.linalg`` lacks, and torch's signatures of the others
(``solve(A, B, *, left)``, ``solve_triangular(A, B, *, upper, left, unitriangular)``,
``cholesky_solve(B, L, upper)``)."""

from jaxrules.ops.linalg import (
    adjugate,
    cholesky,
    cholesky_inverse,
    det,
    eig,
    eigh,
    eigvals,
    eigvalsh,
    householder_product,
    inv,
    lstsq,
    lu_factor,
    lu_unpack,
    matrix_exp,
    matrix_power,
    ormqr,
    pinv,
    qr,
    slogdet,
    svd,
    svdvals,
)
from jaxrules.ops.linalg import torch_cholesky_solve as cholesky_solve
from jaxrules.ops.linalg import torch_solve as solve
from jaxrules.ops.linalg import torch_solve_triangular as solve_triangular
from jaxrules.ops.norms import cdist, dist, renorm, vector_norm

__all__ = [
    "adjugate", "cdist", "cholesky", "cholesky_inverse", "cholesky_solve", "det", "dist", "eig", "eigh",
    "eigvals", "eigvalsh", "householder_product", "inv", "lstsq", "lu_factor", "lu_unpack", "matrix_exp",
    "matrix_power", "ormqr", "pinv", "qr", "renorm", "slogdet", "solve", "solve_triangular", "svd", "svdvals",
    "vector_norm",
]
