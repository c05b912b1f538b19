"""Drop-in replacements for ``jax.numpy.linalg`` functions."""

from jaxrules.ops.linalg import (
    cholesky,
    det,
    eig,
    eigh,
    eigvals,
    eigvalsh,
    inv,
    lstsq,
    pinv,
    qr,
    slogdet,
    solve,
    svd,
    svdvals,
)
from jaxrules.ops.norms import norm, vector_norm

__all__ = [
    "cholesky", "det", "eig", "eigh", "eigvals", "eigvalsh", "inv", "lstsq", "norm", "pinv", "qr", "slogdet", "solve",
    "svd", "svdvals", "vector_norm",
]
