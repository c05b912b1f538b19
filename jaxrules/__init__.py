"""jaxrules: JAX ops whose derivatives are hand-written rules mirroring PyTorch's manual autograd
formulas (FunctionsManual.cpp), composing with grad, jvp, vmap, jit and hessian.

Namespaces: ``jaxrules.numpy`` (and ``.linalg``), ``jaxrules.scipy.special``, ``jaxrules.nn``,
``jaxrules.linalg``. ``jaxrules.testing`` checks any registered op (or your own);
``python -m jaxrules check`` checks them all.
"""

from jaxrules.checking import RuntimeCheckError, checked
from jaxrules.differentiate import differentiate
from jaxrules.function import Function, FunctionCtx, VmapInfo
from jaxrules.mechanism import Op, define_op, formula_spy
from jaxrules.registry import OpRecord, Sample, SingularPoint, records

__version__ = "0.1.0"

_SUBMODULES = ("linalg", "nested", "nn", "numpy", "ops", "scipy", "testing")  # imported on first use

__all__ = [
    "Function", "FunctionCtx", "Op", "OpRecord", "RuntimeCheckError", "Sample", "SingularPoint", "VmapInfo",
    "checked", "define_op",
    "differentiate", "formula_spy", "linalg", "nn",
    "numpy", "records", "scipy",
]


def __getattr__(name: str):
    """The namespaces load on first use: ``import jaxrules.numpy`` does not import ``jaxrules.nn``
    (nor ``jaxrules.nested`` and its Pallas kernels)."""
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
