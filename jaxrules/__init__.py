"""jaxrules: JAX ops whose derivatives are hand-written rules mirroring PyTorch's manual autograd
formulas (FunctionsManual.cpp), composing with grad, jvp, vmap, jit and hessian.

Namespaces: ``jaxrules.numpy`` (and ``.linalg``), ``jaxrules.scipy.special``, ``jaxrules.nn``,
``jaxrules.linalg``. ``jaxrules.testing`` checks any registered op (or your own);
``python -m jaxrules check`` checks them all.
"""

from jaxrules import linalg, nn, numpy, scipy
from jaxrules.differentiate import differentiate
from jaxrules.function import Function, FunctionCtx, VmapInfo
from jaxrules.mechanism import Op, define_op, formula_spy
from jaxrules.registry import OpRecord, Sample, SingularPoint, records

__version__ = "0.1.0"

__all__ = [
    "Function", "FunctionCtx", "Op", "OpRecord", "Sample", "SingularPoint", "VmapInfo", "define_op",
    "differentiate", "formula_spy", "linalg", "nn",
    "numpy", "records", "scipy",
]
