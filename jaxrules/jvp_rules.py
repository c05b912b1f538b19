"""JVP formulas (forward mode), one per op, mirroring FunctionsManual.cpp, gathered here.

Signature: ``name_jvp(residuals, *tangents, **static) -> output tangent``. A tangent is ``None``
where it is zero. Each formula is linear in the tangents. The partial derivatives they apply
live in ``partials`` and are shared with the VJP formulas in ``vjp_rules``.

Each formula is defined beside its op, in the op's family module ``jaxrules/ops/<family>.py``
(primal, residuals, JVP, VJP and ``define_op`` together), where the op names it. This module
defines none: importing it imports every family and gathers each public ``*_jvp`` function they
define under its name (``jaxrules.ops.formulas``; nothing to list by hand), with
``complement_tangent``, the building block of svd's and qr's formulas in ``partials.linalg``.
"""

import typing as _typing

from jaxrules import ops as _ops
from jaxrules.partials.linalg import complement_tangent  # noqa: F401 (re-exported)

globals().update(_ops.formulas("_jvp"))
__all__ = sorted([*_ops.formulas("_jvp"), "complement_tangent"])

if _typing.TYPE_CHECKING:  # static tools cannot run the gathering above: its names are Any to them

    def __getattr__(name: str) -> _typing.Any: ...
