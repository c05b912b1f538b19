"""jaxrules: JAX ops whose derivatives are hand-written rules mirroring PyTorch's manual autograd
formulas (FunctionsManual.cpp), composing with grad, jvp, vmap, jit and hessian.

Namespaces: ``jaxrules.numpy`` (and ``.linalg``), ``jaxrules.scipy.special``, ``jaxrules.nn``,
``jaxrules.linalg``; ``jaxrules.torch`` gives the same ops torch's signatures.
``jaxrules.testing`` checks any registered op (or your own); ``python -m jaxrules check`` checks
them all.
"""

import importlib as _importlib

from jaxrules.compat import warn_if_untested as _warn_if_untested

_warn_if_untested()  # once per process: a JAX newer than the newest tested one

from jaxrules.checking import RuntimeCheckError, checked  # noqa: E402
from jaxrules.differentiate import differentiate  # noqa: E402
from jaxrules.function import Function, FunctionCtx, VmapInfo  # noqa: E402
from jaxrules.mechanism import Op, define_op, formula_spy  # noqa: E402
from jaxrules.registry import OpRecord, Sample, SingularPoint, records, use_loader  # noqa: E402

__version__ = "0.1.0"

_SUBMODULES = ("linalg", "nested", "nn", "numpy", "ops", "scipy", "testing", "torch")  # imported on first use

__all__ = [
    "Function", "FunctionCtx", "Op", "OpRecord", "RuntimeCheckError", "Sample", "SingularPoint", "VmapInfo",
    "checked", "define_op",
    "differentiate", "formula_spy", "linalg", "nn",
    "numpy", "records", "scipy", "torch",
]


def __getattr__(name: str):
    """The namespaces load on first use: ``import jaxrules.numpy`` does not import ``jaxrules.nn``
    (nor ``jaxrules.nested`` and its Pallas kernels)."""
    if name in _SUBMODULES:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The package root is the top of the layers (docs/design.md §5): the one module that loads others
# by name, on first use (the namespaces above, the records package for the registry below).
def _load_op_records() -> None:
    """Import ``jaxrules.op_records``, which registers every record (what ``records()`` lists)."""
    _importlib.import_module(f"{__name__}.op_records")


use_loader(_load_op_records)
