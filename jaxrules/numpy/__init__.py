"""Drop-in replacements for ``jax.numpy`` functions, with hand-written derivative rules:
``import jaxrules.numpy as jnp``. Also ``var_mean``, ``std_mean`` and ``logcumsumexp``
(torch's names), which ``jax.numpy`` lacks. Every other public name of ``jax.numpy`` is JAX's own
object (``jaxrules.numpy.float32 is jax.numpy.float32``); the array-API aliases ``pow``,
``atan2`` are jaxrules' ``power``, ``arctan2``; ``concat`` runs ``concatenate``."""

import typing as _typing
from typing import Any

import jax as _jax
import jax.numpy as _jax_namespace
from jax import Array
from jax import lax as _lax
from jax.typing import ArrayLike, DTypeLike

from jaxrules import _namespace
from jaxrules import _validate as _V
from jaxrules import ops as _ops
from jaxrules.numpy import fft as fft  # the submodules: public names of their own
from jaxrules.numpy import linalg as linalg
from jaxrules.ops import linalg as _linalg_ops


def matmul(a: ArrayLike, b: ArrayLike, *, precision: Any = None, preferred_element_type: DTypeLike | None = None,
           out_sharding: None = None) -> Array:
    """The matrix product ``a @ b`` (1-D operands promoted as NumPy does, batch dims
    broadcast); VJP ``ga = g b^H``, ``gb = a^H g`` (seed ``mm_mat1_backward`` /
    ``mm_mat2_backward``, complex included; JAX's convention: transposes, not conjugates).
    Mirrors ``jax.numpy.matmul`` (``torch.matmul``).

    Args:
        a: the left operand, rank >= 1. Integer and boolean operands (both) give jax.numpy's
            exact product (no derivative); mixed ones are promoted to their common dtype.
        b: the right operand, rank >= 1; its second-to-last axis (its only one when 1-D)
            contracts with ``a``'s last.
        precision: JAX's: None or ``"default"``, ``"high"``, ``"highest"``, a
            ``lax.Precision`` or a pair of them, a ``lax.DotAlgorithmPreset`` or its name, a
            ``lax.DotAlgorithm``; the forward product and the derivative products (JVP and
            VJP) all run at it.
        preferred_element_type: an inexact dtype; the operands are cast to it when it is at
            least as wide (the product then accumulates in it; the cotangents are cast back),
            the result is cast to it when it is narrower.
        out_sharding: must be None (``ValueError`` otherwise).

    Returns:
        The product: the broadcast batch dims, then (m, p), with the axes of 1-D operands
        dropped.

    Raises:
        ValueError: when an operand is 0-d, the contracting dims differ (then also a
            ``TypeError``, jax.numpy's type: ``jaxrules._validate.ShapeTypeError``), the batch
            dims do not broadcast, or ``precision`` is not one of JAX's forms.
        TypeError: when ``preferred_element_type`` is not a dtype.
    """
    _V.unhonoured("matmul", out_sharding=out_sharding)
    a, b = _V.array("matmul", "a", a, inexact=False), _V.array("matmul", "b", b, inexact=False)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: operands must not be scalars (use multiply)")
    exact = not _jax_namespace.issubdtype(_jax_namespace.result_type(a, b), _jax_namespace.inexact)
    if exact and preferred_element_type is None:  # nothing to differentiate: jax.numpy's exact product
        return _jax_namespace.matmul(a, b, precision=precision)
    common = _jax_namespace.result_type(a, b)  # jax.numpy's promotion (int32 with float32: float32)
    a, b = a.astype(common), b.astype(common)
    if precision is not None and _default_precision(precision):
        precision = None
    if isinstance(precision, list):
        precision = tuple(precision)
    if preferred_element_type is None:
        return _linalg_ops.matmul(a, b, precision)
    try:
        target = _jax_namespace.dtype(preferred_element_type)
    except TypeError:
        raise TypeError(f"matmul: preferred_element_type must be a dtype, got {preferred_element_type!r}") from None
    if not _jax_namespace.issubdtype(target, _jax_namespace.inexact):
        raise ValueError(f"matmul: preferred_element_type must be an inexact dtype in jaxrules, got {target}")
    common = _jax_namespace.result_type(a, b)
    with _jax.numpy_dtype_promotion("standard"):  # the lattice's answer, also for a user with strict promotion
        wider = _jax_namespace.promote_types(common, target) == target
    if wider:
        return _linalg_ops.matmul(a.astype(target), b.astype(target), precision)
    return _linalg_ops.matmul(a, b, precision).astype(target)


def _default_precision(precision) -> bool:
    """Whether ``precision`` (JAX's forms: a ``lax.Precision`` or its name, a pair of them, a
    ``lax.DotAlgorithmPreset`` or its name, a ``lax.DotAlgorithm``) asks for the default."""
    # (this module's ``all``, ``max``, ... are jax.numpy's: no builtins here)
    items = precision if isinstance(precision, tuple) and len(precision) == 2 else (precision,)
    defaults = []
    for p in items:
        if isinstance(p, _lax.DotAlgorithm):
            defaults.append(False)
        elif isinstance(p, _lax.DotAlgorithmPreset):
            defaults.append(p == _lax.DotAlgorithmPreset.DEFAULT)
        elif isinstance(p, str) and p.upper() in _lax.DotAlgorithmPreset.__members__ and p.lower() != "default":
            defaults.append(False)
        else:
            try:
                defaults.append(_lax.Precision(p) == _lax.Precision.DEFAULT)
            except (ValueError, TypeError, KeyError):
                raise ValueError(f"matmul: precision must be None, a _lax.Precision, its name or a pair of them, or "
                                 f"a _lax.DotAlgorithm(Preset), got {precision!r}") from None
    return False not in defaults


# the annotations above are evaluated objects: the typing names leave the namespace (JAX's own)
del Any, Array, ArrayLike, DTypeLike

if _typing.TYPE_CHECKING:  # static tools (mypy, pyright) see the names build binds as Any

    def __getattr__(name: str) -> _typing.Any: ...


# What the ops modules declare for jaxrules.numpy (exported_as), matmul, the submodules, then JAX's other names.
_namespace.build(globals(), _ops, _jax_namespace)
