"""Drop-in replacements for ``jax.numpy.linalg`` functions."""

import typing as _typing

import jax.numpy.linalg as _jax_namespace
from jax import Array
from jax.typing import ArrayLike

from jaxrules import _namespace
from jaxrules import ops as _ops
from jaxrules.ops import linalg as _linalg_ops


def slogdet(a: ArrayLike, *, method: str | None = None) -> tuple[Array, Array]:
    """``(sign, log|det A|)``; JVP ``d logabsdet = Re tr(A^{-1} dA)``, ``d sign = i Im
    tr(A^{-1} dA) sign`` (complex), VJP ``gA = g_logabsdet A^{-T}`` plus the complex sign term
    (seed ``slogdet_jvp`` / ``slogdet_backward``). Mirrors ``jax.numpy.linalg.slogdet``
    (``torch.linalg.slogdet``).

    Args:
        a: square matrices (..., n, n) (integer and boolean input is promoted to float).
        method: JAX's choice of factorization, None/``"lu"`` or ``"qr"``; both name the same
            function with the same derivatives, which jaxrules computes from an LU
            factorization (results agree to rounding).

    Returns:
        jax.numpy's ``SlogdetResult(sign, logabsdet)``, each of shape ``a.shape[:-2]``: sign 0
        and logabsdet -inf where A is singular.

    Raises:
        ValueError: when ``method`` is not one of those, or ``a`` is not square.
    """
    if method not in (None, "lu", "qr"):
        raise ValueError(f"slogdet: method must be None, 'lu' or 'qr', got {method!r}")
    return _linalg_ops.slogdet(a)


# the annotations above are evaluated objects: the typing names leave the namespace (JAX's own)
del Array, ArrayLike

if _typing.TYPE_CHECKING:  # static tools (mypy, pyright) see the names build binds as Any

    def __getattr__(name: str) -> _typing.Any: ...


# What the ops modules declare for jaxrules.numpy.linalg (exported_as), slogdet, then JAX's other names.
_namespace.build(globals(), _ops, _jax_namespace)
