"""Drop-in replacements for ``jax.numpy.linalg`` functions."""

import jax.numpy.linalg as _jax_namespace

from jaxrules import _namespace
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

_namespace.forward_jax_names(globals(), _jax_namespace)
