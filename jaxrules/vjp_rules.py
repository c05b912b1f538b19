"""VJP formulas (reverse mode), one per op, mirroring FunctionsManual.cpp, gathered here.

Signature: ``name_vjp(residuals, cotangent, **static) -> tuple`` with one cotangent (or
``None`` for zero) per array argument. Complex formulas are in JAX's convention, the conjugate
of torch's (``docs/design.md`` §2): each is the transpose of the JVP formula in
``jvp_rules``, and both apply the same factor from ``partials``. Broadcast arguments get
cotangents of the broadcast shape; the mechanism sums them back to the argument's shape.

Each formula is defined beside its op, in the op's family module ``jaxrules/ops/<family>.py``
(primal, residuals, JVP, VJP and ``define_op`` together), where the op names it. This module
defines none: importing it imports every family and gathers each public ``*_vjp`` function they
define under its name (``jaxrules.ops.formulas``; nothing to list by hand), with
``complement_adjoint`` (``partials.linalg``) and the ops the normalizations' VJP formulas call,
``normalize_backward`` and ``rms_norm_backward``.
"""

import typing as _typing

from jaxrules import ops as _ops
from jaxrules.ops.normalization import (  # noqa: F401 (re-exported)
    normalize_backward,
    normalize_backward_eps_op,
    normalize_backward_op,
    rms_norm_backward,
    rms_norm_backward_eps_op,
    rms_norm_backward_op,
)
from jaxrules.partials.linalg import complement_adjoint  # noqa: F401 (re-exported)

_BUILDING_BLOCKS = ["complement_adjoint", "normalize_backward", "normalize_backward_eps_op", "normalize_backward_op",
                    "rms_norm_backward", "rms_norm_backward_eps_op", "rms_norm_backward_op"]
globals().update(_ops.formulas("_vjp"))
__all__ = sorted([*_ops.formulas("_vjp"), *_BUILDING_BLOCKS])

if _typing.TYPE_CHECKING:  # static tools cannot run the gathering above: its names are Any to them

    def __getattr__(name: str) -> _typing.Any: ...
