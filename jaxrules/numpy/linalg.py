"""Drop-in replacements for ``jax.numpy.linalg`` functions."""

import jax.numpy.linalg as _jax_namespace

from jaxrules import _namespace
from jaxrules.ops import linalg as _linalg_ops
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
    solve,
    svd,
    svdvals,
)
from jaxrules.ops.norms import norm, vector_norm

__all__ = [
    "cholesky", "det", "eig", "eigh", "eigvals", "eigvalsh", "inv", "lstsq", "norm", "pinv", "qr", "slogdet", "solve",
    "svd", "svdvals", "vector_norm",
]


def slogdet(a, *, method=None):
    """``jax.numpy.linalg.slogdet`` -> ``(sign, logabsdet)`` with seed ``slogdet_jvp`` /
    ``slogdet_backward`` (complex sign gradient included). ``method``: JAX's choice of
    factorization, ``None``/``"lu"`` or ``"qr"``; both name the same function with the same
    derivatives, which jaxrules computes from an LU factorization (results agree to rounding)."""
    if method not in (None, "lu", "qr"):
        raise ValueError(f"slogdet: method must be None, 'lu' or 'qr', got {method!r}")
    return _linalg_ops.slogdet(a)


_namespace.forward_jax_names(globals(), _jax_namespace)
