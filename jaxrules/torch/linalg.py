"""``torch.linalg`` with torch's signatures: ``import jaxrules.torch.linalg as LA``.

Thin adapters over ``jaxrules.linalg`` and ``jaxrules.numpy.linalg`` (the same ops and
derivative rules): torch's argument names (``A``, ``B``, ``dim``, ``keepdim``), torch's 1-based
LU pivots, and torch's result tuples. No formula is computed here.
"""

from __future__ import annotations

import jax.numpy as jnp

import jaxrules.linalg as _L
import jaxrules.numpy.linalg as _nl
from jaxrules.ops.linalg import matrix_exp, svdvals

__all__ = [
    "cholesky", "det", "eig", "eigh", "eigvals", "eigvalsh", "householder_product", "inv", "lu_factor",
    "matrix_exp", "matrix_norm", "matrix_power", "norm", "pinv", "qr", "slogdet", "solve", "solve_triangular",
    "svd", "svdvals", "vector_norm",
]


def cholesky(A, *, upper=False, out=None):
    """``L`` with ``A = L L^H`` (``upper``: ``U = L^H``); mirrors ``torch.linalg.cholesky``."""
    _no_out("cholesky", out)
    return _L.cholesky(A, upper=upper)


def det(A, *, out=None):
    """``det A``; mirrors ``torch.linalg.det``."""
    _no_out("det", out)
    return _L.det(A)


def slogdet(A, *, out=None):
    """``(sign, log|det A|)``; mirrors ``torch.linalg.slogdet``."""
    _no_out("slogdet", out)
    return _L.slogdet(A)


def eig(A, *, out=None):
    """``(eigenvalues, eigenvectors)``, complex; mirrors ``torch.linalg.eig``."""
    _no_out("eig", out)
    return _L.eig(A)


def eigvals(A, *, out=None):
    """The eigenvalues, complex; mirrors ``torch.linalg.eigvals``."""
    _no_out("eigvals", out)
    return _L.eigvals(A)


def eigh(A, UPLO="L", *, out=None):
    """``(eigenvalues, eigenvectors)`` of a Hermitian matrix; mirrors ``torch.linalg.eigh``.
    The rules decompose ``(A + A^H)/2`` (``jaxrules.linalg.eigh``); torch reads only the
    ``UPLO`` triangle: the two agree on Hermitian input."""
    _no_out("eigh", out)
    return _L.eigh(A, UPLO)


def eigvalsh(A, UPLO="L", *, out=None):
    """The ascending eigenvalues of a Hermitian matrix (of ``(A + A^H)/2``, as ``eigh``); mirrors
    ``torch.linalg.eigvalsh``."""
    _no_out("eigvalsh", out)
    return _L.eigvalsh(A, UPLO)


def householder_product(A, tau, *, out=None):
    """The product of the Householder reflectors ``(A, tau)``; mirrors
    ``torch.linalg.householder_product``."""
    _no_out("householder_product", out)
    return _L.householder_product(A, tau)


def inv(A, *, out=None):
    """``A^{-1}``; mirrors ``torch.linalg.inv``."""
    _no_out("inv", out)
    return _L.inv(A)


def lu_factor(A, *, pivot=True, out=None):
    """``(LU, pivots)`` with torch's 1-based pivots (``jaxrules.linalg.lu_factor``'s are
    0-based); mirrors ``torch.linalg.lu_factor``. ``pivot=False`` is refused (CUDA-only in torch)."""
    _no_out("lu_factor", out)
    if pivot is not True:
        raise ValueError("lu_factor: pivot must be True (LU without pivoting is CUDA-only in torch)")
    lu, piv = _L.lu_factor(A)
    return lu, piv + 1


def matrix_power(A, n, *, out=None):
    """``A^n`` (``n`` an int, negative: of ``A^{-1}``); mirrors ``torch.linalg.matrix_power``."""
    _no_out("matrix_power", out)
    return _L.matrix_power(A, n)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    """``(sum |x|^ord)^(1/ord)`` over ``dim`` (all dims if None); mirrors
    ``torch.linalg.vector_norm``."""
    _no_out("vector_norm", out)
    x = jnp.asarray(x) if dtype is None else jnp.asarray(x).astype(dtype)
    return _L.vector_norm(x, axis=dim, keepdims=keepdim, ord=ord)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    """The matrix norm ``ord`` (``'fro'``, ``'nuc'``, ±1, ±2, ±inf) over the two dims ``dim``;
    mirrors ``torch.linalg.matrix_norm``."""
    _no_out("matrix_norm", out)
    A = jnp.asarray(A) if dtype is None else jnp.asarray(A).astype(dtype)
    return _nl.norm(A, ord=ord, axis=tuple(dim), keepdims=keepdim)


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    """``vector_norm`` for one dim (or a flattened input with ``ord=None``), ``matrix_norm`` for
    two; mirrors ``torch.linalg.norm``."""
    _no_out("norm", out)
    A = jnp.asarray(A) if dtype is None else jnp.asarray(A).astype(dtype)
    if dim is None and ord is None:
        return _L.vector_norm(A, axis=None, keepdims=keepdim, ord=2)
    if isinstance(dim, int):
        dim = (dim,)
    return _nl.norm(A, ord=ord, axis=None if dim is None else tuple(dim), keepdims=keepdim)


def pinv(A, *, atol=None, rtol=None, hermitian=False, out=None):
    """The Moore-Penrose pseudo-inverse, singular values below ``rtol * s_max`` dropped; mirrors
    ``torch.linalg.pinv`` (``atol`` must be None)."""
    _no_out("pinv", out)
    if atol is not None:
        raise ValueError("pinv: atol is not supported (use rtol)")
    return _L.pinv(A, rtol, hermitian)


def qr(A, mode="reduced", *, out=None):
    """``(Q, R)``; ``mode='r'`` gives an empty ``Q``, as torch; mirrors ``torch.linalg.qr``."""
    _no_out("qr", out)
    if mode == "r":
        return jnp.zeros((0,), jnp.asarray(A).dtype), _L.qr(A, mode="r")
    return tuple(_L.qr(A, mode=mode))


def solve(A, B, *, left=True, out=None):
    """``X`` with ``A X = B`` (``left=False``: ``X A = B``); mirrors ``torch.linalg.solve``."""
    _no_out("solve", out)
    return _L.solve(A, B, left=left)


def solve_triangular(A, B, *, upper, left=True, unitriangular=False, out=None):
    """``X`` with ``A X = B`` for triangular ``A``; mirrors ``torch.linalg.solve_triangular``."""
    _no_out("solve_triangular", out)
    return _L.solve_triangular(A, B, upper=upper, left=left, unitriangular=unitriangular)


def svd(A, full_matrices=True, *, driver=None, out=None):
    """``(U, S, Vh)``; mirrors ``torch.linalg.svd`` (``driver`` is CUDA-only in torch: None)."""
    _no_out("svd", out)
    if driver is not None:
        raise ValueError("svd: driver must be None (a CUDA-only choice in torch)")
    return tuple(_L.svd(A, full_matrices=full_matrices))


def _no_out(op, out):
    """JAX arrays are immutable: ``out=`` would leave the caller's array unchanged."""
    if out is not None:
        raise ValueError(f"{op}: out= cannot be mirrored (JAX arrays are immutable); it must be None")


matrix_exp = matrix_exp
svdvals = svdvals
